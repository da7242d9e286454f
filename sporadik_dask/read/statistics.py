"""Per-position statistics along a layout's indexed axis: value counts, maxima and totals.

Counts are ``diff(indptr)`` and maxima are stored at write time, so neither reads a value;
totals read ``data`` and ``indptr`` alone, never an index, and nothing is sorted.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import zarr

from sporadik_dask.planning.budgets import TOTALS_BATCH
from sporadik_dask.read.routing import Brackets
from sporadik_dask.store.chunks import read_visited
from sporadik_dask.store.describe import LayoutDescription

__all__ = ["accumulator", "counts", "totals"]


def accumulator(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The 64-bit type sums of ``dtype`` accumulate in."""
    kinds = {"f": np.float64, "c": np.complex128, "u": np.uint64}
    return np.dtype(kinds.get(dtype.kind, np.int64))


def counts(brackets: Brackets) -> npt.NDArray[np.int64]:
    """Values per position, from every position's brackets."""
    lo, hi = brackets
    return hi - lo


def totals(
    layout: LayoutDescription, brackets: Brackets, data: zarr.Array[Any]
) -> npt.NDArray[Any]:
    """Sum of the values of each position's run, from the brackets of every position.

    ``TOTALS_BATCH`` chunks of ``data`` at a time, so memory stays bounded whatever the store's
    size, each chunk added up by the thread that decoded it, while it is in that core's cache:
    no chunk is joined to another or copied (what the add costs beside the decode and a join:
    docs/benchmarks.md, "Numbers behind the code's choices"). Sums accumulate in 64 bits
    (float64, int64 or uint64).

    1. Decode a batch of chunks, each on a thread of its own.
    2. In that thread, find the positions whose runs meet the chunk, values ``[start, stop)``,
       by bisecting ``indptr`` (sorted), so each chunk costs its own runs, not every position,
       and add each such run's part of the chunk by ``np.add.reduceat`` (runs are consecutive).
    3. Add each chunk's sums into the result, a chunk at a time: a run cut by a chunk's edge
       gets a sum from each chunk it meets.
    """
    hi = brackets[1]
    result = np.zeros(layout.positions, dtype=accumulator(layout.dtype))
    chunk = layout.chunks["data"]
    end = int(hi[-1]) if hi.size else 0  # values past the last run belong to no position
    chunk_count = -(-end // chunk)
    for first in range(0, chunk_count, TOTALS_BATCH):
        ids = np.arange(first, min(first + TOTALS_BATCH, chunk_count), dtype=np.int64)
        _add_chunks(data, ids, brackets, end, result)
    return result


def _add_chunks(
    data: zarr.Array[Any],
    ids: npt.NDArray[np.int64],
    brackets: Brackets,
    end: int,
    result: npt.NDArray[Any],
) -> None:
    """Steps 1-3 of :func:`totals` for the chunks ``ids`` of ``data``."""
    lo, hi = brackets
    chunk = int(data.chunks[0])
    sums: list[tuple[npt.NDArray[np.int64], npt.NDArray[Any]] | None] = [None] * len(ids)

    def add(_: int, k: int, values: npt.NDArray[Any]) -> None:
        start = int(ids[k]) * chunk
        stop = min(start + chunk, end)
        first_p = int(np.searchsorted(hi, start, side="right"))
        last_p = int(np.searchsorted(lo, stop, side="left"))
        since = np.clip(lo[first_p:last_p], start, stop) - start
        until = np.clip(hi[first_p:last_p], start, stop) - start
        meet = np.flatnonzero(until > since)
        if meet.size:
            added = np.add.reduceat(values[: stop - start], since[meet], dtype=result.dtype)
            sums[k] = (first_p + meet, added)

    read_visited([(data, ids)], add)
    for found in sums:
        if found is not None:
            result[found[0]] += found[1]
