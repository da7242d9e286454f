"""groupby(coord) reductions of a store in one pass: equal to scipy's indicator-matrix product."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
import scipy.sparse as sp
import sparse
import xarray as xr
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import sporadik_dask as sd
from sporadik_dask.read.dask_model import EXPRESSIONS, graph_names
from tests.helpers import random_dense


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, npt.NDArray[Any]]:
    dense = random_dense(np.random.default_rng(4), (60, 25), 0.3, np.float32)
    path = tmp_path_factory.mktemp("g") / "s.zarr"
    sd.to_sporadik(xr.DataArray(sparse.COO.from_numpy(dense), dims=("cell", "gene")), path)
    return path, dense


GROUPINGS: dict[str, Callable[[np.random.Generator, int], npt.NDArray[np.str_]]] = {
    "four groups": lambda rng, n: rng.choice(["b", "a", "d", "c"], n),
    "one group": lambda rng, n: np.full(n, "all"),
    "each its own": lambda rng, n: np.arange(n)[::-1].astype(str),
}


def _indicator(labels: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], sp.csr_matrix]:
    groups, codes = np.unique(labels, return_inverse=True)
    rows = sp.csr_matrix(
        (np.ones(len(labels)), (codes, np.arange(len(labels)))), shape=(len(groups), len(labels))
    )
    return groups, rows


def _indicator_sums(
    dense: npt.NDArray[Any], axis: int, indicator: sp.csr_matrix
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Per group and per cell of the other axes, raveled: the sum of the values NaN aside, and
    how many values are not NaN, by the indicator-matrix product."""
    moved = np.moveaxis(dense.astype(np.float64), axis, 0).reshape(dense.shape[axis], -1)
    present = ~np.isnan(moved)
    return indicator @ np.where(present, moved, 0), indicator @ present.astype(np.float64)


@pytest.mark.parametrize("flox", [False, True], ids=["xarray", "flox"])
@pytest.mark.parametrize("chunks", [None, {}, {"cell": 7}], ids=["lazy", "chunks={}", "chunks=7"])
@pytest.mark.parametrize("grouping", GROUPINGS)
def test_group_sums_and_means_equal_the_indicator_matrix_product(
    store: tuple[Path, npt.NDArray[Any]], grouping: str, chunks: Any, flox: bool
) -> None:
    if flox:
        pytest.importorskip("flox")
    path, dense = store
    labels = GROUPINGS[grouping](np.random.default_rng(0), dense.shape[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # chunks separating stored ones
        counts = xr.open_dataset(path, engine="sporadik", chunks=chunks)["s"]
    counts = counts.assign_coords(kind=("cell", labels))
    groups, indicator = _indicator(labels)
    sums = indicator @ dense.astype(np.float64)
    for op, expected in (
        ("sum", sums),
        ("mean", sums / np.asarray(indicator.sum(axis=1))),
        ("count", np.asarray(indicator.sum(axis=1)) * np.ones((1, dense.shape[1]))),
    ):
        with xr.set_options(use_flox=flox):
            result = getattr(counts.groupby("kind"), op)()
        assert result.dims == ("kind", "gene")
        if chunks is None:  # one pass over the store, not xarray's read per group
            assert isinstance(result.data, np.ndarray)
        else:
            ours = ("sporadik-group-", f"sporadik-{op}")  # blocks' fields, or the store's runs
            assert any(n.startswith(ours) for n in graph_names(result.data))
        np.testing.assert_array_equal(result["kind"].values, groups)
        if op != "count":
            assert result.dtype == np.float32
        np.testing.assert_allclose(result.compute().values, expected, rtol=1e-5)


def test_group_maxima_along_genes_equal_numpy_per_group(
    store: tuple[Path, npt.NDArray[Any]],
) -> None:
    path, dense = store
    counts = xr.open_dataset(path, engine="sporadik")["s"]
    family = np.random.default_rng(1).integers(0, 3, dense.shape[1])
    result = counts.assign_coords(family=("gene", family)).groupby("family").max()
    assert result.dims == ("cell", "family")
    expected = np.stack([dense[:, family == f].max(axis=1) for f in range(3)], axis=1)
    np.testing.assert_array_equal(result.values, expected)


@pytest.mark.slow
@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "chunks={}"])
def test_past_the_dense_budget_group_sums_and_means_come_back_sparse_and_equal(
    store: tuple[Path, npt.NDArray[Any]], chunks: Any
) -> None:
    import dask

    path, dense = store
    labels = np.arange(dense.shape[0]) % 7
    counts = xr.open_dataset(path, engine="sporadik", chunks=chunks)["s"]
    counts = counts.assign_coords(kind=("cell", labels))
    _, indicator = _indicator(labels.astype(str))
    sums = indicator @ dense.astype(np.float64)
    with dask.config.set({"sporadik.dense-result-cells": 100}):  # 7 groups x 25 genes is past it
        for op, expected in (("sum", sums), ("mean", sums / np.asarray(indicator.sum(axis=1)))):
            result = getattr(counts.groupby("kind"), op)()
            data = result.data.compute() if chunks is not None else result.data
            assert isinstance(data, sparse.COO) and data.dtype == np.float32
            np.testing.assert_allclose(data.todense(), expected, rtol=1e-5)


