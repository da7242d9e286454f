"""A sparse matrix's Gram matrix ``Xᵀ X``, dense, from its CSR arrays in one pass over its rows.

scipy's product of two sparse matrices makes a sparse result in two passes (its size, then its
values), then ``toarray``, most of a PCA span's time (docs/benchmarks.md, "Numbers behind the code's
choices"). Each row's pairs of values add straight into the dense result here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.kernels.compiled import kernel

__all__ = ["gram"]


@kernel
def _add_pairs(indptr: Any, indices: Any, data: Any, out: Any) -> None:
    for row in range(len(indptr) - 1):
        lo, hi = indptr[row], indptr[row + 1]
        for a in range(lo, hi):
            i, value = indices[a], data[a]
            for b in range(a, hi):
                out[i, indices[b]] += value * data[b]


def gram(x: Any) -> npt.NDArray[np.float64]:
    """``(x.T @ x).toarray()`` of a scipy CSR matrix without duplicate entries, in float64.

    1. For each row, each pair of its stored values ``a <= b`` (in storage order) adds
       ``data[a] * data[b]`` at ``(indices[a], indices[b])``: each unordered pair once.
    2. The result is that plus its transpose less its diagonal (counted twice).
    """
    genes = x.shape[1]
    out = np.zeros((genes, genes), dtype=np.float64)
    data = np.asarray(x.data, dtype=np.float64)
    _add_pairs(x.indptr.astype(np.int64), x.indices.astype(np.int64), data, out)
    diagonal = np.diagonal(out).copy()
    out += out.T
    out[np.diag_indices(genes)] -= diagonal
    return out
