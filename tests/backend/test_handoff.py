"""``.sporadik.tocsr()``: a variable handed to scipy, anndata and scanpy as the ``csr_matrix``
they take, equal to scipy's CSR of the dense array, and scanpy's preprocessing run on it."""

from __future__ import annotations

import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import scipy.sparse as sp
import sparse
import xarray as xr

import sporadik_dask as sd
from sporadik_dask.format.errors import SporadikError
from tests.helpers import random_dense

CELLS, GENES = 300, 80


@pytest.fixture(scope="module", params=[(0, 1), (0,), (1,)], ids=["both", "rows", "columns"])
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, npt.NDArray[Any]]:
    """Counts of cells x genes, with a layout along each axis or along one of them."""
    dense = random_dense(np.random.default_rng(3), (CELLS, GENES), 0.15, np.float32)
    dense[7] = 0  # a cell with no counts
    path = tmp_path_factory.mktemp("handoff") / "s.zarr"
    array = xr.DataArray(
        sparse.COO.from_numpy(dense),
        dims=("obs", "var"),
        coords={"obs": [f"c{i}" for i in range(CELLS)], "var": [f"g{i}" for i in range(GENES)]},
        name="X",
    )
    sd.to_sporadik(array, path, axes=request.param)
    return path, dense


def _open(path: Path, how: str) -> xr.DataArray:
    if how == "lazy":
        return xr.open_dataset(path, engine="sporadik")["X"]
    if how == "chunks":
        return xr.open_dataset(path, engine="sporadik", chunks={"obs": 64})["X"]
    return xr.open_dataset(path, engine="sporadik")["X"].load()


_rng = np.random.default_rng(11)
_MASK = _rng.random(CELLS) < 0.7
_GENES = np.array([40, 3, 3, 79, 0, 12])

SELECTIONS: dict[str, Callable[[xr.DataArray], xr.DataArray]] = {
    "whole": lambda x: x,
    "a cell mask": lambda x: x.isel(obs=_MASK),
    "genes in a user's order": lambda x: x.isel(var=_GENES),
    "a cell range and every other gene": lambda x: x.isel(
        obs=slice(20, 90), var=slice(None, None, 2)
    ),
    "chained": lambda x: x.isel(obs=_MASK).isel(obs=slice(5, None), var=_GENES),
    "transposed": lambda x: x.isel(var=slice(10, 50)).T,
    "nothing": lambda x: x.isel(obs=slice(0, 0)),
}

_DENSE_SELECTIONS: dict[str, Callable[[npt.NDArray[Any]], npt.NDArray[Any]]] = {
    "whole": lambda d: d,
    "a cell mask": lambda d: d[_MASK],
    "genes in a user's order": lambda d: d[:, _GENES],
    "a cell range and every other gene": lambda d: d[20:90, ::2],
    "chained": lambda d: d[_MASK][5:][:, _GENES],
    "transposed": lambda d: d[:, 10:50].T,
    "nothing": lambda d: d[0:0],
}


@pytest.mark.filterwarnings("ignore::sporadik_dask.ScanWarning")  # the store of one layout
@pytest.mark.parametrize("how", ["lazy", "chunks", "loaded"])
@pytest.mark.parametrize("name", list(SELECTIONS))
def test_tocsr_is_a_csr_matrix_with_int32_indices_equal_to_scipys_of_the_dense_array(
    store: tuple[Path, npt.NDArray[Any]], how: str, name: str
) -> None:
    path, dense = store
    got = SELECTIONS[name](_open(path, how)).sporadik.tocsr()
    expected = sp.csr_matrix(_DENSE_SELECTIONS[name](dense))
    assert type(got) is sp.csr_matrix
    assert got.indices.dtype == np.int32 and got.indptr.dtype == np.int32
    assert got.dtype == dense.dtype
    assert got.shape == expected.shape
    got.check_format(full_check=True)
    np.testing.assert_array_equal(got.toarray(), expected.toarray())
    assert got.nnz == expected.nnz  # no zeros stored