@st.composite
def _grouped_stores(draw: st.DrawFn) -> tuple[npt.NDArray[Any], int, npt.NDArray[np.str_], Any]:
    """A rank 2-3 array (NaN among float values), the axis grouped, its labels, and chunks."""
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=2, max_size=3)))
    dtype = draw(st.sampled_from([np.float32, np.int32]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    dense = random_dense(rng, shape, draw(st.sampled_from([0.0, 0.3, 1.0])), dtype)
    if dtype == np.float32 and draw(st.booleans()):
        dense.flat[rng.integers(0, dense.size)] = np.nan
    axis = draw(st.integers(0, len(shape) - 1))
    kind = draw(st.sampled_from(["random", "one group", "each its own", "empty groups"]))
    size = shape[axis]
    labels = {
        "random": rng.choice(list("dcba"), size),
        "one group": np.full(size, "all"),
        "each its own": np.arange(size)[::-1].astype(str),
        "empty groups": rng.choice(list("ac"), size),  # "b" below is a group with no member
    }[kind]
    chunks = draw(st.sampled_from([None, {}, {"d0": 2, "d1": 3}]))
    return dense, axis, labels, (chunks, kind == "empty groups")


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_grouped_stores())
@example(  # one position along the grouped axis, relabeled as the third group
    case=(np.array([[np.nan], [0]], np.float32), 1, np.array(["c"]), (None, True))
)
def test_group_reductions_at_ranks_2_and_3_equal_the_indicator_matrix_product(
    case: tuple[npt.NDArray[Any], int, npt.NDArray[np.str_], Any],
) -> None:
    from xarray.groupers import UniqueGrouper

    dense, axis, labels, (chunks, empty) = case
    dims = tuple(f"d{k}" for k in range(dense.ndim))
    grouped = dims[axis]
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "s.zarr"
        sd.to_sporadik(xr.DataArray(sparse.COO.from_numpy(dense), dims=dims), path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # chunks separating stored ones
            counts = xr.open_dataset(path, engine="sporadik", chunks=chunks)["s"]
        counts = counts.assign_coords(kind=(grouped, labels))
        numpy = xr.DataArray(dense, dims=dims).assign_coords(kind=(grouped, labels))
        groups, indicator = _indicator(labels)
        if empty:  # ask for a group no position is in
            groups = np.array(["a", "b", "c"])
            codes = np.searchsorted(groups, labels)
            indicator = sp.csr_matrix(
                (np.ones(len(labels)), (codes, np.arange(len(labels)))), shape=(3, len(labels))
            )
        by = {"kind": UniqueGrouper(labels=groups)} if empty else {"kind": UniqueGrouper()}
        sums, stored = _indicator_sums(dense, axis, indicator)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = sums / stored
        missing = np.asarray(indicator.sum(axis=1)).ravel() == 0  # NaN, as xarray's flox path
        sums[missing] = np.nan
        for op, flat in (("sum", sums), ("mean", means), ("count", stored)):
            result = getattr(counts.groupby(by), op)()
            expected = getattr(numpy.groupby(by), op)()  # xarray's dims, labels and dtype
            assert result.dims == expected.dims
            assert isinstance(result.data, np.ndarray if chunks is None else da.Array)
            promoted = missing.any() and op != "count" and expected.dtype.kind not in "fc"
            assert result.dtype == (np.float64 if promoted else expected.dtype), op
            np.testing.assert_array_equal(result["kind"].values, groups)
            out = np.moveaxis(flat.reshape(len(groups), *np.delete(dense.shape, axis)), 0, axis)
            np.testing.assert_allclose(
                result.values.astype(np.float64), out, rtol=1e-5, equal_nan=True
            )


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_grouped_stores(), batch=st.sampled_from([3, 2**21]))
@example(  # groups lead the result (the gene layout's kernel), a NaN in one batch of several
    case=(
        np.array([[1, np.nan, 0, 2], [2, 3, 0, 0], [0, 4, 5, 1]], np.float32),
        0,
        np.array(["b", "a", "b"]),
        (None, False),
    ),
    batch=3,
)
def test_sparse_group_sums_and_means_at_ranks_2_and_3_equal_the_indicator_matrix_product(
    case: tuple[npt.NDArray[Any], int, npt.NDArray[np.str_], Any], batch: int
) -> None:
    """Past the dense budget, whole-store group sums and means come back as ``sparse.COO``:
    laid into the result batch by batch when lazy, span by span under ``chunks=``. Batches
    of 3 values put a NaN in some batches and not others (a mean skipping NaNs takes another
    route for those), and a group's cells in several batches."""
    import dask

    from sporadik_dask.reduce import prefetch

    dense, axis, labels, (chunks, _) = case
    dims = tuple(f"d{k}" for k in range(dense.ndim))
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "s.zarr"
        sd.to_sporadik(xr.DataArray(sparse.COO.from_numpy(dense), dims=dims), path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # chunks separating stored ones
            counts = xr.open_dataset(path, engine="sporadik", chunks=chunks)["s"]
        counts = counts.assign_coords(kind=(dims[axis], labels))
        groups, indicator = _indicator(labels)
        sums, stored = _indicator_sums(dense, axis, indicator)
        with np.errstate(invalid="ignore", divide="ignore"):  # NaN where every cell is NaN
            means = sums / stored
        raw = _indicator_sums(np.where(np.isnan(dense), 1, dense), axis, indicator)[0]
        nans = np.isnan(np.moveaxis(dense, axis, 0).reshape(len(labels), -1))
        raw[(indicator @ nans) > 0] = np.nan  # skipna=False: a NaN among a cell's values
        budgets = {"sporadik.dense-result-cells": 0}
        with dask.config.set(budgets), pytest.MonkeyPatch.context() as patch:
            patch.setattr(prefetch, "BATCH_BYTES", batch * 8)
            for op, skipna, flat in (("sum", None, sums), ("mean", None, means),
                                     ("sum", False, raw)):  # fmt: skip
                result = getattr(counts.groupby("kind"), op)(skipna=skipna)
                data = result.data if chunks is None else result.data.compute()
                assert isinstance(data, sparse.COO)
                numpy_dtype = getattr(np.ones(1, dense.dtype), op)().dtype
                assert data.dtype == result.dtype == numpy_dtype
                np.testing.assert_array_equal(result["kind"].values, groups)
                shape = (len(groups), *np.delete(dense.shape, axis))
                out = np.moveaxis(flat.reshape(shape), 0, axis)
                np.testing.assert_allclose(
                    data.todense().astype(np.float64), out, rtol=1e-5, equal_nan=True
                )


@pytest.mark.slow
@pytest.mark.parametrize("budget", [0, 2**28], ids=["sparse", "dense"])
@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "chunks={}"])
def test_a_store_with_an_empty_axis_groups_and_sums_to_empty_results(
    tmp_path: Path, chunks: Any, budget: int
) -> None:
    """No genes: nothing to read, yet every reduction still has a (zero-size) result."""
    import dask

    path = tmp_path / "s.zarr"
    sd.to_sporadik(xr.DataArray(sparse.zeros((6, 0), np.float32), dims=("cell", "gene")), path)
    counts = xr.open_dataset(path, engine="sporadik", chunks=chunks)["s"]
    counts = counts.assign_coords(kind=("cell", list("abcabc")))
    with dask.config.set({"sporadik.dense-result-cells": budget}):
        grouped = counts.groupby("kind").sum()
        per_cell = counts.sum("gene")
        assert grouped.shape == (3, 0) and grouped.compute().size == 0
        np.testing.assert_array_equal(
            per_cell.compute().data.todense() if budget == 0 else per_cell.compute().values,
            np.zeros(6),
        )


