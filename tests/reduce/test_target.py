"""A selection's positions as a reduction's grouping: held as the selection names them (a
slice's range, a list's sorted positions), each position's group, the members of each group and
totals per group are those of a table with a code per position of the axis."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from hypothesis import given
from hypothesis import strategies as st

from sporadik_dask.read.selection import Axis, normalize_key
from sporadik_dask.reduce.target import Grouping, Picked

EXTENT = 60


@st.composite
def selections(draw: st.DrawFn) -> Axis:
    """Distinct positions of an axis of :data:`EXTENT`, as a key selects them: a slice of any
    step (reversed, empty), an unsorted list, a mask."""
    kind = draw(st.sampled_from(["slice", "list", "mask"]))
    if kind == "slice":
        bounds = st.none() | st.integers(-EXTENT - 5, EXTENT + 5)
        step = draw(st.integers(-7, 7).filter(lambda s: s != 0))
        key: Any = slice(draw(bounds), draw(bounds), step)
    elif kind == "list":
        key = draw(st.lists(st.integers(0, EXTENT - 1), unique=True, max_size=EXTENT))
    else:
        key = np.array(draw(st.lists(st.booleans(), min_size=EXTENT, max_size=EXTENT)))
    (positions,), _ = normalize_key((key,), (EXTENT,))
    return positions


def table_of(picked: Axis, codes: Any) -> npt.NDArray[np.int64]:
    """A code per position of the axis: -1, and each picked position's code."""
    table = np.full(EXTENT, -1, dtype=np.int64)
    table[np.asarray(picked, dtype=np.int64)] = np.arange(len(picked)) if codes is None else codes
    return table


def drawn_codes(picked: Axis, how: str, data: st.DataObject) -> tuple[Any, int]:
    """The picked positions' codes and the number of groups: ``how`` is "each its own" (None,
    a group per position), "one for all" (0) or "a groupby's" (drawn, some -1, of 4 groups)."""
    if how == "one for all":
        return 0, 1
    if how == "a groupby's":
        each = st.lists(st.integers(-1, 3), min_size=len(picked), max_size=len(picked))
        return np.array(data.draw(each), dtype=np.int64), 4
    return None, len(picked)


@given(selections(), st.sampled_from(["each its own", "one for all", "a groupby's"]), st.data())
def test_a_selection_held_as_it_names_its_positions_groups_as_a_table_of_the_axis(
    picked: Axis, how: str, data: st.DataObject
) -> None:
    codes, size = drawn_codes(picked, how, data)
    held = Grouping(0, Picked.of(picked, codes), size)
    table = Grouping(0, table_of(picked, codes), size)
    assert Grouping.picked(0, EXTENT, picked, codes, size).lookup is not None  # a short axis's
    everywhere = np.arange(EXTENT)
    np.testing.assert_array_equal(held.groups(everywhere), table.groups(everywhere))
    np.testing.assert_array_equal(
        Grouping.picked(0, EXTENT, picked, codes, size).codes, table.codes
    )
    np.testing.assert_array_equal(held.members(), table.members())
    some = np.arange(size)[::2]
    np.testing.assert_array_equal(held.members(some), table.members()[some])
    counts = np.random.default_rng(len(picked)).integers(0, 9, EXTENT)
    np.testing.assert_array_equal(held.gathered(counts), table.gathered(counts))
    assert held.lookup is None


def test_positions_of_a_genome_length_axis_are_held_as_the_selection_names_them() -> None:
    """A slice of 2e9 positions of a 3.1e9 axis is its start, step and count; a list, its
    sorted positions: a position's group is found by arithmetic or by a binary search."""
    length = 3_100_000_000
    sliced = Grouping.picked(1, length, range(length - 1, 1_000, -2), None, 1_549_999_500)
    assert isinstance(sliced.codes, Picked) and isinstance(sliced.codes.positions, range)
    np.testing.assert_array_equal(
        sliced.groups(np.array([length - 1, length - 2, length - 3, 1_001, 999, 0])),
        [0, -1, 1, 1_549_999_499, -1, -1],
    )
    listed = Grouping.picked(1, length, np.array([3_000_000_000, 7, 2**31]), None, 3)
    assert isinstance(listed.codes, Picked)
    np.testing.assert_array_equal(listed.codes.positions, [7, 2**31, 3_000_000_000])
    np.testing.assert_array_equal(
        listed.groups(np.array([2**31, 7, 8, 3_000_000_000])), [2, 1, -1, 0]
    )
