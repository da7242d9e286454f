"""``quantile``, ``median``, ``argmax`` and ``argmin`` of a store's variable are xarray's on the
dense array, lazily, chunked, of selections and loaded; ``cumsum`` and ``cumprod`` are refused in
words that name what to do instead."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import numpy as np
import numpy.typing as npt
import pytest
import sparse
import xarray as xr

import sporadik_dask as sd
from sporadik_dask.backend.order import DenseResultError
from sporadik_dask.format.errors import LayoutError
from sporadik_dask.read.dask_model import EXPRESSIONS

ROUTES: dict[str, dict[str, Any]] = {
    "lazy": {},
    "chunks={}": {"chunks": {}},
    "small chunks": {"chunks": {"cell": 7, "gene": 5}},
    "loaded": {},
}


def _dense(dtype: str, shape: tuple[int, ...] = (37, 23)) -> npt.NDArray[Any]:
    """Values of both signs, mostly absent: whole lines of zeros, lines of negatives only, one
    line of one value, and (floats) stored NaN."""
    rng = np.random.default_rng(3)
    dense = rng.integers(-5, 9, size=shape).astype(dtype)
    dense[rng.random(shape) < 0.7] = 0
    dense[2] = 0
    dense[5] = -np.abs(dense[5]) - 1
    dense[7] = 0
    dense[7, (1,) * (len(shape) - 1)] = 4
    dense[:, 3] = 0
    if dense.dtype.kind == "f":
        dense[9, :4] = np.nan
        dense[11, 1] = np.nan
    return dense


def _dims(ndim: int) -> tuple[str, ...]:
    return ("cell", "gene", "batch")[:ndim]


def _labelled(data: Any) -> xr.DataArray:
    """``data`` with a coordinate along each dim (idxmax's labels)."""
    dims = _dims(data.ndim)
    sizes = zip(dims, data.shape, strict=True)
    coords = {d: np.arange(n) * 10 + i for i, (d, n) in enumerate(sizes)}
    return xr.DataArray(data, dims=dims, coords=coords, name="X")


def _store(tmp: Path, dense: npt.NDArray[Any]) -> Path:
    path = tmp / "s.zarr"
    sd.to_sporadik(_labelled(sparse.COO.from_numpy(dense)), path, chunk=16)
    return path


def _open(path: Path, route: str) -> xr.DataArray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        X = xr.open_dataset(path, engine="sporadik", **ROUTES[route])["X"]
    return X.load() if route == "loaded" else X


@pytest.fixture(scope="module", params=["float64", "float32", "int32", "int64"])
def stored(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, xr.DataArray]:
    dense = _dense(request.param)
    path = _store(tmp_path_factory.mktemp(request.param), dense)
    return path, _labelled(dense)


def _value(result: xr.DataArray) -> Any:
    return result.compute().data


def _same(got: xr.DataArray, want: xr.DataArray) -> None:
    assert got.dims == want.dims, (got.dims, want.dims)
    values = _value(got)
    assert isinstance(values, np.ndarray), type(values)
    assert values.dtype == want.dtype, (values.dtype, want.dtype)
    np.testing.assert_array_equal(values, want.values)
    for name, coord in want.coords.items():
        np.testing.assert_array_equal(got[name].values, coord.values)


CALLS: dict[str, Callable[[xr.DataArray], xr.DataArray]] = {
    "median('cell')": lambda X: X.median("cell"),
    "median('gene')": lambda X: X.median("gene"),
    "median()": lambda X: X.median(),
    "median('cell', skipna=False)": lambda X: X.median("cell", skipna=False),
    "quantile(0.3, 'cell')": lambda X: X.quantile(0.3, "cell"),
    "quantile([0, 0.1, 0.5, 0.9, 1], 'gene')": lambda X: X.quantile([0, 0.1, 0.5, 0.9, 1], "gene"),
    "quantile(0.75)": lambda X: X.quantile(0.75),
    "quantile([0.25, 0.5], ['cell', 'gene'])": lambda X: X.quantile([0.25, 0.5], ["cell", "gene"]),
    "quantile(0.5, 'cell', skipna=False)": lambda X: X.quantile(0.5, "cell", skipna=False),
    "quantile([0.2], 'gene', skipna=True)": lambda X: X.quantile([0.2], "gene", skipna=True),
    "argmax('cell')": lambda X: X.argmax("cell"),
    "argmin('gene')": lambda X: X.argmin("gene"),
    "argmax('gene', skipna=False)": lambda X: X.argmax("gene", skipna=False),
    "argmin(...)['gene']": lambda X: X.argmin(...)["gene"],
    "argmax(['cell', 'gene'])['cell']": lambda X: X.argmax(["cell", "gene"])["cell"],
}


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("call", list(CALLS))
def test_an_order_statistic_of_a_store_is_xarrays_of_the_dense_array(
    stored: tuple[Path, xr.DataArray], route: str, call: str
) -> None:
    several = call.startswith("arg") and "[" in call  # a position along several dims
    if EXPRESSIONS and several and route in ("chunks={}", "small chunks"):
        pytest.skip("xarray stacks several dims by reshape, which dask's expression model lacks")
    path, dense = stored
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = CALLS[call](dense)
    got = CALLS[call](_open(path, route))
    if route.endswith("chunks") or route == "chunks={}":
        assert isinstance(got.data, dask.array.Array), type(got.data)
    _same(got, want)


LABELS: dict[str, Callable[[xr.DataArray], xr.DataArray]] = {
    "idxmax('cell')": lambda X: X.idxmax("cell"),
    "idxmin('cell', skipna=False)": lambda X: X.idxmin("cell", skipna=False),
    "idxmax('gene')": lambda X: X.idxmax("gene"),
}


@pytest.mark.parametrize("route", ["lazy", "chunks={}", "small chunks", "loaded"])
@pytest.mark.parametrize("call", list(LABELS))
def test_the_label_of_an_extreme_is_xarrays_of_the_dense_array(
    stored: tuple[Path, xr.DataArray], route: str, call: str
) -> None:
    """xarray's idxmax takes the labels in the variable's array type (``to_like_array`` of
    ``array.data``): a lazily opened variable is handed as its dask read first, not read whole,
    and labels taken as a ``sparse.COO`` (a loaded variable's) come back dense, as numpy's."""
    path, dense = stored
    floats = dense.dtype.kind == "f"
    if EXPRESSIONS and floats and route != "loaded":
        pytest.skip("xarray's NaN check takes where(), which dask's expression model lacks")
    if route == "loaded" and floats and "skipna=False" not in call:
        pytest.skip(
            "open: xarray's where() of a loaded variable is sparse's, which lacks nanargmax"
        )
    _same(LABELS[call](_open(path, route)), LABELS[call](dense))


SELECTIONS: dict[str, Callable[[xr.DataArray], xr.DataArray]] = {
    "a list of genes": lambda X: X.isel(gene=[9, 3, 3, 0, 17]),
    "a slice of cells": lambda X: X.isel(cell=slice(30, 2, -3)),
    "a mask of cells, a slice of genes": lambda X: X.isel(
        cell=np.arange(37) % 3 != 1, gene=slice(4, 20)
    ),
    "a transposed view": lambda X: X.T,
}


@pytest.mark.parametrize("route", ["lazy", "chunks={}"])
@pytest.mark.parametrize("selection", list(SELECTIONS))
def test_an_order_statistic_of_a_selection_is_xarrays_of_the_dense_selection(
    stored: tuple[Path, xr.DataArray], route: str, selection: str
) -> None:
    path, dense = stored
    X = SELECTIONS[selection](_open(path, route))
    want = SELECTIONS[selection](dense)
    _same(X.median("cell"), want.median("cell"))
    _same(X.quantile([0.1, 0.6], "gene"), want.quantile([0.1, 0.6], "gene"))
    _same(X.argmin("cell"), want.argmin("cell"))
    _same(X.argmax("gene"), want.argmax("gene"))


@pytest.mark.parametrize("route", ["lazy", "chunks={}"])
def test_an_order_statistic_of_three_axes_keeps_one_or_two(tmp_path: Path, route: str) -> None:
    dense = _dense("float64", (13, 11, 4))
    X = _open(_store(tmp_path, dense), route)
    want = _labelled(dense)
    for dims in ("cell", ["cell", "batch"], ["gene", "batch"], None):
        _same(X.median(dims), want.median(dims))
        _same(X.quantile([0.3, 0.9], dims), want.quantile([0.3, 0.9], dims))
    for dim in ("cell", "gene"):
        _same(X.argmax(dim), want.argmax(dim))
        _same(X.argmin(dim, skipna=False), want.argmin(dim, skipna=False))
    _same(X.argmin("batch", skipna=False), want.argmin("batch", skipna=False))
    for reduced in (want, X):  # a line along "batch" of only NaN, refused as numpy refuses it
        with pytest.raises(ValueError, match="All-NaN slice encountered"):
            reduced.argmax("batch").compute()


@pytest.mark.parametrize("route", ["lazy", "chunks={}"])
def test_an_empty_axis_gives_xarrays_answer_or_error(tmp_path: Path, route: str) -> None:
    X = _open(_store(tmp_path, np.zeros((0, 6))), route)
    want = _labelled(np.zeros((0, 6)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _same(X.median("cell"), want.median("cell"))
        _same(X.median("gene"), want.median("gene"))
        for dim in ("cell", "gene"):  # xarray's apply_ufunc refuses numpy's answer
            with pytest.raises(ValueError, match="unexpected number of dimensions"):
                want.quantile(0.5, dim)
            with pytest.raises(ValueError, match="unexpected number of dimensions"):
                X.quantile(0.5, dim)
    _same(X.argmax("gene"), want.argmax("gene"))
    for reduced in (want, X):  # numpy's words, not those of a line of only NaN
        with pytest.raises(ValueError, match="attempt to get argmin of an empty sequence"):
            reduced.argmin("cell").compute()


def test_an_order_statistic_of_a_dataset_has_its_quantile_coordinate(tmp_path: Path) -> None:
    dense = _dense("float64")
    path = _store(tmp_path, dense)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ds = xr.open_dataset(path, engine="sporadik")
    got = ds.quantile([0.5, 0.9], "cell")["X"]
    _same(got, _labelled(dense).quantile([0.5, 0.9], "cell"))


@pytest.mark.parametrize("route", list(ROUTES))
def test_quantiles_with_another_method_are_refused_with_what_to_do(
    stored: tuple[Path, xr.DataArray], route: str
) -> None:
    path, dense = stored
    with pytest.raises(DenseResultError, match=r"method 'nearest'.*as_numpy\(\)"):
        _open(path, route).quantile(0.5, "cell", method="nearest")
    small = _open(path, route).isel(cell=slice(0, 6)).as_numpy()  # the advice, followed
    want = dense.isel(cell=slice(0, 6)).quantile(0.5, "cell", method="nearest")
    _same(small.quantile(0.5, "cell", method="nearest"), want)
    with pytest.raises(ValueError, match=r"range \[0, 1\]"):
        _open(path, route).quantile(1.5, "cell")


REFUSED = {
    "cumsum": lambda X: X.cumsum("cell"),
    "cumprod": lambda X: X.cumprod("gene"),
}


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("name", list(REFUSED))
def test_a_dense_result_is_refused_naming_the_dense_selection_to_take(
    tmp_path: Path, route: str, name: str
) -> None:
    dense = _dense("float64")
    X = _open(_store(tmp_path, dense), route)
    with pytest.raises(DenseResultError, match=r"sporadik variable of shape \(37, 23\)") as error:
        REFUSED[name](X)
    message = str(error.value)
    assert "is dense" in message and "Select what fits in memory" in message, message
    small = X.isel(cell=slice(0, 6)).as_numpy()  # the advice, followed
    _same(REFUSED[name](small), REFUSED[name](_labelled(dense[:6])))


def test_switched_off_a_quantile_is_xarrays_own(stored: tuple[Path, xr.DataArray]) -> None:
    path, _ = stored
    with dask.config.set({"sporadik.pushdown": False}), pytest.raises((TypeError, AttributeError)):
        _open(path, "lazy").quantile(0.5, "cell")


@pytest.mark.parametrize("route", ["lazy", "chunks={}"])
def test_a_layout_past_the_positions_limit_is_refused_before_its_runs_are_read(
    stored: tuple[Path, xr.DataArray], route: str
) -> None:
    path, _ = stored
    with dask.config.set({"sporadik.max-positions": 30}):
        X = _open(path, route)
        with pytest.raises(LayoutError, match="declares 37 positions"):
            X.median().compute()


@pytest.mark.parametrize("route", ["lazy", "chunks={}"])
def test_an_answer_past_the_positions_limit_is_refused_naming_the_selection_to_take(
    stored: tuple[Path, xr.DataArray], route: str
) -> None:
    """One answer per position of a genome-length axis is a dense array of tens of GiB: refused
    before any read, saying to select the stretch wanted, whose answer then holds."""
    path, dense = stored
    with dask.config.set({"sporadik.max-positions": 30}):
        X = _open(path, route)
        refusals: list[tuple[Callable[[xr.DataArray], Any], str, str]] = [
            (lambda X: X.quantile([0.1, 0.9], "cell"), "46 values", "gene"),
            (lambda X: X.median("gene"), "37 values", "cell"),
            (lambda X: X.argmax("gene"), "37 values", "cell"),
        ]
        for refused, cells, kept in refusals:
            with pytest.raises(DenseResultError, match=cells) as raised:
                refused(X).compute()
            assert f"X.isel({kept}=slice(a, b))" in str(raised.value)
        _same(X.median("cell"), dense.median("cell"))  # 23 answers: within the limit
        _same(
            X.isel(cell=slice(0, 30)).median("gene"), dense.isel(cell=slice(0, 30)).median("gene")
        )


STEPS: dict[str, Callable[[xr.DataArray], Any]] = {
    "np.abs(X)": lambda X: np.abs(X),
    "X * 2 - X": lambda X: X * 2 - X,
    "X > 1": lambda X: X > 1,
    "X + 1, absent cells 1": lambda X: X + 1,
}


@pytest.mark.parametrize("route", ["lazy", "chunks={}", "small chunks"])
@pytest.mark.parametrize("step", list(STEPS))
def test_an_order_statistic_after_elementwise_steps_is_xarrays_of_the_dense_steps(
    stored: tuple[Path, xr.DataArray], route: str, step: str
) -> None:
    path, dense = stored
    if EXPRESSIONS and dense.dtype == np.float32 and ("X +" in step or "X *" in step):
        pytest.skip("dask's expression model makes float32 and a Python number float64")
    X = STEPS[step](_open(path, route))
    want = STEPS[step](dense)
    for dim in ("cell", "gene"):
        _same(X.median(dim), want.median(dim))
        _same(X.argmax(dim), want.argmax(dim))
        if want.dtype == bool:  # numpy's linear interpolation subtracts booleans: refused
            with pytest.raises(TypeError, match="numpy boolean subtract") as numpy_s:
                want.quantile([0.2, 0.95], dim)
            with pytest.raises(TypeError) as ours:
                X.quantile([0.2, 0.95], dim).compute()
            assert str(ours.value) == str(numpy_s.value)
            continue
        _same(X.quantile([0.2, 0.95], dim), want.quantile([0.2, 0.95], dim))
