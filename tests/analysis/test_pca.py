"""PCA of a store's log-normalized values over its highly variable genes equals scanpy's on the
same matrix in memory, up to each component's sign."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sporadik_dask as sd
from sporadik_dask.format.errors import SporadikError, StoreReplacedError
from tests.analysis.conftest import MODES, STEPS_RECORDED, opened

# the small chunks split the store's zarr chunks on purpose
pytestmark = pytest.mark.filterwarnings("ignore:The specified chunks separate")


@pytest.fixture(scope="module")
def expected(log_normalized: Any) -> tuple[Any, Any]:
    """scanpy's HVG (40 top genes), then ``pp.pca`` (arpack, 12 components) of them."""
    import scanpy as sc

    hvg = sc.pp.highly_variable_genes(log_normalized, n_top_genes=40, inplace=False)
    selected = log_normalized[:, hvg["highly_variable"].to_numpy()].copy()
    sc.pp.pca(selected, n_comps=12, svd_solver="arpack")
    return hvg, selected


def _equal_up_to_sign(got: Any, selected: Any) -> None:
    info = selected.uns["pca"]
    np.testing.assert_allclose(got["variance"], info["variance"], rtol=1e-5)
    np.testing.assert_allclose(got["variance_ratio"], info["variance_ratio"], rtol=1e-5)
    components = got["components"].values
    theirs = selected.varm["PCs"].T
    signs = np.sign(np.sum(components * theirs, axis=1))
    np.testing.assert_allclose(components, theirs * signs[:, None], atol=1e-4)
    assert list(got["gene"].values) == list(selected.var_names)
    projected = got["X_pca"].compute().values
    assert projected.dtype == np.float32
    np.testing.assert_allclose(projected, selected.obsm["X_pca"] * signs, atol=1e-4)


@pytest.mark.parametrize("mode", MODES)
def test_pca_of_the_highly_variable_genes_equals_scanpys_up_to_sign(
    counts_store: tuple[Path, Any], expected: tuple[Any, Any], mode: str
) -> None:
    path, _ = counts_store
    y = opened(path, mode)
    hvg = sd.highly_variable_genes(y, n_top_genes=40)
    got = sd.pca(y, 12, mask_var=hvg["highly_variable"])
    assert got["X_pca"].chunks is not None  # the projection is a pass left to compute
    _equal_up_to_sign(got, expected[1])


@pytest.mark.parametrize("n_comps", [12, 40], ids=["ARPACK", "LAPACK"])
def test_pca_of_every_gene_equals_numpys_on_the_dense_matrix_by_either_eigensolver(
    counts_store: tuple[Path, Any], log_normalized: Any, n_comps: int
) -> None:
    """12 of 150 genes' components come from ARPACK's Lanczos iterations on the packed matrix,
    40 from LAPACK's solver of the whole one; both equal numpy's ``eigh`` of the dense
    covariance in float64 (scanpy's, from float32 values, is 1e-5 off at close eigenvalues),
    up to the float32 rounding of the values themselves."""
    path, _ = counts_store
    got = sd.pca(opened(path, "lazy"), n_comps)
    dense = log_normalized.X.toarray().astype(np.float64)
    centered = dense - dense.mean(axis=0)
    covariance = centered.T @ centered / (dense.shape[0] - 1)
    values, vectors = np.linalg.eigh(covariance)
    variance, axes = values[::-1][:n_comps], vectors[:, ::-1][:, :n_comps].T
    np.testing.assert_allclose(got["variance"], variance, rtol=1e-7)
    np.testing.assert_allclose(got["variance_ratio"], variance / np.trace(covariance), rtol=1e-7)
    components = got["components"].values
    signs = np.sign(np.sum(components * axes, axis=1))
    np.testing.assert_allclose(components, axes * signs[:, None], atol=1e-6)
    np.testing.assert_allclose(got["X_pca"].compute().values, centered @ axes.T * signs, atol=1e-5)


