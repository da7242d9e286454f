"""Numbers a skeptical user checks: each answer equals xarray's on the dense array, or is refused
as numpy refuses it. Values are built to trip the algorithm: a large mean against a small
spread, integers near their limits, squares past float64's range, axes of no position."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
import sparse
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sporadik_dask as sd
from sporadik_dask.read.dask_model import EXPRESSIONS
from sporadik_dask.reduce.fields import supported

MODES: dict[str, dict[str, Any]] = {
    "lazy": {},
    "chunks={}": {"chunks": {}},
    "small chunks": {"chunks": {"a": 7, "b": 5}},
    "loaded": {},
}


def _offset(rng: np.random.Generator, shape: tuple[int, int], case: str) -> npt.NDArray[Any]:
    """Values of a large mean and a small spread, each ``case`` a way users meet them."""
    noise = rng.standard_normal(shape)
    if case == "1e8 + N(0, 1)":
        return 1e8 + noise
    if case == "epoch seconds":
        return 1.6e9 + rng.integers(0, 4, shape).astype(np.float64) + noise / 10
    if case == "int64 1e9 +- 3":
        return np.int64(10**9) + rng.integers(-3, 4, shape)
    if case == "near 1e153":  # squares past float64's range, deviations well inside it
        return 1e153 * (1 + noise * 1e-3)
    if case == "float32 1e4 + N(0, 1)":
        return (1e4 + noise).astype(np.float32)
    if case == "complex 1e7":
        return (1e7 + noise) + 1j * (1e7 + rng.standard_normal(shape))
    raise AssertionError(case)


CASES = [
    "1e8 + N(0, 1)",
    "epoch seconds",
    "int64 1e9 +- 3",
    "near 1e153",
    "float32 1e4 + N(0, 1)",
    "complex 1e7",
]


def _store(path: Path, dense: npt.NDArray[Any]) -> Path:
    data = sparse.COO.from_numpy(dense)
    sd.to_sporadik(xr.DataArray(data, dims=("a", "b"), name="x"), path)
    return path


def _open(path: Path, mode: str) -> xr.DataArray:
    variable = xr.open_dataset(path, engine="sporadik", **MODES[mode])["x"]
    return variable.load() if mode == "loaded" else variable


def _values(result: xr.DataArray) -> npt.NDArray[Any]:
    data = result.compute().data
    return np.asarray(data.todense() if hasattr(data, "todense") else data)


@pytest.fixture(scope="module", params=CASES)
def offset_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, npt.NDArray[Any]]:
    """Values of a large mean, stored at 60 % of the cells; column 0 and row 0 stored whole
    (no implicit zero to join), column 1 holding one value (a mean of mostly zeros)."""
    rng = np.random.default_rng(CASES.index(request.param))
    shape = (40, 12)
    values = _offset(rng, shape, request.param)
    keep = rng.random(shape) < 0.6
    keep[:, 0] = keep[0] = True
    keep[:, 1] = False
    keep[3, 1] = True
    dense = np.where(keep, values, np.zeros((), values.dtype))
    return _store(tmp_path_factory.mktemp("offset") / "s.zarr", dense), dense


def _expected(dense: npt.NDArray[Any], call: Callable[[xr.DataArray], Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(call(xr.DataArray(dense, dims=("a", "b"))).values)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The specified chunks separate")
@pytest.mark.filterwarnings("ignore:Degrees of freedom")
@pytest.mark.parametrize("mode", MODES)
def test_variance_and_deviation_of_a_large_mean_keep_numpys_digits(
    offset_store: tuple[Path, npt.NDArray[Any]], mode: str
) -> None:
    """Σx² - n·mean² loses every digit here (1e8 + N(0, 1) gave var 1.28 for 1.20); moments
    merged by Chan's formula keep what numpy's two passes keep."""
    path, dense = offset_store
    variable = _open(path, mode)
    calls: list[Callable[[xr.DataArray], Any]] = [
        lambda x: x.var("a"),
        lambda x: x.var("b"),
        lambda x: x.std("a", ddof=1),
        lambda x: x.var(),
        lambda x: x.std(["a", "b"]),
    ]
    for call in calls:
        got, expected = _values(call(variable)), _expected(dense, call)
        assert got.dtype == expected.dtype
        scale = np.abs(expected).max()
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=scale * 1e-9, equal_nan=True)


@pytest.mark.filterwarnings("ignore:The specified chunks separate")
@pytest.mark.parametrize("mode", ["lazy", "chunks={}", "small chunks"])
def test_grouped_and_resampled_variance_of_a_large_mean_keep_numpys_digits(
    offset_store: tuple[Path, npt.NDArray[Any]], mode: str
) -> None:
    """Compared with numpy group by group: flox's grouped variance of complex values is
    complex, where numpy's (and ours) is the real mean of squared magnitudes."""
    path, dense = offset_store
    labels = np.arange(dense.shape[0]) % 3
    bins = np.arange(dense.shape[0]) // 6
    times = pd.date_range("2026-01-01", periods=dense.shape[0], freq="h")
    var = np.nanvar if dense.dtype.kind in "fc" else np.var

    def grouped(x: xr.DataArray) -> Any:
        return x.assign_coords(g=("a", labels)).groupby("g").var()

    def resampled(x: xr.DataArray) -> Any:
        return x.assign_coords(a=times).resample(a="6h").std()

    expected = np.stack([var(dense[labels == g], axis=0) for g in range(3)])
    for call, want in [
        (grouped, expected),
        (resampled, np.sqrt(np.stack([var(dense[bins == b], axis=0) for b in range(7)]))),
    ]:
        result = call(_open(path, mode))
        assert result.dims == call(xr.DataArray(dense, dims=("a", "b"))).dims
        got = _values(result)
        scale = np.abs(want).max()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=scale * 1e-9, equal_nan=True)


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, npt.NDArray[Any]]:
    rng = np.random.default_rng(7)
    dense = np.where(rng.random((20, 9)) < 0.4, rng.standard_normal((20, 9)), 0.0)
    dense[2, 3] = np.nan
    return _store(tmp_path_factory.mktemp("small") / "s.zarr", dense), dense


