"""Routing is pure: from a description and brackets to the layout touching the fewest chunks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import sporadik_dask as sd
from sporadik_dask.read import Selection, StoreReader
from sporadik_dask.read.assembly import lengths_of
from sporadik_dask.read.routing import (
    Stretch,
    abutting,
    candidates,
    chunks_of,
    held,
    held_by,
    route,
    run_chunks,
)
from tests.helpers import random_dense


def _description(tmp_path: Path, chunk: int = 10) -> sd.StoreDescription:
    dense = random_dense(np.random.default_rng(0), (40, 30), 0.5)
    return sd.to_sporadik(dense, tmp_path / "s.zarr", chunk=chunk)


def test_run_chunks_lists_every_chunk_a_nonempty_run_touches_once() -> None:
    lo, hi = np.array([0, 5, 12, 12, 35]), np.array([5, 12, 12, 19, 41])
    np.testing.assert_array_equal(run_chunks(lo, hi, 10), [0, 1, 3, 4])
    assert run_chunks(np.array([3]), np.array([3]), 10).size == 0


def _chunks_one_run_at_a_time(lo: np.ndarray, hi: np.ndarray, chunk: int) -> list[int]:
    touched = {
        c
        for a, b in zip(lo, hi, strict=True)
        if b > a
        for c in range(a // chunk, (b - 1) // chunk + 1)
    }
    return sorted(touched)


@settings(max_examples=100, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 25), max_size=12),
    first=st.integers(0, 30),
    chunk=st.integers(1, 12),
    gap=st.sampled_from([0, 1, 2]),
)
def test_runs_end_to_end_are_known_as_such_and_touch_the_chunks_each_run_does(
    lengths: list[int], first: int, chunk: int, gap: int
) -> None:
    """A stretch's brackets (one array of offsets seen twice), the same values copied, and views
    of the offsets two apart or with gaps, which need not lie end to end."""
    steps = [gap if k % 2 else 0 for k in range(len(lengths))]  # a gap before every other run
    offsets = first + np.cumsum([0, *(n + s for n, s in zip(lengths, steps, strict=True))])
    starts = offsets[:-1] + np.array(steps, dtype=np.int64)[: offsets.size - 1]
    pairs = [
        (starts, offsets[1:]),
        (starts.copy(), offsets[1:].copy()),
        (offsets[:-2], offsets[2:]),
    ]
    if gap == 0:
        pairs.append((offsets[:-1], offsets[1:]))
    for lo, hi in pairs:
        expected = bool(np.array_equal(lo[1:], hi[:-1]))
        assert abutting(lo, hi) == expected
        assert held(lo, hi) == int((hi - lo).sum())
        assert run_chunks(lo, hi, chunk).tolist() == _chunks_one_run_at_a_time(lo, hi, chunk)


def test_a_stretch_of_int32_offsets_near_2_31_gives_int64_chunks_ends_and_lengths() -> None:
    """Offsets kept as ``indptr`` stores them (int32) up to 2**31 - 1: an int32 chunk id times
    a chunk's length would wrap negative there, as would any product of an offset. Everything a
    stretch gives is what the same offsets as int64 give, in int64 or Python ints."""
    top = 2**31 - 1
    offsets = np.array([top - 70_000, top - 69_990, top - 5, top - 5, top], dtype=np.int32)
    stretch, wide = Stretch(offsets), (offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64))
    assert (stretch.start, stretch.stop) == (top - 70_000, top)
    assert stretch.start * 4 == (top - 70_000) * 4  # an offset times an item size: bytes
    assert held_by(stretch) == held(*wide) == 70_000
    for chunk in (2**15, 10, 1):
        ids = chunks_of(stretch, chunk)
        assert ids.dtype == np.int64
        np.testing.assert_array_equal(ids, run_chunks(*wide, chunk))
        assert int(ids[-1]) * chunk == (top - 1) // chunk * chunk  # no wrap when multiplied
        assert int((ids * chunk)[-1]) == (top - 1) // chunk * chunk
    for got, expected in zip(stretch.brackets, wide, strict=True):
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, expected)
    lengths = lengths_of(stretch)
    assert lengths.dtype == np.int64
    np.testing.assert_array_equal(lengths, [10, 69_985, 0, 5])


def test_a_readers_brackets_and_routes_are_int64_where_indptr_is_int32(tmp_path: Path) -> None:
    """A region's offsets stay as stored inside a read, and never leave it: what the reader's
    public methods give is int64 brackets."""
    description = _description(tmp_path)
    reader = StoreReader(str(tmp_path / "s.zarr"))
    layout = description.layouts[1]
    assert reader._arrays(layout)["indptr"].dtype == np.int32
    (found,) = reader.brackets([(layout, range(3, 20))])
    chosen = reader.route((slice(None), slice(3, 20)))
    assert not isinstance(chosen.runs, Stretch)
    for lo, hi in (found, chosen.brackets, chosen.runs):
        assert lo.dtype == hi.dtype == np.int64
        assert abutting(lo, hi)


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