def test_a_chunked_grouped_sum_computed_twice_gives_two_arrays_neither_held_by_the_graph(
    store: tuple[Path, npt.NDArray[Any]],
) -> None:
    """The one block comes back uncopied (dask would deep-copy it), so it must be made afresh by
    every compute: changing one result leaves the next compute's, and a persisted one's, alone."""
    import dask

    path, dense = store
    counts = xr.open_dataset(path, engine="sporadik", chunks={})["s"]
    labels = np.arange(dense.shape[0]) % 7
    with dask.config.set({"sporadik.dense-result-cells": 0}):
        summed = counts.assign_coords(kind=("cell", labels)).groupby("kind").sum().data
    expected = np.stack([dense[labels == k].sum(axis=0) for k in range(7)])
    first = summed.compute()
    first.data[:] = -1  # a user's own array, to change at will
    again = summed.compute()
    assert again is not first
    np.testing.assert_allclose(again.todense(), expected, rtol=1e-5)
    if EXPRESSIONS:
        return  # dask's expression model hands a persisted block back uncopied, for any array
    kept = summed.persist()
    changed = kept.compute()
    changed.data[:] = -1
    np.testing.assert_allclose(kept.compute().todense(), expected, rtol=1e-5)


def test_a_grouped_mean_over_int64_indices_past_their_axis_is_refused(tmp_path: Path) -> None:
    """Indices read unchecked for the grouping kernel are checked before a batch that holds a
    NaN (a mean that skips NaNs) takes the other route, whatever their stored dtype."""
    import dask
    import zarr

    rng = np.random.default_rng(0)
    dense = random_dense(rng, (30, 8), 0.4, np.float32)
    dense[3, 2] = np.nan
    path = tmp_path / "s.zarr"
    sd.to_sporadik(xr.DataArray(sparse.COO.from_numpy(dense), dims=("cell", "gene")), path)
    group = zarr.open_group(path, mode="r+")
    stored = group["layouts/axis1/indices"]
    assert isinstance(stored, zarr.Array)
    indices, chunks = np.asarray(stored[:], dtype=np.int64), stored.chunks
    indices[-1] = 999  # a damaged store: a cell past the 30 there are
    del group["layouts/axis1/indices"]
    rewritten = group.create_array(
        "layouts/axis1/indices", shape=indices.shape, dtype="int64", chunks=chunks
    )
    rewritten[:] = indices
    counts = xr.open_dataset(path, engine="sporadik")["s"]
    counts = counts.assign_coords(kind=("cell", np.arange(30) % 4))
    budget = {"sporadik.dense-result-cells": 0}
    with dask.config.set(budget), pytest.raises(sd.LayoutError, match="holds index 999"):
        counts.groupby("kind").mean()