@pytest.mark.filterwarnings("ignore:The specified chunks separate")
@pytest.mark.filterwarnings("ignore:Degrees of freedom")
@pytest.mark.parametrize("mode", MODES)
def test_no_degree_of_freedom_left_is_what_numpy_gives(
    small_store: tuple[Path, npt.NDArray[Any]], mode: str
) -> None:
    """``ddof`` of every value or more: NaN when NaNs are skipped (numpy's ``nanvar``), infinite
    when not (``var``), as xarray gives on the dense array."""
    path, dense = small_store
    variable = _open(path, mode)
    for dim, n in (("a", 20), (None, dense.size)):
        for ddof in (n - 1, n, n + 5):
            for skipna in (True, False):

                def call(x: xr.DataArray, d: Any = dim, o: int = ddof, s: bool = skipna) -> Any:
                    return x.var(d, ddof=o, skipna=s)

                got, expected = _values(call(variable)), _expected(dense, call)
                np.testing.assert_allclose(got, expected, rtol=1e-12, equal_nan=True)
                assert (np.isinf(got) == np.isinf(expected)).all()


@pytest.mark.parametrize("mode", [*MODES, "from_sporadik"])
def test_an_axis_that_does_not_exist_is_refused_as_numpy_refuses_it(
    small_store: tuple[Path, npt.NDArray[Any]], mode: str
) -> None:
    """``axis % ndim`` had summed axis 0 for ``axis=2``, and a repeated axis was taken once."""
    path, _ = small_store
    x: Any = sd.from_sporadik(path) if mode == "from_sporadik" else _open(path, mode)
    for op in ("sum", "mean", "max", "var"):
        if mode == "from_sporadik" and op == "var":
            continue
        reduce = getattr(x, op)
        with pytest.raises(np.exceptions.AxisError):
            reduce(axis=2)
        with pytest.raises(np.exceptions.AxisError):
            reduce(axis=-3)
        with pytest.raises(ValueError, match="duplicate"):
            reduce(axis=(0, 0))
        with pytest.raises(ValueError, match="duplicate"):
            reduce(axis=(1, -1))
        if mode != "from_sporadik":
            with pytest.raises(ValueError):
                reduce(["a", "a"])
    if mode == "from_sporadik":  # numpy's answer for a negative axis in range
        np.testing.assert_allclose(
            x.sum(axis=-1).compute().todense(), x.sum(axis=1).compute().todense()
        )


