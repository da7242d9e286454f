"""Routing is pure: from a description and brackets to the layout touching the fewest chunks."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import sporadik_dask as sd
from sporadik_dask.read import Selection
from sporadik_dask.read.routing import candidates, route, run_chunks
from tests.helpers import random_dense


def _description(tmp_path: Path, chunk: int = 10) -> sd.StoreDescription:
    dense = random_dense(np.random.default_rng(0), (40, 30), 0.5)
    return sd.to_sporadik(dense, tmp_path / "s.zarr", chunk=chunk)


def test_run_chunks_lists_every_chunk_a_nonempty_run_touches_once() -> None:
    lo, hi = np.array([0, 5, 12, 12, 35]), np.array([5, 12, 12, 19, 41])
    np.testing.assert_array_equal(run_chunks(lo, hi, 10), [0, 1, 3, 4])
    assert run_chunks(np.array([3]), np.array([3]), 10).size == 0


def test_fewer_chunks_win_over_fewer_values(tmp_path: Path) -> None:
    description = _description(tmp_path)
    few_values_many_chunks = (np.array([0, 100, 200, 300]), np.array([2, 102, 202, 302]))
    more_values_one_chunk = (np.array([20]), np.array([29]))
    chosen = route(description, {0: few_values_many_chunks, 1: more_values_one_chunk})
    assert chosen.layout.indexed_axis == 1
    assert (chosen.requests, chosen.values) == (2, 9)  # one chunk each of indices and data
    assert chosen.brackets is more_values_one_chunk


def test_a_tie_in_chunks_goes_to_fewer_values_then_to_the_lower_axis(tmp_path: Path) -> None:
    description = _description(tmp_path)
    three, six = (np.array([20]), np.array([23])), (np.array([20]), np.array([26]))
    assert route(description, {0: six, 1: three}).layout.indexed_axis == 1
    assert route(description, {0: three, 1: three}).layout.indexed_axis == 0


def test_only_layouts_whose_axis_the_selection_narrows_are_candidates(tmp_path: Path) -> None:
    description = _description(tmp_path)
    assert candidates(description, Selection.from_key((slice(0, 3),), (40, 30))) == (0,)
    assert candidates(description, Selection.from_key((slice(0, 3), [1]), (40, 30))) == (0, 1)
    assert candidates(description, Selection.from_key((), (40, 30))) == (0,)  # a scan
    reversed_whole = Selection.from_key((slice(None), slice(None, None, -1)), (40, 30))
    assert candidates(description, reversed_whole) == (0,)


def test_a_region_too_long_to_bracket_reads_through_the_layout_bracketing_fewest(
    tmp_path: Path,
) -> None:
    """A region of 2**31 positions of a genome would be bracketed in 32 GiB: the samples' layout,
    bracketing 40 positions, reads it, unless neither layout brackets few enough."""
    description = _description(tmp_path)
    region = Selection.from_key((slice(None), slice(2**31, 2**32)), (40, 5 * 10**9))
    assert candidates(description, region) == (0,)
    window = Selection.from_key((slice(None), slice(2**31, 2**31 + 10**6)), (40, 5 * 10**9))
    assert candidates(description, window) == (1,)
    both = Selection.from_key((slice(0, 2**30), slice(0, 2**30)), (2**31, 2**31))
    assert candidates(description, both) == (0, 1)
