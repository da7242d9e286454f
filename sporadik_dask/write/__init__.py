"""Writing a store: the public entry points, the inputs accepted, the dask graph, its
tasks, spilling, the new store's documents and the overwrite rule."""
