"""Compiled kernels (counting sorts, runs to results) and where numba caches them."""