@pytest.mark.parametrize("chunks", [None, {}])
def test_groups_of_a_stored_categorical_come_in_its_categories_order(
    tmp_path: Path, chunks: dict[str, int] | None
) -> None:
    """As xarray groups an unindexed categorical: by its categories, not sorted by name."""
    levels = ["lo", "mid", "hi"]
    level = pd.Categorical(np.array(levels)[np.arange(30) % 3], categories=levels, ordered=True)
    dense = random_dense(np.random.default_rng(8), (30, 4), 0.5)
    written = xr.DataArray(
        sparse.COO.from_numpy(dense), dims=("cell", "gene"), coords={"level": ("cell", level)}
    )
    sd.to_sporadik(written, tmp_path / "s.zarr")
    counts = xr.open_dataset(tmp_path / "s.zarr", engine="sporadik", chunks=chunks)["s"]
    plain = xr.DataArray(dense, dims=("cell", "gene"), coords={"level": ("cell", level)})
    got = counts.groupby("level").sum().compute()
    assert list(got.level.values) == list(plain.groupby("level").sum().level.values) == levels
    np.testing.assert_allclose(got.values, [dense[level == k].sum(0) for k in levels], 1e-5)
    assert counts.sel(level="hi").shape == (10, 4)


def test_a_chunked_grouped_sum_comes_back_through_xarray_as_the_block_its_task_made(
    store: tuple[Path, npt.NDArray[Any]],
) -> None:
    """xarray holds the result as a plain dask array, whose one block dask would deep-copy on
    the way out (``COO.copy``, 0.08 s for 68 M values in warm memory, 2.7 s in fresh pages):
    through xarray's compute no copy is made, each compute makes the block afresh, and a
    persisted one is copied as dask copies."""
    import sys

    import dask

    path, dense = store
    counts = xr.open_dataset(path, engine="sporadik", chunks={})["s"]
    labels = np.arange(dense.shape[0]) % 7
    with dask.config.set({"sporadik.dense-result-cells": 0}):
        summed = counts.assign_coords(kind=("cell", labels)).groupby("kind").sum()
    assert type(summed.data) is da.Array
    expected = np.stack([dense[labels == k].sum(axis=0) for k in range(7)])
    copies: list[int] = []

    def watch(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is sparse.COO.copy.__code__:
            copies.append(1)

    with dask.config.set(scheduler="sync"):  # every task in this thread, where the watch is
        sys.setprofile(watch)
        try:
            first = summed.compute()
            first.data.data[:] = -1  # the user's own array
            again = summed.compute()
            uncopied = len(copies)
            kept = summed.persist()
            changed = kept.compute()
        finally:
            sys.setprofile(None)
    assert uncopied == 0, uncopied
    assert again.data is not first.data
    np.testing.assert_allclose(again.data.todense(), expected, rtol=1e-5)
    if EXPRESSIONS:
        return  # dask's expression model hands a persisted block back uncopied, for any array
    assert len(copies) >= 1
    changed.data.data[:] = -1
    np.testing.assert_allclose(kept.compute().data.todense(), expected, rtol=1e-5)


@pytest.mark.parametrize("budget", [1, 2**30])
def test_a_chunked_dense_grouping_holds_no_more_partial_results_than_its_budget(
    tmp_path: Path, budget: int
) -> None:
    """Each span of a dense grouped reduction fills fields of the whole result, and their merge
    holds every span's: past ``sporadik.dense-partials-bytes`` the spans are fewer (one pass at
    the least), with the same values."""
    import dask

    dense = random_dense(np.random.default_rng(13), (400, 30), 0.3, np.float32)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(xr.DataArray(sparse.COO.from_numpy(dense), dims=("cell", "gene")), path)
    counts = xr.open_dataset(path, engine="sporadik", chunks={"cell": 50})["s"]
    labels = np.arange(400) % 11
    with dask.config.set({"sporadik.dense-partials-bytes": budget}):
        summed = counts.assign_coords(kind=("cell", labels)).groupby("kind").mean()
    graph = dict(summed.data.dask)
    spans = [k for k in graph if isinstance(k, tuple) and str(k[0]).startswith("sporadik-mean")]
    spans = [k for k in spans if len(k) == 3 and k[1] == 0]  # (name, depth, span)
    assert (len(spans) == 1) == (budget == 1), spans
    expected = np.stack([dense[labels == k].mean(axis=0) for k in range(11)])
    np.testing.assert_allclose(summed.compute().values, expected, rtol=1e-5)


@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "chunks={}"])
@pytest.mark.parametrize("op", ["sum", "mean", "max", "count", "std"])
def test_a_dataset_groupby_reduces_its_sporadik_variable_as_a_dataarray_and_the_rest_as_xarray(
    store: tuple[Path, npt.NDArray[Any]], chunks: Any, op: str
) -> None:
    """``ds.groupby(...)`` of an opened store: the variable in one pass, not one read per group
    (and not 4e9 points for a transposed view); other variables as xarray would."""
    from xarray.groupers import UniqueGrouper

    path, dense = store
    rng = np.random.default_rng(8)
    labels = rng.choice(["b", "a", "c"], dense.shape[0])
    ds = xr.open_dataset(path, engine="sporadik", chunks=chunks)
    ds = ds.assign_coords(kind=("cell", labels)).assign(
        size=("cell", rng.random(dense.shape[0])), weight=("gene", rng.random(dense.shape[1]))
    )
    ds.attrs["title"] = "t"
    (name,) = [n for n in ds.data_vars if n not in ("size", "weight")]
    plain = ds.compute()
    plain[name] = plain[name].copy(data=plain[name].data.todense())
    if chunks is None:
        grouped = ds.groupby("kind")
    else:
        grouped = ds.groupby({"kind": UniqueGrouper(labels=["a", "b", "c"])})
    result = getattr(grouped, op)()
    expected = getattr(plain.groupby("kind"), op)()
    assert list(result.data_vars) == list(expected.data_vars)
    assert result.attrs == expected.attrs and set(result.coords) == set(expected.coords)
    assert isinstance(result[name].data, np.ndarray if chunks is None else da.Array)
    result = result.compute().transpose(*expected.dims)
    for variable in expected.data_vars:
        got = result[variable].transpose(*expected[variable].dims)
        np.testing.assert_allclose(got.values, expected[variable].values, rtol=1e-5)


