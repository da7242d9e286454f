"""The I/O boundary: opening a store, zarr's private names, whole zarr chunks encoded
and decoded in batches, a store's description and labels."""