@pytest.mark.filterwarnings("ignore:The specified chunks separate")
@pytest.mark.parametrize("mode", [*MODES, "from_sporadik"])
def test_a_maximum_over_no_position_is_refused_as_numpy_refuses_it(
    small_store: tuple[Path, npt.NDArray[Any]], mode: str
) -> None:
    """Over an empty selection a maximum had come back as 0, -1 or NaN by dtype."""
    path, dense = small_store
    x: Any = sd.from_sporadik(path) if mode == "from_sporadik" else _open(path, mode)
    empty = x[:0] if mode == "from_sporadik" else x.isel(a=slice(0, 0))
    # dask over sparse blocks raises sparse's TypeError for an empty dask slice: no value either
    refused = (ValueError, TypeError) if mode == "from_sporadik" else ValueError
    for op in ("max", "min"):
        with pytest.raises(refused):
            result = getattr(empty, op)(axis=0)
            result.compute()
        # along the other axis the result is empty, not an error, as numpy gives it
        kept = getattr(empty, op)(axis=1)
        assert kept.shape == getattr(dense[:0], op)(axis=1).shape
    if mode != "from_sporadik":
        np.testing.assert_array_equal(_values(empty.sum("a")), np.zeros(dense.shape[1]))


@pytest.mark.filterwarnings("ignore:The specified chunks separate")
@pytest.mark.parametrize("mode", ["lazy", "chunks={}", "small chunks"])
def test_an_empty_bin_is_missing_as_xarray_gives_it(
    small_store: tuple[Path, npt.NDArray[Any]], mode: str
) -> None:
    """A resample over an hour with no position had raised ``CoordinateValidationError`` (the
    bins labelled by the observed ones only), and a lazy sum there had been 0, not NaN."""
    path, dense = small_store
    hours = pd.date_range("2026-01-01", periods=dense.shape[0], freq="h")
    times = hours.where(np.arange(dense.shape[0]) < 12, hours + pd.Timedelta("6h"))
    positions = np.where(np.arange(dense.shape[0]) < 10, 1.0, 25.0)
    calls: list[Callable[[xr.DataArray], Any]] = [
        lambda x: x.assign_coords(a=times).resample(a="6h").sum(),
        lambda x: x.assign_coords(a=times).resample(a="6h").mean(),
        lambda x: x.assign_coords(a=times).resample(a="6h").var(),
        lambda x: x.assign_coords(p=("a", positions)).groupby_bins("p", [0, 10, 20, 30]).sum(),
        lambda x: x.assign_coords(p=("a", positions)).groupby_bins("p", [0, 10, 20, 30]).max(),
    ]
    for call in calls:
        result = call(_open(path, mode))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            expected = call(xr.DataArray(dense, dims=("a", "b")))
        assert result.dims == expected.dims
        xr.testing.assert_identical(result.coords.to_dataset(), expected.coords.to_dataset())
        np.testing.assert_allclose(_values(result), expected.values, equal_nan=True)
        assert np.isnan(expected.values).any()  # the case holds an empty bin


DTYPES = [np.int8, np.int32, np.int64, np.uint8, np.uint64, np.float32, np.float64, np.complex128]
OPS_KWARGS: list[tuple[str, dict[str, Any]]] = [
    (op, kwargs)
    for op in ("sum", "mean", "max", "min", "count", "var", "std")
    for kwargs in [{}, {"skipna": False}, {"skipna": True}]
] + [("var", {"ddof": 1}), ("std", {"ddof": 1}), ("sum", {"min_count": 2})]


