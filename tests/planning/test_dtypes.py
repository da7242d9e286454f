"""The stored dtype: the narrowest integer dtype holding every value exactly, or a refusal that
names the value a cast would have changed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sporadik_dask.format.errors import LayoutError
from sporadik_dask.planning.dtypes import (
    SMALLEST_INTEGER,
    ValueRange,
    check_dtype_option,
    merge_ranges,
    stored_dtype,
)


def _stored(values: Any, option: Any = SMALLEST_INTEGER) -> np.dtype[Any]:
    data = np.asarray(values)
    return stored_dtype(option, data.dtype, ValueRange.of(data))


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1.0, 2.0, 255.0], "u1"),
        ([1.0, 256.0], "u2"),
        ([0.0, 65536.0], "u4"),
        ([2.0**32], "u8"),
        ([-1.0, 127.0], "i1"),
        ([-129.0, 1.0], "i2"),
        ([-1.0, 2.0**31], "i8"),
        ([], "u1"),
        (np.array([3, 70000], dtype=np.int64), "u4"),
        (np.array([-5, 2**40], dtype=np.int64), "i8"),
        (np.array([2**64 - 1], dtype=np.uint64), "u8"),
        (np.array([True, False]), "u1"),
        (np.array([-0.0, 4.0], dtype=np.float32), "u1"),
    ],
)
def test_whole_numbers_are_stored_in_the_narrowest_integer_dtype_holding_them(
    values: Any, expected: str
) -> None:
    assert _stored(np.asarray(values, dtype=np.asarray(values).dtype)) == np.dtype(expected)


@pytest.mark.parametrize("stray", [0.5, np.nan, np.inf, -np.inf, 1e-30])
def test_a_value_that_is_no_whole_number_is_refused_by_name(stray: float) -> None:
    values = np.ones(3 * (1 << 20), dtype=np.float32)  # past one block of the check
    values[-2] = stray
    with pytest.raises(LayoutError, match="no whole number") as refused:
        _stored(values)
    assert repr(float(np.float32(stray))) in str(refused.value)


def test_values_no_integer_dtype_holds_are_refused() -> None:
    with pytest.raises(LayoutError, match="no integer dtype holds"):
        _stored([1.0, 2.0**70])
    with pytest.raises(LayoutError, match="no integer dtype holds"):
        _stored([-1.0, 2.0**63])


def test_a_named_integer_dtype_must_hold_every_value() -> None:
    assert _stored([0.0, 65535.0], "uint16") == np.dtype("u2")
    with pytest.raises(LayoutError, match=r"holds 0\.\.65535, but the values run from 0\.0"):
        _stored([0.0, 65536.0], "uint16")
    with pytest.raises(LayoutError, match=r"from -1\.0"):
        _stored([-1.0, 3.0], "uint8")
    with pytest.raises(LayoutError, match="no whole number"):
        _stored([1.5], np.int32)


def test_no_option_keeps_the_values_dtype_without_a_range() -> None:
    assert stored_dtype(None, np.dtype("f4"), None) == np.dtype("f4")


@pytest.mark.parametrize("option", ["float16", "smallest", np.float32, "complex64", object])
def test_options_other_than_integers_are_refused_before_anything_is_read(option: Any) -> None:
    with pytest.raises(LayoutError, match="smallest-integer"):
        check_dtype_option(option)


def test_complex_values_are_no_whole_numbers() -> None:
    with pytest.raises(LayoutError, match="no whole number"):
        _stored(np.array([1 + 0j, 2 + 1j]))


@given(
    st.one_of(
        hnp.arrays(
            st.sampled_from([np.float32, np.float64]),
            st.integers(0, 40),
            elements={"min_value": -1e9, "max_value": 1e9},
        ),
        hnp.arrays(st.sampled_from([np.int16, np.uint32, np.int64]), st.integers(0, 40)),
    ),
    st.integers(1, 5),
)
def test_ranges_merged_piece_by_piece_are_the_range_of_every_value(
    values: np.ndarray[Any, Any], pieces: int
) -> None:
    whole = ValueRange.of(values)
    merged = merge_ranges(*(ValueRange.of(part) for part in np.array_split(values, pieces)))
    assert merged[:4] == whole[:4]
    if not whole.integral:  # each stray names a value that is no whole number
        stray = merged.stray
        assert isinstance(stray, float) and stray in values.tolist() and stray != round(stray)
    if whole.integral and whole.size:
        dtype = stored_dtype(SMALLEST_INTEGER, values.dtype, merged)
        assert np.array_equal(values.astype(dtype), values)
        narrower = {"u": "u", "i": "i"}[dtype.kind] + str(dtype.itemsize // 2)
        if dtype.itemsize > 1:  # the next narrower dtype of that kind does not hold them all
            assert not np.array_equal(values.astype(narrower), values)
