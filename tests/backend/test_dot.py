"""``xr.dot`` and ``@`` of a sporadik variable with a dense one: numpy's values, a dense result,
lazily and under ``chunks=``, along either axis; other products left to xarray."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import sparse
import xarray as xr

import sporadik_dask as sd
from tests.helpers import random_dense

CHUNKS = [None, {}, {"cell": 9}, {"cell": 9, "gene": 7}]
CHUNK_IDS = ["lazy", "chunks={}", "chunks=9", "chunks=9x7"]


@pytest.fixture(scope="module", params=[(2, np.int32), (3, np.float32)], ids=["rank2", "rank3"])
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, npt.NDArray[Any]]:
    rank, dtype = request.param
    shape = (70, 80, 4)[:rank]  # sums over at least 64 positions: dense under dask too
    dense = random_dense(np.random.default_rng(rank), shape, 0.2, dtype)
    path = tmp_path_factory.mktemp("p") / "s.zarr"
    dims = ("cell", "gene", "spot")[:rank]
    sd.to_sporadik(xr.DataArray(sparse.COO.from_numpy(dense), dims=dims, name="x"), path)
    return path, dense


def _open(path: Path, chunks: Any) -> xr.DataArray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # chunks that split stored chunks
        return xr.open_dataset(path, engine="sporadik", chunks=chunks)["x"]


def _values(result: xr.DataArray) -> npt.NDArray[Any]:
    data = result.data
    if hasattr(data, "_meta"):  # dask: the blocks must be dense, as the result is
        assert isinstance(data._meta, np.ndarray), type(data._meta)
        data = data.compute()
    assert isinstance(data, np.ndarray), type(data)
    return data


@pytest.mark.slow
@pytest.mark.parametrize("chunks", CHUNKS, ids=CHUNK_IDS)
def test_a_product_with_a_dense_matrix_is_dense_and_equals_numpy(
    store: tuple[Path, npt.NDArray[Any]], chunks: Any
) -> None:
    path, dense = store
    x = _open(path, chunks)
    rng = np.random.default_rng(0)
    loadings = xr.DataArray(rng.standard_normal((dense.shape[1], 5)), dims=("gene", "pc"))
    per_cell = xr.DataArray(rng.standard_normal(dense.shape[0]), dims=("cell",))
    cases = [
        (xr.dot(x, loadings, dim="gene"), np.einsum("cg...,gp->c...p", dense, loadings.values)),
        (xr.dot(loadings, x), np.einsum("gp,cg...->pc...", loadings.values, dense)),
        (x @ loadings, np.einsum("cg...,gp->c...p", dense, loadings.values)),
        (xr.dot(x, per_cell), np.einsum("cg...,c->g...", dense, per_cell.values)),
        (xr.dot(per_cell, x), np.einsum("c,cg...->g...", per_cell.values, dense)),
    ]
    for result, expected in cases:
        got = _values(result)
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("chunks", CHUNKS[:3], ids=CHUNK_IDS[:3])
def test_a_selection_times_dense_keeps_its_labels_and_order(
    store: tuple[Path, npt.NDArray[Any]], chunks: Any
) -> None:
    path, dense = store
    x = _open(path, chunks).isel(cell=[5, 2, 2, 30])
    weights = np.arange(dense.shape[1], dtype=np.float64)
    result = xr.dot(x, xr.DataArray(weights, dims=("gene",)))
    assert result.dims == x.dims[:1] + x.dims[2:]
    expected = np.einsum("cg...,g->c...", dense[[5, 2, 2, 30]], weights)
    np.testing.assert_allclose(_values(result), expected, rtol=1e-5)


@pytest.mark.parametrize("chunks", CHUNKS[:3], ids=CHUNK_IDS[:3])
def test_dot_that_are_not_one_sparse_times_one_dense_stay_xarrays(
    store: tuple[Path, npt.NDArray[Any]], chunks: Any
) -> None:
    """Both sparse, or a dim both keep (a batch dim): xarray's own einsum, same values."""
    path, dense = store
    if dense.ndim > 2 and chunks is None:
        return  # xarray moves the kept dims with ``sparse.transpose``, which sparse lacks
    x = _open(path, chunks)
    both = xr.dot(x, x, dim="gene")  # cell (and spot) kept by both
    expected = np.einsum("cg...,cg...->c...", dense, dense)
    got = both.data.compute() if hasattr(both.data, "compute") else both.data
    got = got.todense() if isinstance(got, sparse.COO) else got
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), expected, rtol=1e-5)
    batch = xr.DataArray(np.ones(dense.shape[:2]), dims=("cell", "gene"))
    got = xr.dot(x, batch, dim="gene").data
    got = got.compute() if hasattr(got, "compute") else got
    got = got.todense() if isinstance(got, sparse.COO) else got
    expected = np.einsum("cg...,cg->c...", dense, batch.values)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), expected, rtol=1e-5)