def _random_values(data: Any, dtype: np.dtype[Any], n: int) -> npt.NDArray[Any]:
    """Values of ``dtype`` that trip reductions: dtype limits, NaN, ±inf, a large offset."""
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        pool = np.array([info.min, info.max, info.max - 1, 1, 2, 3], dtype=dtype)
        return rng.choice(pool, n)
    base: npt.NDArray[Any] = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4)
    base = base + rng.choice([0, 1e8])
    kind = rng.random(n)
    base = np.where(kind < 0.05, np.nan, base)
    base = np.where((kind > 0.05) & (kind < 0.08), np.inf, base)
    base = np.where((kind > 0.08) & (kind < 0.1), -np.inf, base)
    if dtype.kind == "c":
        return np.asarray(base + 1j * rng.standard_normal(n), dtype=dtype)
    return base.astype(dtype)


def _random_dense(data: st.DataObject) -> npt.NDArray[Any]:
    """A dense array of rank 2 to 4, axes of 0 to 6 positions, any dtype, none, some or all of
    its cells holding values (:func:`_random_values`)."""
    rank = data.draw(st.integers(2, 4), label="rank")
    shape = tuple(data.draw(st.lists(st.integers(0, 6), min_size=rank, max_size=rank)))
    dtype = np.dtype(data.draw(st.sampled_from(DTYPES), label="dtype"))
    density = data.draw(st.sampled_from([0.0, 0.3, 1.0]), label="density")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="mask seed"))
    mask = rng.random(shape) < density
    dense = np.zeros(shape, dtype)
    dense[mask] = _random_values(data, dtype, int(mask.sum()))
    return dense


def _assert_close(
    got: npt.NDArray[Any], want: npt.NDArray[Any], op: str, dense: npt.NDArray[Any], case: Any
) -> None:
    """``got`` is numpy's ``want`` to 1e-5, real and imaginary parts apart (a complex infinity
    differs by NaN). A mean of int64 values near ±2**63 is taken by numpy in float64, exact to
    ~eps * |x| only: numpy's answer for 8 such values was 0.0 where the mean is 1/8, the pass's.
    A complex NaN is any NaN: numpy's ``max`` gives the first it meets, dask's another."""
    want = want.astype(got.dtype)
    finite = np.isfinite(want)
    scale = np.abs(want[finite]).max() if finite.any() else 1.0
    atol = 1e-9 * scale
    if "mean" in op:
        values = np.abs(dense[np.isfinite(dense)]).astype(np.float64)
        atol += 16 * np.finfo(np.float64).eps * (values.max() if values.size else 0.0)
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    assert (nan_got == nan_want).all(), (case, got, want)
    for part in (np.real, np.imag):
        a, b = part(got), part(want)
        close = np.isclose(a, b, rtol=1e-5, atol=atol, equal_nan=True)
        assert (close | (a == b) | nan_want).all(), (case, got, want)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The specified chunks separate")