def _several(by: str) -> dict[str, Any]:
    from xarray.groupers import BinGrouper, UniqueGrouper

    if by == "two labels":
        return {"kind": UniqueGrouper(), "batch": UniqueGrouper()}
    # an age past the last edge is in no group; a bin no cell of kind "a" is in, NaN for it
    return {"kind": UniqueGrouper(), "age": BinGrouper([0, 10, 40, 60, 100])}


def _agreeing(got: xr.DataArray, expected: xr.DataArray) -> None:
    """Equal dims, dtype, coordinates, name and attrs; values to float32's precision."""
    assert got.dims == expected.dims
    assert got.dtype == expected.dtype
    xr.testing.assert_identical(got.coords.to_dataset(), expected.coords.to_dataset())
    assert (got.name, got.attrs) == (expected.name, expected.attrs)
    np.testing.assert_allclose(got.values, expected.values, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("flox", [False, True], ids=["xarray", "flox"])
@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "chunks={}"])
@pytest.mark.parametrize("by", ["two labels", "a label and bins"])
def test_groups_of_several_coordinates_are_one_pass_and_equal_xarray_on_the_dense_array(
    store: tuple[Path, npt.NDArray[Any]], by: str, chunks: Any, flox: bool
) -> None:
    """Several groupers along one dim reduce as one grouping by their combined code, and come
    back with xarray's dims (in place on flox's path, last on its own), labels and NaN."""
    if flox:
        pytest.importorskip("flox")
    if EXPRESSIONS and chunks is not None:
        pytest.skip(
            "unstacking the combined dim reshapes a dask array, which dask's expression model "
            "lacks (no Array.reshape, no __array_function__)"
        )
    path, dense = store
    rng = np.random.default_rng(3)
    n = dense.shape[0]
    age = np.where(np.arange(n) % 3 == 0, 20, rng.integers(0, 120, n))
    kind = np.where(age == 20, "a", rng.choice(["b", "a", "c"], n))  # "a": never past 40
    labels = {"kind": ("cell", kind), "batch": ("cell", rng.choice(["y", "x"], n))}
    labels["age"] = ("cell", age)
    counts = xr.open_dataset(path, engine="sporadik", chunks=chunks)["s"].assign_coords(labels)
    plain = xr.DataArray(dense, dims=("cell", "gene"), name="s").assign_coords(labels)
    with xr.set_options(use_flox=flox):
        for got, numpy in ((counts, plain), (counts.T, plain.T)):
            for op in ("sum", "mean", "count"):
                result = getattr(got.groupby(_several(by)), op)()
                if chunks is None:  # one pass over the store, not xarray's read per group
                    assert isinstance(result.data, np.ndarray)
                else:
                    assert any(str(n).startswith("sporadik-") for n in result.data.dask.layers)
                _agreeing(result.compute(), getattr(numpy.groupby(_several(by)), op)())
        dataset = counts.to_dataset().groupby(_several(by)).mean()  # groups last, as xarray's
        _agreeing(dataset["s"].compute(), plain.to_dataset().groupby(_several(by)).mean()["s"])


