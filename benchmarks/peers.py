"""What the request-counting benchmarks run for the peers: plain zarr read as a careful user
would, and anndata's lazy dask arrays of scipy chunks summed per block."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def plain_zarr(group: Any, axis: int) -> dict[str, Callable[[Any], Any]]:
    """What a careful zarr user does with a compressed layout: slice ``indptr``, then each run.

    ``one`` reads one position, ``batch`` a list of positions (one read per run, after all of
    ``indptr``), ``span`` a range ``(start, stop)`` of positions, ``scan`` every array whole.
    """
    layout = group[f"layouts/axis{axis}"]
    indptr, indices, data = (layout[name] for name in ("indptr", "indices", "data"))

    def one(p: int) -> Any:
        lo, hi = indptr[p : p + 2]
        return indices[lo:hi], data[lo:hi]

    def batch(positions: Any) -> Any:
        bounds = indptr[:]
        return [
            (indices[bounds[p] : bounds[p + 1]], data[bounds[p] : bounds[p + 1]]) for p in positions
        ]

    def span(positions: tuple[int, int]) -> Any:
        lo, hi = indptr[positions[0]], indptr[positions[1]]
        return indices[lo:hi], data[lo:hi]

    def scan(_: Any) -> Any:
        return data[:], indices[:], indptr[:]

    return {"one": one, "batch": batch, "span": span, "scan": scan}


def block_sums(x: Any) -> Any:
    """Sums per column of a dask array of scipy chunks (scipy has no ``keepdims``)."""
    import dask

    return dask.compute(*[dask.delayed(lambda b: b.sum(axis=0))(b) for b in x.to_delayed().ravel()])
