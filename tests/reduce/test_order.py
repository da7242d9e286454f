"""A line's quantiles, median and the positions of its extremes from its stored values equal
numpy's on the dense line, to the last bit: negatives before the absent zeros, NaN skipped or
spreading, lines of one value, of repeats, of none stored, of no cell."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sporadik_dask.reduce.order import extreme_positions, line_medians, line_quantiles, lines_of

DTYPES = ["float64", "float32", "int64", "int32", "int8", "uint16"]


def _stored(dense: npt.NDArray[Any], explicit: npt.NDArray[np.bool_]) -> Any:
    """Each line's nonzero cells, and the zeros ``explicit`` marks, shuffled: runs need not
    be sorted, and a store may hold a zero."""
    rows, columns = np.nonzero((dense != 0) | explicit)
    order = np.random.default_rng(0).permutation(rows.size)
    rows, columns = rows[order], columns[order]
    return lines_of(rows.astype(np.int64), dense[rows, columns], *dense.shape)


def _numpy(dense: npt.NDArray[Any], q: npt.NDArray[np.float64] | None, skipna: bool) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if q is None:
            return (np.nanmedian if skipna else np.median)(dense, axis=1)
        return (np.nanquantile if skipna else np.quantile)(dense, q, axis=1)


def _same(got: Any, want: Any) -> None:
    # numpy's nanquantile takes its dtype from the first line's result: float32 when that
    # line is all NaN, float64 otherwise; ours is float64 always (docs/xarray.md)
    assert got.dtype == want.dtype or (want.dtype == np.float32 and got.dtype == np.float64)
    np.testing.assert_array_equal(got.astype(want.dtype), want)


@st.composite
def _lines(draw: Any) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = (draw(st.integers(1, 6)), draw(st.integers(1, 9)))
    small = st.integers(-4 if dtype.kind != "u" else 0, 4)
    if dtype.kind == "f":
        small = st.one_of(small, st.floats(-1e3, 1e3, width=dtype.itemsize * 8), st.just(np.nan))
    dense = draw(hnp.arrays(dtype, shape, elements=small.map(lambda v: dtype.type(v))))
    zero = draw(hnp.arrays(np.float64, shape, elements=st.floats(0, 1))) < 0.5
    dense[zero] = 0
    explicit = draw(hnp.arrays(np.bool_, shape))
    return dense, explicit


@given(
    _lines(),
    st.lists(st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0, 1)), min_size=1, max_size=4),
    st.booleans(),
)
def test_quantiles_of_stored_values_are_numpys_of_the_dense_lines(
    drawn: tuple[npt.NDArray[Any], npt.NDArray[np.bool_]], q: list[float], skipna: bool
) -> None:
    dense, explicit = drawn
    quantiles = np.asarray(q, np.float64)
    got = line_quantiles(_stored(dense, explicit), quantiles, skipna=skipna)
    _same(got, _numpy(dense, quantiles, skipna))


@given(_lines(), st.booleans())
def test_medians_of_stored_values_are_numpys_of_the_dense_lines(
    drawn: tuple[npt.NDArray[Any], npt.NDArray[np.bool_]], skipna: bool
) -> None:
    dense, explicit = drawn
    _same(line_medians(_stored(dense, explicit), skipna=skipna), _numpy(dense, None, skipna))


CASES = {
    "all zero": [0, 0, 0, 0],
    "only negatives": [-3, -1, -2, -7],
    "negatives and zeros": [-3, 0, 0, -1, 0],
    "one value": [0, 0, 5, 0, 0],
    "one cell": [4],
    "repeats": [2, 2, 0, 2, 2, -2, -2, 0],
    "all stored": [3, -1, 4, -1, 5],
}


@pytest.mark.parametrize("dtype", DTYPES[:5])
@pytest.mark.parametrize("case", list(CASES))
def test_each_kind_of_line_is_answered_as_numpy_answers_it(case: str, dtype: str) -> None:
    dense = np.asarray([CASES[case]], dtype=dtype)
    lines = _stored(dense, np.zeros(dense.shape, bool))
    q = np.asarray([0.0, 0.1, 0.25, 0.5, 0.7, 1.0])
    _same(line_quantiles(lines, q, skipna=True), _numpy(dense, q, True))
    _same(line_medians(lines, skipna=False), _numpy(dense, None, False))


def test_a_line_of_only_nan_is_nan_skipped_or_not() -> None:
    dense = np.asarray([[np.nan, np.nan], [np.nan, 1.0], [0.0, 1.0]])
    lines = _stored(dense, np.zeros(dense.shape, bool))
    np.testing.assert_array_equal(line_medians(lines, skipna=True), [np.nan, 1.0, 0.5])
    np.testing.assert_array_equal(line_medians(lines, skipna=False), [np.nan, np.nan, 0.5])


def test_absent_cells_of_another_fill_value_sort_where_it_does() -> None:
    dense = np.asarray([[1.0, 1.0, -4.0, 7.0, 1.0, 2.0]])
    stored = np.flatnonzero(dense[0] != 1.0)
    lines = lines_of(np.zeros(stored.size, np.int64), dense[0, stored], 1, 6, fill=1.0)
    q = np.linspace(0, 1, 11)
    np.testing.assert_array_equal(line_quantiles(lines, q, skipna=False), _numpy(dense, q, False))
    nan_filled = lines_of(np.zeros(2, np.int64), np.asarray([3.0, 1.0]), 1, 6, fill=np.nan)
    np.testing.assert_array_equal(line_medians(nan_filled, skipna=True), [2.0])
    np.testing.assert_array_equal(line_medians(nan_filled, skipna=False), [np.nan])


ARGS = {
    (True, True): np.nanargmax,
    (True, False): np.argmax,
    (False, True): np.nanargmin,
    (False, False): np.argmin,
}


def _positions(dense: npt.NDArray[Any], absent: npt.NDArray[np.bool_], **kwargs: Any) -> Any:
    rows, columns = np.nonzero(~absent)
    order = np.random.default_rng(0).permutation(rows.size)  # runs need not be sorted
    rows, columns = rows[order].astype(np.int64), columns[order].astype(np.int64)
    fill = dense[absent][0] if absent.any() else 0
    count, extent = dense.shape
    try:
        return extreme_positions(rows, columns, dense[rows, columns], count, extent, fill, **kwargs)
    except ValueError as error:
        return str(error)


def _numpy_positions(dense: npt.NDArray[Any], largest: bool, skipna: bool) -> Any:
    try:
        return ARGS[largest, skipna](dense, axis=1)
    except ValueError as error:  # a line of only NaN, skipped
        return str(error)


@given(_lines(), st.booleans(), st.booleans())
def test_positions_of_extremes_are_numpys_of_the_dense_lines(
    drawn: tuple[npt.NDArray[Any], npt.NDArray[np.bool_]], largest: bool, skipna: bool
) -> None:
    dense, explicit = drawn
    got = _positions(dense, (dense == 0) & ~explicit, largest=largest, skipna=skipna)
    want = _numpy_positions(dense, largest, skipna)
    assert type(got) is type(want), (got, want)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fill", [np.nan, 1.0, -2.0])
@given(
    dense=hnp.arrays(np.float64, (4, 5), elements=st.sampled_from([-3.0, 0.0, 1.0, 2.0, np.nan])),
    absent=hnp.arrays(np.bool_, (4, 5)),
    largest=st.booleans(),
    skipna=st.booleans(),
)
def test_positions_of_extremes_count_absent_cells_of_any_fill_value(
    fill: float, dense: Any, absent: Any, largest: bool, skipna: bool
) -> None:
    dense = np.where(absent, fill, dense)
    got = _positions(dense, absent, largest=largest, skipna=skipna)
    want = _numpy_positions(dense, largest, skipna)
    assert type(got) is type(want), (got, want)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("largest", "skipna"), list(ARGS))
def test_positions_of_lines_of_none_stored_between_and_after_others(
    largest: bool, skipna: bool
) -> None:
    dense = np.asarray([[0, 2, 0], [0, 0, 0], [-1, 0, 0], [0, 0, 0], [0, 0, 0]], np.float64)
    got = _positions(dense, dense == 0, largest=largest, skipna=skipna)
    np.testing.assert_array_equal(got, _numpy_positions(dense, largest, skipna))


@pytest.mark.parametrize(("largest", "skipna"), list(ARGS))
def test_booleans_median_and_positions_are_numpys(largest: bool, skipna: bool) -> None:
    dense = np.asarray([[0, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], bool)
    got = _positions(dense, ~dense, largest=largest, skipna=skipna)
    np.testing.assert_array_equal(got, _numpy_positions(dense, largest, skipna))
    _same(
        line_medians(_stored(dense, np.zeros(dense.shape, bool)), skipna=skipna),
        _numpy(dense, None, skipna),
    )
