"""Keys resolve to positions per axis, sorted and in the caller's order, or raise IndexError."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sporadik_dask.read import Selection, normalize_key


def test_a_boolean_mask_selects_its_true_positions_not_positions_zero_and_one() -> None:
    positions, dropped = normalize_key((np.array([True, False, True, False]),), (4, 3))
    np.testing.assert_array_equal(positions[0], [0, 2])
    np.testing.assert_array_equal(positions[1], [0, 1, 2])
    assert dropped == ()


@pytest.mark.parametrize("mask", [[True, False], np.ones(5, dtype=bool)])
def test_a_boolean_mask_of_another_length_than_its_axis_is_refused(mask: Any) -> None:
    with pytest.raises(IndexError, match="mask of length"):
        normalize_key((np.asarray(mask),), (4, 3))


@pytest.mark.parametrize(
    "part",
    [1.0, 1.7, np.float64(2), [0.0, 1.5], np.array([1.0]), "1", ["a"], None, True, np.True_],
)
def test_anything_but_an_integer_position_is_refused_not_truncated(part: Any) -> None:
    with pytest.raises(IndexError):
        normalize_key((part,), (4, 3))


@pytest.mark.parametrize("position", [4, -5, 100, -100])
def test_an_integer_outside_its_axis_is_refused_negative_ones_too(position: int) -> None:
    with pytest.raises(IndexError, match=f"index {position} is out of bounds"):
        normalize_key((position,), (4, 3))
    with pytest.raises(IndexError, match=f"index {position} is out of bounds"):
        normalize_key(([0, position],), (4, 3))


def test_a_two_dimensional_array_or_a_second_ellipsis_is_refused() -> None:
    with pytest.raises(IndexError, match="1-D"):
        normalize_key((np.zeros((2, 2), dtype=int),), (4, 3))
    with pytest.raises(IndexError, match="single ellipsis"):
        normalize_key((..., ...), (4, 3))
    with pytest.raises(IndexError, match="too many indices"):
        normalize_key((0, 0, 0), (4, 3))


def test_an_empty_list_is_an_empty_selection_and_zero_d_integers_are_positions() -> None:
    positions, dropped = normalize_key(([], np.array(2)), (4, 3))
    assert isinstance(positions[0], np.ndarray)
    assert positions[0].dtype == np.int64 and positions[0].size == 0
    np.testing.assert_array_equal(positions[1], [2])
    assert dropped == (1,)
    assert Selection.from_key(([], 0), (4, 3)).empty


@settings(max_examples=100, deadline=None)
@given(
    size=st.integers(1, 9),
    picks=st.lists(st.integers(-9, 8), max_size=12),
)
def test_the_caller_order_is_the_sorted_distinct_positions_through_the_inverse(
    size: int, picks: list[int]
) -> None:
    picks = [p for p in picks if -size <= p < size]
    selection = Selection.from_key((picks,), (size,))
    expected = np.arange(size)[picks] if picks else np.zeros(0, dtype=np.int64)
    np.testing.assert_array_equal(selection.positions[0], expected)
    np.testing.assert_array_equal(selection.unique[0], np.unique(expected))
    np.testing.assert_array_equal(selection.unique[0][selection.inverse[0]], expected)
    assert selection.ordered(0) == (list(expected) == sorted(set(expected)))
    assert selection.narrow(0) == (len(set(expected)) < size)


@settings(max_examples=100, deadline=None)
@given(
    size=st.integers(0, 9),
    start=st.one_of(st.none(), st.integers(-12, 12)),
    stop=st.one_of(st.none(), st.integers(-12, 12)),
    step=st.one_of(st.none(), st.integers(-4, 4).filter(bool)),
)
def test_a_slice_of_any_step_selects_what_numpy_does(
    size: int, start: int | None, stop: int | None, step: int | None
) -> None:
    selection = Selection.from_key(slice(start, stop, step), (size, 2))
    np.testing.assert_array_equal(selection.positions[0], np.arange(size)[start:stop:step])
    assert selection.result_shape == (len(np.arange(size)[start:stop:step]), 2)


def test_a_slice_along_a_long_axis_holds_its_positions_once() -> None:
    """One row of a graph of 10^7 nodes: the slice's positions are known sorted and distinct,
    and each asked position's rank is made only if a read needs it (it had held two arrays the
    axis's length, and a comparison of every neighbour)."""
    import tracemalloc

    size = 10**7
    tracemalloc.start()
    try:
        selection = Selection.from_key((3, slice(None)), (10, size))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1.2 * 8 * size  # the positions themselves, int64
    assert selection.whole(1) and selection.unique[1] is selection.positions[1]
    np.testing.assert_array_equal(selection.inverse[1][:3], [0, 1, 2])
    unsorted = Selection.from_key((slice(None), [5, 2, 5]), (4, 9))
    np.testing.assert_array_equal(unsorted.unique[1], [2, 5])
    np.testing.assert_array_equal(unsorted.inverse[1], [1, 0, 1])
