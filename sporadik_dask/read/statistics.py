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
from sporadik_dask.store.chunks import read_chunks
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
    size. Sums accumulate in 64 bits (float64, int64 or uint64).

    1. Decode a batch of consecutive chunks, values ``[start, stop)``.
    2. Find the positions whose runs meet it by bisecting ``indptr`` (sorted), so each batch
       costs its own runs, not every position.
    3. Add each such run's part of the batch, by ``np.add.reduceat`` (runs are consecutive).
    """
    lo, hi = brackets
    result = np.zeros(layout.positions, dtype=accumulator(layout.dtype))
    chunk = layout.chunks["data"]
    end = int(hi[-1]) if hi.size else 0  # values past the last run belong to no position
    chunk_count = -(-end // chunk)
    for first in range(0, chunk_count, TOTALS_BATCH):
        ids = np.arange(first, min(first + TOTALS_BATCH, chunk_count), dtype=np.int64)
        (decoded,) = read_chunks([(data, ids)])
        start = first * chunk
        values = np.concatenate(decoded)[: end - start]
        stop = start + values.size
        first_p = int(np.searchsorted(hi, start, side="right"))
        last_p = int(np.searchsorted(lo, stop, side="left"))
        since = np.clip(lo[first_p:last_p], start, stop) - start
        until = np.clip(hi[first_p:last_p], start, stop) - start
        meet = np.flatnonzero(until > since)
        if meet.size:
            result[first_p + meet] += np.add.reduceat(values, since[meet], dtype=result.dtype)
    return result