GROUP_ORDER: dict[str, Callable[[Any], xr.DataArray]] = {
    "median": lambda g: g.median(),
    "median skipna=False": lambda g: g.median(skipna=False),
    "quantile": lambda g: g.quantile([0.25, 0.9]),
    "quantile of every dim": lambda g: g.quantile(0.5, dim=["cell", "gene"]),
}


@pytest.mark.parametrize("chunks", [None, {}, {"cell": 7, "gene": 5}], ids=["lazy", "{}", "small"])
@pytest.mark.parametrize("call", list(GROUP_ORDER))
def test_group_medians_and_quantiles_are_xarrays_of_the_dense_array_group_by_group(
    store: tuple[Path, npt.NDArray[Any]], chunks: Any, call: str
) -> None:
    """flox has no sparse median (xarray's path with flox installed fails inside it); each group
    is a selection answered from its stored values. Equal to xarray's own path without flox to
    the last bit (flox's quantile interpolates its own way, within 1e-14)."""
    if EXPRESSIONS and chunks is not None:
        pytest.skip(
            "xarray joins the groups' dask results by xr.concat, which dask's expression model "
            "lacks (no __array_function__)"
        )
    path, dense = store
    labels = np.random.default_rng(5).choice(["b", "a", "c"], dense.shape[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        X = xr.open_dataset(path, engine="sporadik", chunks=chunks)["s"]
    got = GROUP_ORDER[call](X.assign_coords(kind=("cell", labels)).groupby("kind"))
    plain = xr.DataArray(dense, dims=("cell", "gene")).assign_coords(kind=("cell", labels))
    with xr.set_options(use_flox=False):
        want = GROUP_ORDER[call](plain.groupby("kind"))
    assert got.dims == want.dims
    np.testing.assert_array_equal(got.values, want.values)
    assert got.dtype == want.dtype


@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "{}"])
@pytest.mark.parametrize("call", list(GROUP_ORDER))
def test_a_datasets_group_medians_and_quantiles_are_its_dataarrays_beside_xarrays_of_the_rest(
    store: tuple[Path, npt.NDArray[Any]], chunks: Any, call: str
) -> None:
    """``ds.groupby(...).median()`` or ``.quantile(q)`` of an opened store: flox, which xarray
    hands a Dataset's groups to, has no sparse median and no sparse quantile; the store's
    variable comes back as a DataArray's grouped answer (quantiles last, as flox and a
    DataArray put them), the other variables as xarray's of their dense values."""
    if EXPRESSIONS and chunks is not None:
        pytest.skip("xarray joins the groups' dask results by xr.concat (no __array_function__)")
    path, dense = store
    rng = np.random.default_rng(5)
    labels = rng.choice(["b", "a", "c"], dense.shape[0])
    size = rng.random(dense.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ds = xr.open_dataset(path, engine="sporadik", chunks=chunks)
    ds = ds.assign_coords(kind=("cell", labels)).assign(size=(("cell", "gene"), size))
    got = GROUP_ORDER[call](ds.groupby("kind")).compute()
    plain = xr.DataArray(dense, dims=("cell", "gene")).assign_coords(kind=("cell", labels))
    alone = xr.Dataset({"size": (("cell", "gene"), size)}, coords={"kind": ("cell", labels)})
    with xr.set_options(use_flox=False):
        want = GROUP_ORDER[call](plain.groupby("kind"))
        sizes = GROUP_ORDER[call](alone.groupby("kind"))["size"]
    assert got["s"].dims == want.dims and got["s"].dtype == want.dtype
    np.testing.assert_array_equal(got["s"].values, want.values)
    assert got["size"].dims == want.dims  # quantiles last, a Dataset's without flox first
    np.testing.assert_array_equal(got["size"].transpose(*sizes.dims).values, sizes.values)


RESAMPLED: dict[str, Callable[[Any], xr.Dataset]] = {
    "median": lambda r: r.median(),
    "quantile": lambda r: r.quantile([0.25, 0.9]),
    "sum": lambda r: r.sum(),
    "mean": lambda r: r.mean(),
}


@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "{}"])
@pytest.mark.parametrize("call", list(RESAMPLED))
def test_a_datasets_resampled_reductions_are_xarrays_of_the_dense_dataset(
    tmp_path: Path, chunks: Any, call: str
) -> None:
    """``ds.resample(time=...)`` of an opened store beside a dense variable: xarray hands a
    Dataset's bins to flox, which fails joining sparse and dense results, and has no sparse
    median or quantile. The store's variable is resampled as a DataArray's (in one pass; a
    median or quantile bin by bin, quantiles last as flox puts them), the rest by xarray."""
    if EXPRESSIONS and chunks is not None:
        pytest.skip("xarray joins the groups' dask results by xr.concat (no __array_function__)")
    rng = np.random.default_rng(6)
    dense = random_dense(rng, (48, 6), 0.3, np.float64)
    times = np.datetime64("2026-01-01") + np.arange(48) * np.timedelta64(1, "h")
    stored = xr.DataArray(sparse.COO.from_numpy(dense), dims=("time", "gene"), name="X")
    sd.to_sporadik(stored.assign_coords(time=times), tmp_path / "t.zarr")
    other = rng.random(dense.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ds = xr.open_dataset(tmp_path / "t.zarr", engine="sporadik", chunks=chunks)
    ds = ds.assign(other=(("time", "gene"), other))
    plain = xr.Dataset(
        {"X": (("time", "gene"), dense), "other": (("time", "gene"), other)},
        coords={"time": times},
    )
    got = RESAMPLED[call](ds.resample(time="12h")).compute()
    with xr.set_options(use_flox=False):
        want = RESAMPLED[call](plain.resample(time="12h")).transpose("time", "gene", ...)
    for name in ("X", "other"):
        assert got[name].dims == want[name].dims and got[name].dtype == want[name].dtype
        assert isinstance(got[name].data, np.ndarray)
        if call in ("median", "quantile"):
            np.testing.assert_array_equal(got[name].values, want[name].values)
        else:
            np.testing.assert_allclose(got[name].values, want[name].values, rtol=1e-12)