@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_stores_reduce_as_xarray_does_on_the_dense_array(
    tmp_path: Path, data: st.DataObject
) -> None:
    """Ranks 2 to 4, axes of no position, every dtype, values at the dtype's limits, NaN, ±inf,
    large offsets; every reduction with its keywords, in every open mode: xarray's answer on
    the dense array, or its error. float32 is compared with the float64 answer: numpy
    accumulates float32 in float32, and the pass accumulates in float64."""
    dense = _random_dense(data)
    rank, shape, dtype = dense.ndim, dense.shape, dense.dtype
    dims = tuple("abcd"[:rank])
    path = tmp_path / f"{len(list(tmp_path.iterdir()))}.zarr"
    sd.to_sporadik(xr.DataArray(sparse.COO.from_numpy(dense), dims=dims, name="x"), path)
    wide = dense.astype(np.float64) if dtype == np.float32 else dense
    mode = data.draw(st.sampled_from(["lazy", "chunks={}", "small chunks", "loaded"]))
    chunks: Any = {"lazy": None, "loaded": None, "chunks={}": {}}.get(mode, dict.fromkeys(dims, 2))
    variable = xr.open_dataset(path, engine="sporadik", chunks=chunks)["x"]
    if mode == "loaded":
        variable = variable.load()
    dimsets = [None, *[(d,) for d in dims], dims[:2]]
    for op, kwargs in OPS_KWARGS:
        if EXPRESSIONS and chunks is not None and not supported(op, dtype):
            continue  # xarray's own (nanmax of complex) of a dask array: the model lacks it
        for dimset in dimsets:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                try:
                    expected = getattr(xr.DataArray(wide, dims=dims), op)(dimset, **kwargs)
                    typed = getattr(xr.DataArray(dense, dims=dims), op)(dimset, **kwargs)
                except (ValueError, TypeError) as error:
                    if op == "count":  # xarray's count of an empty float array fails in flox
                        continue
                    with pytest.raises(type(error)):
                        _values(getattr(variable, op)(dimset, **kwargs))
                    continue
            result = getattr(variable, op)(dimset, **kwargs)
            got = _values(result)
            case = (op, kwargs, dimset, mode, shape, dtype)
            assert result.dims == expected.dims, case
            assert got.dtype == typed.dtype, case
            _assert_close(got, expected.values, op, dense, case)


STEPS: dict[str, Callable[[xr.DataArray], Any]] = {
    "x + 1": lambda x: x + 1,
    "x * 2": lambda x: x * 2,
    "exp": lambda x: np.exp(x),
    "log1p": lambda x: np.log1p(x),
    "where > 0": lambda x: x.where(x > 0),
    "x > 0": lambda x: x > 0,
    "astype float32": lambda x: x.astype(np.float32),
    "normalized": lambda x: x / (x.sum("b") + 1) * 1e4,
}


#: Steps whose result dask's expression model gives otherwise for any dask array, and why.
STEPS_EXPRESSIONS_LACK = {
    "x + 1": "float32 and int32 arrays with a Python scalar are promoted to 64 bits (not NEP 50)",
    "x * 2": "float32 and int32 arrays with a Python scalar are promoted to 64 bits (not NEP 50)",
    "where > 0": "xarray's where takes numpy's result_type of the dask array, which it lacks",
    "normalized": "float32 and int32 arrays times a Python scalar are promoted to 64 bits",
}


@pytest.fixture(scope="module", params=[np.float32, np.int32])
def step_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, npt.NDArray[Any]]:
    rng = np.random.default_rng(3)
    shape = (11, 6)
    keep = rng.random(shape) < 0.5
    dense = np.where(keep, rng.integers(1, 50, shape), 0).astype(request.param)
    if dense.dtype.kind == "f":
        dense[4, 2] = np.nan
    return _store(tmp_path_factory.mktemp("steps") / "s.zarr", dense), dense


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The specified chunks separate")
@pytest.mark.parametrize("mode", ["chunks={}", "small chunks"])
@pytest.mark.parametrize("step", STEPS)
def test_a_reduction_after_an_elementwise_step_is_xarrays_on_the_dense_array(
    step_store: tuple[Path, npt.NDArray[Any]], step: str, mode: str
) -> None:
    """Every reduction, along each dim, over all, and grouped, after a step that may fill the
    absent cells (``x + 1``, ``exp``, ``where``): values, dtype and dims as xarray gives them.
    float32 values are compared with xarray's over float64: numpy's float32 variance of
    ``exp(49)`` overflows its squares to inf, where the pass accumulates in float64."""
    if EXPRESSIONS and step in STEPS_EXPRESSIONS_LACK:
        pytest.skip(f"dask's expression model: {STEPS_EXPRESSIONS_LACK[step]}")
    path, dense = step_store
    labels = np.arange(dense.shape[0]) % 3
    variable = _open(path, mode).assign_coords(g=("a", labels))
    typed = xr.DataArray(dense, dims=("a", "b")).assign_coords(g=("a", labels))
    wide = typed.astype(np.float64) if dense.dtype == np.float32 else typed
    for op in ("sum", "mean", "max", "min", "count", "var", "std"):
        for how in ("a", "b", None, "groupby"):

            def call(x: xr.DataArray, o: str = op, h: Any = how) -> Any:
                stepped = STEPS[step](x)
                if h == "groupby":
                    return getattr(stepped.groupby("g"), o)()
                return getattr(stepped, o)(h)

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                expected = call(wide)
                result = call(variable)
                got = _values(result)
            assert result.dims == expected.dims, (op, how)
            assert got.dtype == call(typed).dtype, (op, how)
            want = expected.values.astype(got.dtype)
            np.testing.assert_allclose(got, want, rtol=1e-5, equal_nan=True, err_msg=f"{op} {how}")


