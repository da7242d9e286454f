"""A single-cell analysis's first steps over a store: highly variable genes and PCA, each a pass
(or two) over the store's values with the elementwise steps applied as they are read."""
