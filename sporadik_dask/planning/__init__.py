"""Pure planning: counts to partitions and zarr-chunk regions, and every size."""