@STEPS_RECORDED
@pytest.mark.parametrize("held", ["none", "about half", "all"])
def test_pca_of_many_spans_in_many_pieces_equals_scanpys(
    counts_store: tuple[Path, Any],
    expected: tuple[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
    held: str,
) -> None:
    """Spans of about 300 values (25 cells or so each), up to 4 a piece: each piece's Gram
    matrix adds its spans', 6 or more pieces merge in a tree, and each is projected from its
    values held by the first pass or read again ("about half": each piece may hold the
    average piece's selected values)."""
    from sporadik_dask.analysis import pca

    path, csr = counts_store
    mask = expected[0]["highly_variable"].to_numpy()
    selected = int(csr[:, mask].nnz)
    monkeypatch.setattr(pca, "SPAN_VALUES", 300)
    monkeypatch.setattr(pca, "PIECE_SPANS", 4)
    monkeypatch.setattr(pca, "HELD_VALUES", {"none": 0, "about half": selected, "all": 10**9}[held])
    got = sd.pca(opened(path, "lazy"), 12, mask_var=mask)
    blocks = got["X_pca"].data.numblocks[0]
    assert blocks == 1 if held == "all" else blocks >= 6
    _equal_up_to_sign(got, expected[1])


@pytest.mark.parametrize("held", [True, False], ids=["held", "read again"])
def test_the_projection_comes_from_the_values_held_or_from_a_second_read(
    counts_store: tuple[Path, Any],
    expected: tuple[Any, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    held: bool,
) -> None:
    """Within :data:`HELD_VALUES` the first pass keeps the selected values and ``X_pca`` needs
    the store no more; past it, ``X_pca`` reads the store again (gone: refused)."""
    from sporadik_dask.analysis import pca

    if not held:
        monkeypatch.setattr(pca, "HELD_VALUES", 100)
    copy = tmp_path / "copy.zarr"
    shutil.copytree(counts_store[0], copy)
    y = opened(copy, "lazy")
    got = sd.pca(y, 12, mask_var=expected[0]["highly_variable"])
    shutil.rmtree(copy)
    if held:
        _equal_up_to_sign(got, expected[1])
    else:
        with pytest.raises(StoreReplacedError, match="nothing is stored there now"):
            got["X_pca"].compute()


def test_the_largest_entry_of_each_component_is_positive(counts_store: tuple[Path, Any]) -> None:
    path, _ = counts_store
    components = sd.pca(opened(path, "chunks={}"), 5)["components"].values
    largest = components[np.arange(5), np.abs(components).argmax(axis=1)]
    assert (largest > 0).all()


def test_pca_of_a_selection_of_cells_reads_its_blocks_and_equals_scanpys(
    counts_store: tuple[Path, Any], log_normalized: Any
) -> None:
    """A selection carries no recorded steps: its blocks (values computed by dask) are
    decomposed as they are."""
    import scanpy as sc

    path, _ = counts_store
    y = opened(path, "small chunks").isel(cell=slice(50, 550))
    mask = np.zeros(150, dtype=bool)
    mask[::4] = True
    got = sd.pca(y, 6, mask_var=mask)
    selected = log_normalized[50:550, mask].copy()
    sc.pp.pca(selected, n_comps=6, svd_solver="arpack")
    _equal_up_to_sign(got, selected)


@pytest.mark.parametrize(
    "mask",
    [np.arange(10), np.ones(149, dtype=bool), np.zeros(150, dtype=bool)],
    ids=["positions", "a mask of another length", "no gene"],
)
def test_a_mask_that_is_not_one_boolean_per_gene_or_selects_none_is_refused(
    counts_store: tuple[Path, Any], mask: Any
) -> None:
    path, _ = counts_store
    with pytest.raises(SporadikError, match="mask_var"):
        sd.pca(opened(path, "lazy"), 3, mask_var=mask)


def test_more_components_than_genes_are_refused(counts_store: tuple[Path, Any]) -> None:
    path, _ = counts_store
    with pytest.raises(SporadikError, match="n_comps=151"):
        sd.pca(opened(path, "lazy"), 151)


@pytest.mark.slow
def test_a_cluster_computes_the_same_components(
    counts_store: tuple[Path, Any], expected: tuple[Any, Any], client: Any
) -> None:
    path, _ = counts_store
    y = opened(path, "small chunks")
    got = sd.pca(y, 12, mask_var=expected[0]["highly_variable"])
    _equal_up_to_sign(got, expected[1])


def test_cells_along_the_second_dim_give_the_same_pca(
    counts_store: tuple[Path, Any], expected: tuple[Any, Any]
) -> None:
    """Genes by cells (``dim="cell"``): the blocks' cells are their second axis."""
    path, _ = counts_store
    y = opened(path, "chunks={}").transpose("gene", "cell")
    got = sd.pca(y, 12, mask_var=expected[0]["highly_variable"].to_numpy(), dim="cell")
    assert got["X_pca"].dims == ("cell", "pc")
    _equal_up_to_sign(got, expected[1])