ARRAY_OPS: list[tuple[str, dict[str, Any]]] = [
    (op, kwargs)
    for op in ("sum", "mean", "max", "min", "var", "std", "nansum", "nanmean", "nanmax")
    for kwargs in [dict[str, Any]()]
] + [("var", {"ddof": 1}), ("nanvar", {"ddof": 1}), ("nanstd", {}), ("nanmin", {})]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:All-NaN")
@settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_stores_reduce_through_from_sporadik_as_numpy_does_on_the_dense_array(
    tmp_path: Path, data: st.DataObject
) -> None:
    """The dask array of ``from_sporadik`` (``sparse.COO`` blocks, and ``gcxs`` ones) reduced by
    numpy's functions (dask dispatches them to its reductions) along each axis, over all and
    over two: numpy's answer on the dense array, or its error. Ranks 2 to 4, axes of no
    position, every dtype, values at the dtype's limits, NaN, ±inf, large offsets. dask's own
    ``nanmean``, ``nanvar`` and ``nanstd`` of ``sparse`` blocks raise, and its ``var`` of
    boolean or ``gcxs`` blocks: the read answers them itself."""
    dense = _random_dense(data)
    rank, shape, dtype = dense.ndim, dense.shape, dense.dtype
    path = tmp_path / f"{len(list(tmp_path.iterdir()))}.zarr"
    sd.to_sporadik(sparse.COO.from_numpy(dense), path)
    chunks = data.draw(st.sampled_from(["auto", 2]), label="chunks")
    layout = data.draw(st.integers(0, rank - 1), label="layout")
    gcxs = rank == 2 and dtype != np.float16 and data.draw(st.booleans(), label="gcxs")
    form: Literal["coo", "gcxs"] = "gcxs" if gcxs else "coo"
    x = sd.from_sporadik(path, chunks=chunks, axis=layout, format=form)
    wide = dense.astype(np.float64) if dtype == np.float32 else dense
    for op, kwargs in ARRAY_OPS:
        if EXPRESSIONS and not supported(op.removeprefix("nan"), dtype):
            continue  # dask's own (max of complex) by NEP-18, which the model lacks
        for axis in [None, *range(rank), (0, 1)]:
            case = (op, kwargs, axis, shape, dtype, chunks, layout, form)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                try:
                    expected = np.asarray(getattr(np, op)(wide, axis=axis, **kwargs))
                    typed = np.asarray(getattr(np, op)(dense, axis=axis, **kwargs))
                except (ValueError, TypeError) as error:
                    with pytest.raises((type(error), ValueError, TypeError)):
                        getattr(np, op)(x, axis=axis, **kwargs).compute()
                    continue
                result = getattr(np, op)(x, axis=axis, **kwargs).compute()
            got = np.asarray(result.todense() if hasattr(result, "todense") else result)
            assert got.shape == expected.shape, case
            assert got.dtype.kind == typed.dtype.kind, (case, got.dtype, typed.dtype)
            _assert_close(got, expected, op, dense, case)
