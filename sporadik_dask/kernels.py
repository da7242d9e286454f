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

__all__ = ["sort_by_key"]


@numba.njit(cache=True, nogil=True)
def _scatter(keys: Any, counts: Any, rows: Any, data: Any) -> Any:
    """Stable counting sort of the columns of ``rows`` and of ``data`` by ``keys``."""
    offsets = np.empty(len(counts), dtype=np.int64)
    running = 0
    for key in range(len(counts)):
        offsets[key] = running
        running += counts[key]
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
        return _scatter(keys, counts, rows, data)
    except numba.core.errors.TypingError:  # a dtype numba cannot hold, such as float16
        order = np.argsort(keys, kind="stable")
        return rows[:, order], data[order]