def test_anndata_takes_it_as_x_and_writes_it_as_its_own(
    store: tuple[Path, npt.NDArray[Any]], tmp_path: Path
) -> None:
    import anndata

    path, dense = store
    x = xr.open_dataset(path, engine="sporadik")["X"].isel(obs=_MASK)
    adata = anndata.AnnData(X=x.sporadik.tocsr())
    adata.write_h5ad(tmp_path / "a.h5ad")
    back = anndata.read_h5ad(tmp_path / "a.h5ad")
    assert type(back.X) is sp.csr_matrix
    np.testing.assert_array_equal(back.X.toarray(), dense[_MASK])


def _peak_bytes(run: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _nbytes(matrix: sp.csr_matrix) -> int:
    return int(matrix.data.nbytes + matrix.indices.nbytes + matrix.indptr.nbytes)


def test_scanpy_preprocesses_it_as_it_does_scipys_csr_matrix(
    store: tuple[Path, npt.NDArray[Any]],
) -> None:
    """scanpy's ``normalize_total``, ``log1p``, ``highly_variable_genes`` and ``pca`` give what
    they give on scipy's CSR of the dense array."""
    import anndata
    import scanpy as sc

    path, dense = store

    def preprocess(x: Any) -> anndata.AnnData:
        adata = anndata.AnnData(X=x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scanpy's and numba's deprecation notes
            sc.pp.normalize_total(adata, target_sum=1e4)
            sc.pp.log1p(adata)
            sc.pp.highly_variable_genes(adata, n_top_genes=20)
            sc.pp.pca(adata, n_comps=5, random_state=0)
        return adata

    preprocess(sp.csr_matrix(dense))  # scanpy's first calls compile and cache
    x = xr.open_dataset(path, engine="sporadik")["X"]
    got, expected = preprocess(x.sporadik.tocsr()), preprocess(sp.csr_matrix(dense))
    assert type(got.X) is sp.csr_matrix
    np.testing.assert_allclose(got.X.toarray(), expected.X.toarray(), rtol=1e-6)
    np.testing.assert_array_equal(got.var["highly_variable"], expected.var["highly_variable"])
    np.testing.assert_allclose(
        np.abs(got.obsm["X_pca"]), np.abs(expected.obsm["X_pca"]), rtol=1e-4, atol=1e-5
    )


def test_normalize_total_holds_the_handed_matrix_at_most_twice_over(tmp_path: Path) -> None:
    """On ``sparse``'s ``csr_array`` scanpy's ``normalize_total`` broadcast densely (3 GB for a
    3 MiB matrix). The matrix is a few MiB, so that what other threads of the test process
    allocate meanwhile (tracemalloc sees every thread; ~0.3 MB seen) cannot decide it."""
    import anndata
    import scanpy as sc

    dense = random_dense(np.random.default_rng(4), (4_000, 500), 0.1, np.float32)
    sd.to_sporadik(sp.csr_matrix(dense), tmp_path / "s.zarr")
    handed = xr.open_dataset(tmp_path / "s.zarr", engine="sporadik")["s"].sporadik.tocsr()
    sc.pp.normalize_total(anndata.AnnData(X=handed.copy()), target_sum=1e4)  # first call
    adata = anndata.AnnData(X=handed)
    peak = _peak_bytes(lambda: sc.pp.normalize_total(adata, target_sum=1e4))
    assert _nbytes(handed) > 2**20 and peak <= 2 * _nbytes(handed), (peak, _nbytes(handed))


def test_a_variable_of_another_rank_is_refused_with_what_to_do(
    store: tuple[Path, npt.NDArray[Any]],
) -> None:
    path, _ = store
    x = xr.open_dataset(path, engine="sporadik")["X"]
    with pytest.raises(SporadikError, match="rank-2"):
        x.isel(obs=0).sporadik.tocsr()
