"""The dense Gram matrix of a CSR matrix equals scipy's product, rows in any column order."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sporadik_dask.kernels.gram import gram


@pytest.mark.parametrize("shuffled", [False, True], ids=["sorted columns", "shuffled columns"])
@pytest.mark.parametrize("shape", [(40, 7), (1, 5), (0, 3), (30, 1)])
def test_the_gram_matrix_equals_scipys_product(shape: tuple[int, int], shuffled: bool) -> None:
    rng = np.random.default_rng(sum(shape))
    x = sp.random(*shape, density=0.4, format="csr", random_state=rng, dtype=np.float32)
    if shuffled:  # the same matrix, each row's entries stored in another order
        for row in range(shape[0]):
            lo, hi = x.indptr[row], x.indptr[row + 1]
            order = rng.permutation(hi - lo) + lo
            x.indices[lo:hi], x.data[lo:hi] = x.indices[order], x.data[order]
        x.has_sorted_indices = False
    wide = x.astype(np.float64)
    np.testing.assert_allclose(gram(x), (wide.T @ wide).toarray(), rtol=1e-12, atol=1e-12)
