"""Elementwise steps of a store's read reduced in one pass over the store: every answer equals
xarray's over the dense numpy array, the steps' blocks are never computed, and steps that would
fill the absent cells are refused or left to the blocks."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import dask
import numpy as np
import numpy.typing as npt
import pytest
import sparse
import xarray as xr

import sporadik_dask as sd
from sporadik_dask.backend.elementwise import recorded
from sporadik_dask.reduce.elementwise import AbsentCellsError

MODES: dict[str, dict[str, Any]] = {
    "lazy": {},
    "chunks={}": {"chunks": {}},
    "small chunks": {"chunks": {"cell": 7, "gene": 5}},
}

Chain = Callable[[xr.DataArray], Any]

#: Steps a scientist writes before a reduction, each on the store and on the dense array.
CHAINS: dict[str, Chain] = {
    "X * 2": lambda x: x * 2,
    "X > 1.5": lambda x: x > 1.5,
    "2.5 * X": lambda x: 2.5 * x,
    "-X / 4": lambda x: -x / 4,
    "X ** 2": lambda x: x**2,
    "sqrt(X)": np.sqrt,
    "expm1(X)": np.expm1,
    "log1p(X / X.sum('gene') * 1e4)": lambda x: np.log1p(x / x.sum("gene") * 1e4),
    "X / X.sum('cell')": lambda x: x / x.sum("cell"),
    "X / X.sum('gene') / X.max('cell')": lambda x: x / x.sum("gene") / x.max("cell"),
    "log1p(X) * numpy weights per gene": lambda x: np.log1p(x) * np.linspace(0.5, 2, x.shape[1]),
    "(X * 3.7).astype(int32) / 2": lambda x: (x * 3.7).astype(np.int32) / 2,
    "(X > 2).astype(float32)": lambda x: (x > 2).astype(np.float32),
    "log1p(expm1(log1p(X)))": lambda x: np.log1p(np.expm1(np.log1p(x))),
    **{
        "xr.where(X > 2, X, 0)": lambda x: xr.where(x > 2, x, 0),
        "X.where(X > 1.5, 0) * 2": lambda x: x.where(x > 1.5, 0) * 2,
        "log1p(xr.where(X > 3, X / X.sum('gene'), 0))": lambda x: np.log1p(
            xr.where(x > 3, x / x.sum("gene"), 0)
        ),
        "xr.where(X > X.mean('cell'), log1p(X), X / 2)": lambda x: xr.where(
            x > x.mean("cell"), np.log1p(x), x / 2
        ),
    },
}

#: ``where`` chains: each is applied in the pass (a few of :data:`CHAINS`, run unmarked).
WHERE = [name for name in CHAINS if "where" in name]

REDUCTIONS: dict[str, Chain] = {
    "sum('cell')": lambda x: x.sum("cell"),
    "mean('cell')": lambda x: x.mean("cell"),
    "var('cell')": lambda x: x.var("cell"),
    "std('gene', ddof=1)": lambda x: x.std("gene", ddof=1),
    "max('gene')": lambda x: x.max("gene"),
    "sum()": lambda x: x.sum(),
    "count('cell')": lambda x: x.count("cell"),
    "groupby(4 cell groups).mean()": lambda x: (
        x.assign_coords(g=("cell", np.arange(x.sizes["cell"]) % 4)).groupby("g").mean()
    ),
    "groupby(3 gene groups).var()": lambda x: (
        x.assign_coords(h=("gene", np.arange(x.sizes["gene"]) % 3)).groupby("h").var()
    ),
}


def _dense(seed: int, offset: float = 0.0) -> npt.NDArray[np.float64]:
    """30 cells x 11 genes, a third stored, every cell holding a value; stored values of mean
    ``offset``."""
    rng = np.random.default_rng(seed)
    values = offset + rng.gamma(2.0, 2.0, (30, 11))
    keep = rng.random(values.shape) < 0.35
    keep[np.arange(30), np.arange(30) % 11] = True
    return np.where(keep, values, 0.0)


def _store(path: Path, dense: npt.NDArray[Any]) -> Path:
    data = sparse.COO.from_numpy(dense)
    sd.to_sporadik(xr.DataArray(data, dims=("cell", "gene"), name="x"), path)
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, npt.NDArray[Any]]:
    dense = _dense(0)
    return _store(tmp_path_factory.mktemp("elementwise") / "s.zarr", dense), dense


def _expected(dense: npt.NDArray[Any], chain: Chain, reduction: Chain) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return reduction(chain(xr.DataArray(dense, dims=("cell", "gene")))).values


def _one_pass(result: xr.DataArray, steps: xr.DataArray) -> None:
    """The reduction reads the store: the steps' own blocks are not in its graph."""
    assert recorded(steps.data) is not None
    assert steps.data.name not in result.data.dask.layers


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The specified chunks separate")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("chain", CHAINS)
def test_steps_then_a_reduction_read_the_store_once_and_equal_numpy(
    store: tuple[Path, npt.NDArray[Any]], chain: str, mode: str
) -> None:
    path, dense = store
    x = xr.open_dataset(path, engine="sporadik", **MODES[mode])["x"]
    steps = CHAINS[chain](x)
    for name, reduction in REDUCTIONS.items():
        result = reduction(steps)
        _one_pass(result, steps)
        got = result.values
        expected = _expected(dense, CHAINS[chain], reduction)
        assert got.dtype == expected.dtype, name
        tolerance = 1e-6 if got.dtype == np.float32 else 1e-12  # numpy adds float32 in float32
        np.testing.assert_allclose(got, expected, rtol=tolerance, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("offset", [1e8, 1e4])
@pytest.mark.filterwarnings("ignore:The specified chunks separate")
@pytest.mark.parametrize("mode", MODES)
def test_the_variance_of_steps_over_values_of_a_large_mean_keeps_numpys_digits(
    tmp_path: Path, offset: float, mode: str
) -> None:
    """Every stored value near ``offset``, every cell stored: a sum of squares would lose every
    digit of the spread."""
    rng = np.random.default_rng(1)
    dense = offset + rng.standard_normal((40, 9))
    path = _store(tmp_path / "s.zarr", dense)
    x = xr.open_dataset(path, engine="sporadik", **MODES[mode])["x"]
    chains: list[Chain] = [lambda v: v * 0.5, lambda v: v / v.sum("cell") * 1e4]
    for chain in chains:
        steps = chain(x)
        result = steps.var("cell")
        _one_pass(result, steps)
        expected = _expected(dense, chain, lambda v: v.var("cell"))
        np.testing.assert_allclose(result.values, expected, rtol=1e-7)


def test_float32_values_stay_float32_through_the_steps_as_numpy_keeps_them(tmp_path: Path) -> None:
    dense = _dense(2).astype(np.float32)
    path = _store(tmp_path / "s.zarr", dense)
    x = xr.open_dataset(path, engine="sporadik", chunks={})["x"]
    chain = CHAINS["log1p(X / X.sum('gene') * 1e4)"]
    steps = chain(x)
    assert steps.dtype == np.float32
    result = steps.mean("cell")
    _one_pass(result, steps)
    expected = _expected(dense, chain, lambda v: v.mean("cell"))
    assert result.dtype == expected.dtype == np.float32
    np.testing.assert_allclose(result.values, expected, rtol=2e-6)


@pytest.mark.parametrize("mode", ["lazy", "chunks={}"])
def test_dividing_by_a_total_of_zero_is_refused_not_miscounted(tmp_path: Path, mode: str) -> None:
    """An empty cell's total is 0: numpy fills its row with NaN (0 / 0), cells no pass over
    the stored values would see."""
    dense = _dense(3)
    dense[4] = 0.0
    path = _store(tmp_path / "s.zarr", dense)
    x = xr.open_dataset(path, engine="sporadik", **MODES[mode])["x"]
    total = x.sum("gene")
    with pytest.raises(AbsentCellsError, match=r"nan.*position 4.*total.where\(total > 0, 1\)"):
        _ = (x / total).mean("cell").values
    steps = x / total.where(total > 0, 1)
    expected = _expected(dense, lambda v: v / v.sum("gene").where(v.sum("gene") > 0, 1), np.mean)
    np.testing.assert_allclose(steps.mean().values, expected, rtol=1e-12)


@pytest.mark.parametrize("mode", ["lazy", "chunks={}"])
def test_a_step_of_a_lazily_opened_selection_reduces_as_numpy_in_every_mode(
    store: tuple[Path, npt.NDArray[Any]], mode: str
) -> None:
    """A selection, then a step, then a reduction: lazily as under ``chunks={}`` (the
    selection is its dask read before the step, where it was read into one ``sparse.COO``,
    whose ``nanvar`` does not exist and whose mean is a ``sparse.COO``)."""
    path, dense = store
    x = xr.open_dataset(path, engine="sporadik", **MODES[mode])["x"]
    keep = np.arange(dense.shape[0]) % 3 != 0
    chains: dict[str, Chain] = {
        "var": lambda v: (v.isel(cell=keep) * 2).var("cell"),
        "mean": lambda v: (v.isel(cell=keep, gene=slice(2, 9)) * 2).mean("cell"),
        "log1p sum": lambda v: cast(xr.DataArray, np.log1p(v.isel(cell=keep))).sum("cell"),
    }
    for name, chain in chains.items():
        result = chain(x)
        expected = chain(xr.DataArray(dense, dims=("cell", "gene"))).values
        got = result.values
        assert isinstance(got, np.ndarray) and got.dtype == expected.dtype, name
        np.testing.assert_allclose(got, expected, rtol=1e-12, err_msg=name)


@pytest.mark.parametrize("read_first", [True, False], ids=["read first", "reduced in the pass"])
@pytest.mark.parametrize("mode", ["lazy", "chunks={}"])
def test_dividing_a_selection_by_a_total_of_zero_is_refused_with_the_advice(
    tmp_path: Path, mode: str, read_first: bool
) -> None:
    """A selection's steps are left to its blocks: a cell whose genes kept hold no value has a
    total of 0, and ``sparse`` cannot hold its row of NaN; the refusal says what to do, and
    doing it gives numpy's answer."""
    dense = _dense(5)
    dense[7, 3:8] = 0.0  # no value among the genes kept
    path = _store(tmp_path / "s.zarr", dense)
    x = xr.open_dataset(path, engine="sporadik", **MODES[mode])["x"]
    # a small selection is read, then reduced (and not kept: the variable stays lazy)
    small = {} if read_first else {"sporadik.selection-read-values": 0}
    with dask.config.set(small):
        picked = x.isel(gene=slice(3, 8))
        total = picked.sum("gene")
        with pytest.raises(AbsentCellsError, match=r"total.where\(total > 0, 1\)"):
            _ = (picked / total * 1e4).mean("cell").values
        got = (picked / total.where(total > 0, 1) * 1e4).mean("cell").values

    def chain(v: xr.DataArray) -> xr.DataArray:
        v = v.isel(gene=slice(3, 8))
        return v / v.sum("gene").where(v.sum("gene") > 0, 1) * 1e4

    np.testing.assert_allclose(got, _expected(dense, chain, lambda v: v.mean("cell")), rtol=1e-12)


@pytest.mark.parametrize("mode", ["lazy", "chunks={}"])
@pytest.mark.parametrize("chain", WHERE)
def test_a_where_of_steps_of_the_store_is_applied_in_the_pass_and_equals_numpy(
    store: tuple[Path, npt.NDArray[Any]], chain: str, mode: str
) -> None:
    path, dense = store
    x = xr.open_dataset(path, engine="sporadik", **MODES[mode])["x"]
    steps = CHAINS[chain](x)
    for name in ("sum('cell')", "var('cell')", "max('gene')"):
        result = REDUCTIONS[name](steps)
        _one_pass(result, steps)
        expected = _expected(dense, CHAINS[chain], REDUCTIONS[name])
        np.testing.assert_allclose(result.values, expected, rtol=1e-12, err_msg=name)


FILLING: dict[str, Chain] = {
    "X + 1": lambda x: x + 1,
    "X.where(X > 1) (NaN elsewhere)": lambda x: x.where(x > 1),
    "xr.where(X > 1, X, 5)": lambda x: xr.where(x > 1, x, 5),
    "exp(X)": np.exp,
    "X / X.sum('gene') + 1": lambda x: x / x.sum("gene") + 1,
}


@pytest.mark.filterwarnings("ignore:The specified chunks separate")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("chain", FILLING.values(), ids=list(FILLING))
def test_steps_that_fill_the_absent_cells_are_left_to_the_blocks_which_count_them(
    store: tuple[Path, npt.NDArray[Any]], chain: Chain, mode: str
) -> None:
    path, dense = store
    x = xr.open_dataset(path, engine="sporadik", **MODES[mode])["x"]
    steps = chain(x)
    assert recorded(steps.data) is None
    reductions: list[Chain] = [lambda v: v.sum("cell"), lambda v: v.mean("gene")]
    for reduction in reductions:
        expected = _expected(dense, chain, reduction)
        np.testing.assert_allclose(reduction(steps).values, expected, rtol=1e-12)


def test_a_selection_of_the_steps_is_reduced_from_its_blocks_and_equals_numpy(
    store: tuple[Path, npt.NDArray[Any]],
) -> None:
    path, dense = store
    x = xr.open_dataset(path, engine="sporadik", chunks={})["x"]
    steps = (x * 3).isel(gene=slice(2, 9))
    result = steps.sum("cell")
    expected = _expected(dense, lambda v: (v * 3).isel(gene=slice(2, 9)), lambda v: v.sum("cell"))
    np.testing.assert_allclose(result.values, expected, rtol=1e-12)


@pytest.mark.parametrize("mode", ["lazy", "chunks={}"])
def test_steps_that_stay_sparse_write_back_to_a_store_lazily_and_chunked(
    store: tuple[Path, npt.NDArray[Any]], tmp_path: Path, mode: str
) -> None:
    """Lazily, ``np.log1p(X * 2)`` read the whole store into one ``sparse.COO`` first; it is a
    dask array of the store's blocks now, written block by block."""
    import dask.array as da

    path, dense = store
    x = xr.open_dataset(path, engine="sporadik", **MODES[mode])["x"]
    steps = np.log1p(x * 2)
    assert isinstance(steps.data, da.Array)
    sd.to_sporadik(steps.rename("x"), tmp_path / "steps.zarr")
    back = xr.open_dataset(tmp_path / "steps.zarr", engine="sporadik")["x"].load()
    np.testing.assert_allclose(back.data.todense(), np.log1p(dense * 2), rtol=1e-12)


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("mode", ["lazy", "chunks={}"])
def test_the_numbers_of_scanpys_seurat_gene_selection_come_from_one_pass_each(
    store: tuple[Path, npt.NDArray[Any]], mode: str
) -> None:
    """scanpy's ``highly_variable_genes(flavor="seurat")`` takes the mean and variance of
    ``expm1`` of the log-normalized counts per gene; its ``means`` and ``dispersions`` are
    ``log1p(mean)`` and ``log(var / mean)``. Out of core: the totals, then one pass each."""
    import anndata
    import scanpy as sc
    import scipy.sparse as sp

    path, dense = store
    x = xr.open_dataset(path, engine="sporadik", **MODES[mode])["x"]
    undone = cast(xr.DataArray, np.expm1(np.log1p(x / x.sum("gene") * 1e4)))
    mean, var = undone.mean("cell"), undone.var("cell", ddof=1)
    _one_pass(mean, undone)
    adata = anndata.AnnData(sp.csr_matrix(dense))
    sc.pp.normalize_total(adata, target_sum=1e4)
    sc.pp.log1p(adata)
    hvg = sc.pp.highly_variable_genes(adata, flavor="seurat", inplace=False)
    np.testing.assert_allclose(np.log1p(mean.values), hvg["means"], rtol=1e-10)
    dispersions = np.log(var.values / mean.values)
    np.testing.assert_allclose(dispersions, hvg["dispersions"], rtol=1e-10)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The specified chunks separate")
def test_a_cluster_applies_the_steps_in_its_workers_and_equals_numpy(
    store: tuple[Path, npt.NDArray[Any]], client: Any
) -> None:
    """The reader the spans read through is made by a task from the computed totals, and
    pickled to the workers with the steps."""
    path, dense = store
    x = xr.open_dataset(path, engine="sporadik", chunks={"cell": 9})["x"]
    chain = CHAINS["log1p(X / X.sum('gene') * 1e4)"]
    result = chain(x).var("cell")
    _one_pass(result, chain(x))
    expected = _expected(dense, chain, lambda v: v.var("cell"))
    np.testing.assert_allclose(result.compute().values, expected, rtol=1e-12)


def test_a_reduction_of_steps_is_named_by_its_steps_and_vectors_deterministically(
    store: tuple[Path, npt.NDArray[Any]],
) -> None:
    """Two reductions of other steps or vectors in one ``dask.compute`` share no key; the same
    steps made twice give the same key. Read without computing."""
    path, _ = store
    x = xr.open_dataset(path, engine="sporadik", chunks={})["x"]

    def name(result: xr.DataArray) -> str:
        return str(result.data.name)

    assert name((x * 2).sum("cell")) == name((x * 2).sum("cell"))
    assert name((x * 2).sum("cell")) != name((x * 3).sum("cell"))
    assert name((x * 2).sum("cell")) != name((x * 2.0).astype(np.float32).sum("cell"))
    by_cell, by_max = x / x.sum("gene"), x / x.max("gene")
    assert name(by_cell.mean("cell")) == name((x / x.sum("gene")).mean("cell"))
    assert name(by_cell.mean("cell")) != name(by_max.mean("cell"))


def test_a_vector_of_sparse_blocks_is_left_to_dask_and_equals_numpy(
    store: tuple[Path, npt.NDArray[Any]],
) -> None:
    """Only numpy vectors (or dask arrays of numpy blocks) are taken at each value; a sparse one
    would be refused where the reader is made, after the graph was built."""
    import dask.array as da

    path, dense = store
    x = xr.open_dataset(path, engine="sporadik", chunks={})["x"]
    weights = np.linspace(1, 2, dense.shape[1])
    held = da.from_array(sparse.COO.from_numpy(weights[None, :]), asarray=False)
    steps = x.copy(data=x.data * held)
    assert recorded(steps.data) is None
    np.testing.assert_allclose(steps.sum("cell").values, (dense * weights).sum(0), rtol=1e-12)