def test_a_product_with_a_sparse_of_another_fill_value_is_sparses() -> None:
    """Not a matrix product of the stored values: sparse's einsum, which refuses it."""
    from sporadik_dask.backend import patches

    patches.install()
    dense = random_dense(np.random.default_rng(3), (6, 5), 0.4, np.float64)
    x = xr.DataArray(sparse.COO.from_numpy(dense, fill_value=0.0) + 1.0, dims=("a", "b"))
    assert x.data.fill_value == 1.0
    w = xr.DataArray(np.arange(5.0), dims=("b",))
    with pytest.raises(ValueError, match="requires zero fill values"):
        xr.dot(x, w)


def test_sporadik_pushdown_false_hands_the_product_back_to_xarray(
    store: tuple[Path, npt.NDArray[Any]],
) -> None:
    """The switch the benchmarks use to compare with xarray's own einsum: same values, sparse's
    result type."""
    import dask

    path, dense = store
    x = _open(path, None).isel(cell=slice(0, 6))
    weights = xr.DataArray(np.ones(dense.shape[1]), dims=("gene",))
    with dask.config.set({"sporadik.pushdown": False}):
        result = xr.dot(x, weights).data
    assert isinstance(result, sparse.COO)
    expected = np.einsum("cg...,g->c...", dense[:6], weights.values)
    np.testing.assert_allclose(result.todense(), expected, rtol=1e-5)


@pytest.mark.parametrize("chunks", CHUNKS[:2], ids=CHUNK_IDS[:2])
def test_a_product_whose_dense_result_would_outgrow_the_sparse_one_stays_sparse(
    store: tuple[Path, npt.NDArray[Any]], chunks: Any
) -> None:
    """Nothing summed (an outer product, a scaling), or a short axis summed: the result is as
    sparse as the variable, and a dense one could be many times its size."""
    path, dense = store
    x = _open(path, chunks)
    outer = xr.DataArray(np.array([1.0, 2.0]), dims=("k",))
    cases = [
        (xr.dot(x, outer), np.einsum("cg...,k->cg...k", dense, outer.values)),
        (xr.dot(x, xr.DataArray(2.0)), dense * 2.0),
    ]
    if dense.ndim == 3:
        per_spot = xr.DataArray(np.arange(1.0, 5.0), dims=("spot",))
        cases.append((xr.dot(x, per_spot), np.einsum("cgs,s->cg", dense, per_spot.values)))
    for result, expected in cases:
        data = result.data
        data = data.compute() if hasattr(data, "compute") else data
        assert isinstance(data, sparse.COO), type(data)
        np.testing.assert_allclose(data.todense(), expected, rtol=1e-5)


@pytest.fixture(scope="module")
def few_genes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, npt.NDArray[Any]]:
    """A store of 60 cells x 50 genes: a sum over genes is short under dask."""
    dense = random_dense(np.random.default_rng(5), (60, 50), 0.1, np.float32)
    path = tmp_path_factory.mktemp("p") / "s.zarr"
    sd.to_sporadik(
        xr.DataArray(sparse.COO.from_numpy(dense), dims=("cell", "gene"), name="x"), path
    )
    return path, dense


@pytest.mark.parametrize("chunks", CHUNKS, ids=CHUNK_IDS)
def test_a_product_summing_a_short_axis_is_sparse_in_either_of_dasks_models(
    few_genes: tuple[Path, npt.NDArray[Any]], chunks: Any
) -> None:
    """Under dask's expression model, which has no ``einsum``, the product is built as the
    graph model's ``einsum`` builds it: the same sparse blocks and values."""
    path, dense = few_genes
    x = _open(path, chunks)
    weights = np.random.default_rng(0).standard_normal((dense.shape[1], 4))
    loadings = xr.DataArray(weights, dims=("gene", "k"))
    for result in (xr.dot(x, loadings, dim="gene"), x @ loadings, xr.dot(loadings, x)):
        data = result.data
        assert isinstance(data._meta, sparse.COO), type(data._meta)
        computed = data.compute()
        assert isinstance(computed, sparse.COO), type(computed)
        expected = np.einsum("cg,gk->ck", dense, weights)
        got = computed.todense()
        np.testing.assert_allclose(got if result.dims[0] == "cell" else got.T, expected, rtol=1e-5)


def test_a_chunked_product_handed_back_by_pushdown_false_is_made_in_either_of_dasks_models(
    store: tuple[Path, npt.NDArray[Any]],
) -> None:
    """The switch hands the product to dask's ``einsum``, which the expression model lacks:
    there it is built as the graph model's is, the same sparse blocks and values."""
    import dask

    path, dense = store
    x = _open(path, {"cell": 9})
    weights = xr.DataArray(np.arange(float(dense.shape[1])), dims=("gene",))
    with dask.config.set({"sporadik.pushdown": False}):
        result = xr.dot(x, weights).data
    assert isinstance(result._meta, sparse.COO), type(result._meta)
    computed = result.compute()
    assert isinstance(computed, sparse.COO), type(computed)
    expected = np.einsum("cg...,g->c...", dense, weights.values)
    np.testing.assert_allclose(computed.todense(), expected, rtol=1e-5)
