"""The packed Gram matrix and column sums of a CSR matrix equal scipy's product and sums, rows in
any column order; the packed outer product and its unpacking equal numpy's."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sporadik_dask.kernels.gram import add_gram, add_outer, diagonal, packed_size, unpacked


@pytest.mark.parametrize("shuffled", [False, True], ids=["sorted columns", "shuffled columns"])
@pytest.mark.parametrize("shape", [(40, 7), (1, 5), (0, 3), (30, 1)])
def test_the_gram_matrix_and_column_sums_equal_scipys(
    shape: tuple[int, int], shuffled: bool
) -> None:
    rng = np.random.default_rng(sum(shape))
    x = sp.random(*shape, density=0.4, format="csr", random_state=rng, dtype=np.float32)
    if shuffled:  # the same matrix, each row's entries stored in another order
        for row in range(shape[0]):
            lo, hi = x.indptr[row], x.indptr[row + 1]
            order = rng.permutation(hi - lo) + lo
            x.indices[lo:hi], x.data[lo:hi] = x.indices[order], x.data[order]
        x.has_sorted_indices = False
    genes = shape[1]
    sums, packed = np.ones(genes), np.ones(packed_size(genes))  # added to, not replaced
    add_gram(x.indptr, x.indices, x.data, sums, packed)
    wide = x.astype(np.float64)
    expected = (wide.T @ wide).toarray() + 1
    np.testing.assert_allclose(unpacked(packed, genes), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(diagonal(packed, genes), np.diagonal(expected), rtol=1e-12)
    np.testing.assert_allclose(sums, np.asarray(wide.sum(axis=0)).ravel() + 1, rtol=1e-12)


def test_a_packed_outer_product_adds_as_numpys() -> None:
    rng = np.random.default_rng(0)
    square = rng.standard_normal((6, 6))
    square = square + square.T
    vector = rng.standard_normal(6)
    packed = square[np.triu_indices(6)]  # the upper triangle, row by row
    np.testing.assert_array_equal(unpacked(packed, 6), square)
    add_outer(packed, vector, -2.5)
    np.testing.assert_allclose(unpacked(packed, 6), square - 2.5 * np.outer(vector, vector))
