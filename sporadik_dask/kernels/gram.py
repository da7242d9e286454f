"""A sparse matrix's Gram matrix ``Xᵀ X`` and column sums, added in place to a packed triangle.

scipy's product of two sparse matrices makes a sparse result in two passes (its size, then its
values), then ``toarray``, most of a PCA span's time (docs/benchmarks.md, "Numbers behind the
code's choices"). Each row's pairs of values add straight into the result here. The result is
symmetric, so only its upper triangle is kept, packed row by row (``i <= j``: row ``i`` from its
diagonal on, rows end to end): half the memory of the square, each row's pairs added along one
row as in the square, and, read as its transpose, LAPACK's packed lower triangle (``'L'``),
which BLAS's ``dspmv`` multiplies by as it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.kernels.compiled import kernel

__all__ = ["add_gram", "add_outer", "diagonal", "packed_size", "row_starts", "unpacked"]


def packed_size(n: int) -> int:
    """Entries of the packed upper triangle of an ``n`` by ``n`` matrix."""
    return n * (n + 1) // 2


def row_starts(n: int) -> npt.NDArray[np.int64]:
    """Where each row's diagonal entry sits in the packed upper triangle, less its row: entry
    ``(i, j)``, ``i <= j``, is at ``row_starts(n)[i] + j``."""
    rows = np.arange(n, dtype=np.int64)
    return rows * n - rows * (rows - 1) // 2 - rows


@kernel
def _add_pairs(indptr: Any, indices: Any, data: Any, sums: Any, starts: Any, out: Any) -> None:
    for row in range(len(indptr) - 1):
        lo, hi = indptr[row], indptr[row + 1]
        for a in range(lo, hi):
            i, value = indices[a], np.float64(data[a])
            sums[i] += value
            start = starts[i]
            for b in range(a, hi):
                j = indices[b]
                product = value * np.float64(data[b])
                if i <= j:
                    out[start + j] += product
                else:
                    out[starts[j] + i] += product


@kernel
def _add_outer(out: Any, vector: Any, scale: float, starts: Any) -> None:
    for i in range(len(vector)):
        scaled = scale * vector[i]
        start = starts[i]
        for j in range(i, len(vector)):
            out[start + j] += scaled * vector[j]


def add_gram(
    indptr: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    data: npt.NDArray[Any],
    sums: npt.NDArray[np.float64],
    out: npt.NDArray[np.float64],
) -> None:
    """Add a CSR matrix's (no duplicate entries) column sums to ``sums`` and its Gram matrix
    ``Xᵀ X`` to ``out`` (packed upper triangle), in float64.

    1. For each row, each pair of its stored values ``a <= b`` (in storage order) adds
       ``data[a] * data[b]`` at ``(min, max)`` of their columns: each unordered pair once, the
       diagonal once, whatever order the row's columns are stored in.
    2. Each stored value adds to its column's sum.
    """
    _add_pairs(indptr, indices, data, sums, row_starts(sums.size), out)


def add_outer(out: npt.NDArray[np.float64], vector: npt.NDArray[np.float64], scale: float) -> None:
    """Add ``scale * outer(vector, vector)`` to ``out`` (packed upper triangle), making no
    square matrix."""
    vector = np.asarray(vector, dtype=np.float64)
    _add_outer(out, vector, float(scale), row_starts(vector.size))


def diagonal(packed: npt.NDArray[np.float64], n: int) -> npt.NDArray[np.float64]:
    """The diagonal of a packed upper triangle."""
    found: npt.NDArray[np.float64] = packed[row_starts(n) + np.arange(n)]
    return found


def unpacked(packed: npt.NDArray[np.float64], n: int) -> npt.NDArray[np.float64]:
    """The symmetric ``n`` by ``n`` matrix of a packed upper triangle."""
    out = np.zeros((n, n), dtype=np.float64)
    rows, columns = np.triu_indices(n)
    out[rows, columns] = packed
    out[columns, rows] = out[rows, columns]
    return out
