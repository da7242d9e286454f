"""Compiled sorting kernels shared by the writer's shuffle and the reader's output.

Counts per key are always known before values move (from a bincount, or from ``indptr``), so a
stable counting sort puts every value straight into its place in one O(n) pass, where a
comparison sort would be O(n log n) and move each array once more.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import numpy.typing as npt

__all__ = ["sort_by_key", "transpose_runs"]


@numba.njit(cache=True, nogil=True)
def _starts(counts: Any) -> Any:
    """Where each key's values begin in the sorted output: the exclusive running sum of counts."""
    offsets = np.empty(len(counts), dtype=np.int64)
    running = 0
    for key in range(len(counts)):
        offsets[key] = running
        running += counts[key]
    return offsets


@numba.njit(cache=True, nogil=True)
def _scatter(keys: Any, counts: Any, rows: Any, data: Any) -> Any:
    """Stable counting sort of the columns of ``rows`` and of ``data`` by ``keys``."""
    offsets = _starts(counts)
    out_rows = np.empty_like(rows)
    out_data = np.empty_like(data)
    for i in range(len(keys)):
        j = offsets[keys[i]]
        for r in range(rows.shape[0]):
            out_rows[r, j] = rows[r, i]
        out_data[j] = data[i]
        offsets[keys[i]] = j + 1
    return out_rows, out_data


def sort_by_key(
    keys: npt.NDArray[Any], counts: npt.NDArray[Any], rows: npt.NDArray[Any], data: npt.NDArray[Any]
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """``rows`` (columns) and ``data`` stably sorted by ``keys`` in ``[0, len(counts))``.

    Returned as they are when ``keys`` is already non-decreasing, which the common inputs are.
    """
    if keys.size < 2 or bool(np.all(keys[1:] >= keys[:-1])):
        return rows, data
    try:
        scattered: tuple[npt.NDArray[Any], npt.NDArray[Any]] = _scatter(keys, counts, rows, data)
        return scattered
    except (numba.core.errors.TypingError, NotImplementedError):  # a dtype numba lacks: float16
        order = np.argsort(keys, kind="stable")
        return rows[:, order], data[order]


@numba.njit(cache=True, nogil=True)
def _transpose(keys: Any, lengths: Any, counts: Any, data: Any) -> Any:
    offsets = _starts(counts)
    coords = np.empty((2, len(keys)), dtype=np.int64)
    out_data = np.empty_like(data)
    i = 0
    for run in range(len(lengths)):
        last = -1
        for _ in range(lengths[run]):
            key = keys[i]
            if key <= last:  # a run not strictly ascending: the caller sorts it the long way
                return coords, out_data, False
            last = key
            j = offsets[key]
            coords[1, j] = run
            out_data[j] = data[i]
            offsets[key] = j + 1
            i += 1
    j = 0
    for key in range(len(counts)):
        for _ in range(counts[key]):
            coords[0, j] = key
            j += 1
    return coords, out_data, True


def transpose_runs(
    keys: npt.NDArray[Any], lengths: npt.NDArray[Any], data: npt.NDArray[Any], extent: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]] | None:
    """Runs of a rank-2 layout read across: coordinates ``(key, run)`` and values in C order.

    The runs (``lengths`` values each, ``keys`` ascending within each, in ``[0, extent)``) are
    the columns of a CSC read; C order is by key, then run. One counting sort writes only the run
    number and the value at random places, where a general sort would move every coordinate row;
    the key row is laid down in order afterwards. None when a run is not strictly ascending or a
    dtype numba cannot hold: the caller then sorts the general way.
    """
    counts = np.bincount(keys, minlength=extent)
    try:
        coords, out, ordered = _transpose(keys, lengths, counts, data)
    except (numba.core.errors.TypingError, NotImplementedError):  # a dtype numba lacks
        return None
    return (coords, out) if ordered else None
