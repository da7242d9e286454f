"""Runs summed into positions and groups, compared with numpy's indexing and sums."""

from __future__ import annotations

import numpy as np
import pytest

import sporadik_dask as sd
from sporadik_dask.kernels.groups import group_runs, sum_runs


@pytest.mark.parametrize("trail", [1, 3])
def test_summing_runs_through_a_lookup_is_what_numpy_gives_for_the_looked_up_keys(
    trail: int,
) -> None:
    """Each value's key mapped by the lookup (a position to its group, -1: none) before it is
    added: the runs come in order, each with the cells and sums ``np.unique`` gives over the
    mapped keys."""
    rng = np.random.default_rng(3)
    groups, positions, extent = 4, 9, 5
    lookup = rng.integers(-1, groups * trail, positions).astype(np.int32)
    lengths = rng.integers(0, 12, extent)
    keys = rng.integers(0, positions, int(lengths.sum()))
    values = rng.integers(1, 9, keys.size).astype(np.float64)
    buffers = np.zeros(groups * trail), np.zeros(groups * trail, bool)
    got = sum_runs(
        lengths, keys, values, buffers, lookup=lookup, first=2, extent=extent + 2, trail=trail
    )
    assert got is not None
    runs = np.repeat(np.arange(extent), lengths)
    mapped = lookup[keys]
    inside = mapped >= 0
    cells = ((mapped // trail) * (extent + 2) + runs + 2) * trail + mapped % trail
    ids, at = np.unique(cells[inside], return_inverse=True)
    run_of = ids // trail % (extent + 2)
    order = np.lexsort((ids, run_of))  # by run (each run's cells in any order of leads)
    got_run = got[0] // trail % (extent + 2)
    assert np.all(np.diff(got_run) >= 0)
    mine = np.lexsort((got[0], got_run))
    np.testing.assert_array_equal(got[0][mine], ids[order])
    np.testing.assert_array_equal(got[1][mine], np.bincount(at, values[inside])[order])
    assert not buffers[0].any() and not buffers[1].any()  # left as they came, for the next batch


def test_grouping_runs_refuses_an_index_past_its_axis_and_leaves_its_buffers_clean() -> None:
    codes = np.array([0, 1, -1], np.int32)
    buffers = np.zeros(2), np.zeros(2, bool)
    found = group_runs(
        np.array([2, 1]), np.array([0, 2, 1], np.int32), codes, np.array([1.0, 2.0, 3.0]),
        buffers, first=4, skipna=True, dtype=np.float32,
    )  # fmt: skip
    assert found is not None
    groups, positions, sums = found  # position 4: group 0 (index 2 is in none); 5: group 1
    np.testing.assert_array_equal(groups, [0, 1])
    np.testing.assert_array_equal(positions, [4, 5])
    np.testing.assert_array_equal(sums, np.array([1.0, 3.0], np.float32))
    assert sums.dtype == np.float32
    with pytest.raises(sd.LayoutError, match="stored index 3 lies past its axis of 3"):
        group_runs(
            np.array([2]), np.array([0, 3], np.int32), codes, np.ones(2), buffers,
            first=0, skipna=True, dtype=np.float64,
        )  # fmt: skip
    assert not buffers[0].any() and not buffers[1].any()
