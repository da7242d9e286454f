"""The shuffle's tasks on their own: a piece split by partition, a partition sorted into runs,
compared with numpy's lexsort and dense arrays, over random shapes, densities and orders."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sporadik_dask as sd
from sporadik_dask.write import spill, tasks
from sporadik_dask.write.pieces import Piece, piece_of_block
from tests.helpers import random_dense


def _parts(
    rng: np.random.Generator, positions: int, extent: int, n: int, pieces: int
) -> list[tasks.Part]:
    """Unsorted ``(position, index)`` pairs naming distinct cells, cut into ``pieces`` parts."""
    cells = rng.choice(positions * extent, size=n, replace=False)
    pairs = np.stack(np.divmod(cells, extent))
    data = rng.integers(-50, 50, n).astype(np.float64)
    cuts = np.sort(rng.integers(0, n + 1, pieces - 1))
    return [
        tasks.Part(pairs[:, lo:hi], data[lo:hi])
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, n], strict=True)
    ]


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    positions=st.integers(1, 30),
    extent=st.integers(1, 30),
    pieces=st.integers(1, 4),
    fill=st.floats(0, 1),
    dtype=st.sampled_from(["float64", "float32", "float16", "int8", "uint16", "complex64"]),
    spilled=st.booleans(),
)
def test_a_sorted_partition_is_what_lexsort_gives_with_each_position_largest_magnitude(
    tmp_path_factory: pytest.TempPathFactory,
    seed: int,
    positions: int,
    extent: int,
    pieces: int,
    fill: float,
    dtype: str,
    spilled: bool,
) -> None:
    """In memory or spilled (every other part read back from its file), in a dtype numba
    sorts or one it lacks (float16: numpy's route)."""
    rng = np.random.default_rng(seed)
    n = int(fill * positions * extent)
    parts: list[Any] = _parts(rng, positions, extent, n, pieces)
    start = 5
    for k, part in enumerate(parts):
        part.pairs[0] += start
        values = part.data if np.dtype(dtype).kind in "fci" else np.abs(part.data)
        parts[k] = tasks.Part(part.pairs.astype(np.int32), values.astype(dtype))
    pairs = np.concatenate([part.pairs for part in parts], axis=1)
    data = np.concatenate([part.data for part in parts])
    given_parts = list(parts)
    if spilled:
        directory = str(tmp_path_factory.mktemp("parts"))
        for k in range(0, len(parts), 2):
            p = parts[k]
            given_parts[k] = spill.write_parts(
                directory, p.pairs, p.data, [0, p.data.size], [p.base]
            )[0]
    runs = tasks.sort_partition(
        start, start + positions, extent, np.int32, (7, 7 + n), *given_parts
    )
    order = np.lexsort((pairs[1], pairs[0]))
    np.testing.assert_array_equal(runs.indices, pairs[1][order])
    np.testing.assert_array_equal(runs.data, data[order])
    assert runs.indices.dtype == np.int32 and runs.data.dtype == np.dtype(dtype)
    expected = np.zeros(positions, dtype=np.abs(data).dtype)
    np.maximum.at(expected, pairs[0] - start, np.abs(data))
    np.testing.assert_array_equal(runs.maxima, expected)
    counts = np.bincount(pairs[0] - start, minlength=positions)
    np.testing.assert_array_equal(runs.indptr, 7 + np.concatenate(([0], np.cumsum(counts))))
    assert runs.indptr.dtype == np.int32


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_nan_is_its_position_largest_magnitude_as_numpy_maximum_gives(dtype: str) -> None:
    part = tasks.Part(
        np.array([[0, 0, 0, 1, 1], [0, 1, 2, 0, 1]]),
        np.array([1.0, np.nan, 5.0, np.nan, -2.0], dtype=dtype),
    )
    runs = tasks.sort_partition(0, 3, 3, np.int32, (0, 5), part)
    np.testing.assert_array_equal(runs.maxima, np.array([np.nan, np.nan, 0.0], dtype=dtype))


def test_a_value_outside_the_partition_is_refused() -> None:
    part = tasks.Part(np.array([[0, 4], [3, 3]]), np.array([1.0, 2.0]))
    with pytest.raises(sd.LayoutError, match=r"positions 0\.\.1 lies outside them"):
        tasks.sort_partition(0, 2, 5, np.int32, (0, 2), part)


def test_a_partition_holding_other_values_than_the_count_pass_found_is_refused() -> None:
    part = tasks.Part(np.array([[0, 1], [3, 3]]), np.array([1.0, 2.0]))
    with pytest.raises(sd.LayoutError, match="hold 2 values, and the count pass found 3"):
        tasks.sort_partition(0, 2, 5, np.int32, (4, 7), part)


def test_a_cell_named_twice_in_a_partition_is_refused() -> None:
    part = tasks.Part(np.array([[0, 0], [3, 3]]), np.array([1.0, 2.0]))
    with pytest.raises(sd.LayoutError, match="1 cells are named twice"):
        tasks.sort_partition(0, 1, 5, np.int32, (0, 2), part)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    partitions=st.integers(1, 6),
    rank=st.sampled_from([2, 3]),
    axis=st.integers(0, 1),
    dtype=st.sampled_from(["float64", "float16"]),
)
def test_splitting_a_piece_sends_each_value_to_the_partition_of_its_position(
    seed: int, partitions: int, rank: int, axis: int, dtype: str
) -> None:
    """In C order (a CSR layout's positions arrive sorted) or not (CSC's), and in a dtype
    numba lacks; each part keeps its values in the piece's order."""
    rng = np.random.default_rng(seed)
    shape = (13, 4, 5)[:rank]
    dense = random_dense(rng, shape, 0.3).astype(dtype)
    piece = piece_of_block(dense, (0,) * rank)
    others = [a for a in range(rank) if a != axis][::-1]
    index_shape = [shape[a] for a in others]
    extent = shape[axis]
    cuts = np.unique(np.r_[0, rng.integers(1, extent, partitions - 1), extent])
    found = tasks.split_piece(piece, axis, others, index_shape, cuts, np.int32)
    parts = [part for part in found if isinstance(part, tasks.Part)]
    assert len(parts) == len(found) == len(cuts) - 1
    for p, part in enumerate(parts):
        assert part.pairs.dtype == np.int32 and part.data.dtype == np.dtype(dtype)
        assert np.all((cuts[p] <= part.pairs[0]) & (part.pairs[0] < cuts[p + 1]))
        positions, raveled = part.pairs
        where = [None] * rank
        where[axis] = positions
        for a, coordinate in zip(others, np.unravel_index(raveled, index_shape), strict=True):
            where[a] = coordinate
        np.testing.assert_array_equal(dense[tuple(where)], part.data)
        mine = (cuts[p] <= piece.coords[axis]) & (piece.coords[axis] < cuts[p + 1])
        np.testing.assert_array_equal(part.data, piece.data[mine])  # the piece's order
    assert sum(part.data.size for part in parts) == np.count_nonzero(dense)


def test_a_split_casts_the_values_to_the_layouts_dtype_so_its_parts_move_fewer_bytes() -> None:
    piece = Piece(np.array([[0, 3, 4], [1, 0, 2]]), np.array([7.0, 300.0, 2.0], np.float32))
    found = tasks.split_piece(piece, 0, (1,), (3,), np.array([0, 2, 5]), np.int32, None, "u2")
    parts = [part for part in found if isinstance(part, tasks.Part)]
    assert [part.data.dtype for part in parts] == [np.dtype("u2")] * 2
    assert [part.data.tolist() for part in parts] == [[7], [300, 2]]


def test_a_piece_position_outside_the_planned_positions_is_refused() -> None:
    piece = Piece(np.array([[0, 9], [1, 1]]), np.array([1.0, 2.0]))
    with pytest.raises(sd.LayoutError, match=r"outside 0\.\.4"):
        tasks.split_piece(piece, 0, (1,), (3,), np.array([0, 2, 5]), np.int32)


def test_the_maxima_of_a_run_followed_by_empty_positions_cover_the_whole_run() -> None:
    # positions 0..3; position 2 holds [1, 9], position 3 is empty: 9 is its maximum, not 1
    part = tasks.Part(np.array([[0, 2, 2], [0, 0, 1]]), np.array([4.0, 1.0, -9.0]))
    runs = tasks.sort_partition(0, 4, 2, np.int32, (0, 3), part)
    np.testing.assert_array_equal(runs.maxima, [4.0, 0.0, 9.0, 0.0])


def test_a_partition_spanning_a_genome_stretch_makes_arrays_sized_by_its_values() -> None:
    """A partition of 3 M positions holding 50 values sorts them into runs with maxima and
    offsets for its held positions alone; every stretch of ``maxima`` and ``indptr`` written is
    what a count over every position gives."""
    rng = np.random.default_rng(5)
    span, extent, n = 3 * 2**20, 4, 50
    parts = _parts(rng, span, extent, n, 3)
    runs = tasks.sort_partition(0, span, extent, np.int32, (10, 10 + n), *parts)
    positions = np.concatenate([part.pairs[0] for part in parts])
    data = np.concatenate([part.data for part in parts])
    held = np.unique(positions)
    assert runs.maxima.size == held.size and runs.indptr.size == held.size + 1
    maxima = np.zeros(span)
    np.maximum.at(maxima, positions, np.abs(data))
    indptr = 10 + np.concatenate(([0], np.cumsum(np.bincount(positions, minlength=span))))
    for lo, hi in [(0, span), (0, 1), (int(held[3]), int(held[3]) + 1), (span - 5, span + 1)]:
        if hi <= span:
            np.testing.assert_array_equal(tasks.runs_slice(runs, "maxima", lo, hi), maxima[lo:hi])
        np.testing.assert_array_equal(tasks.runs_slice(runs, "indptr", lo, hi), indptr[lo:hi])


@pytest.mark.parametrize("dtype", ["float64", "float16"], ids=["numba", "numpy"])
@pytest.mark.parametrize("spilled", [False, True], ids=["in memory", "spilled"])
def test_parts_past_2_31_positions_hold_int32_offsets_and_sort_as_absolute_ones(
    tmp_path: Any, dtype: str, spilled: bool
) -> None:
    """A genome's position layout: positions past 2**31 held as int64 took 16 bytes a value in
    its parts; as offsets from their partition's first they take 8, and sort to the same runs."""
    rng = np.random.default_rng(3)
    # the second partition short enough to be counted position by position, the others not
    cuts = np.array([0, 2**31 + 10, 2**31 + 10 + 2**19, 5 * 10**9], dtype=np.int64)
    starts = cuts[:-1] + rng.integers(0, 1_000, 3)
    positions = np.concatenate([start + rng.integers(0, 2**18, 40) for start in starts])
    samples = rng.integers(0, 7, positions.size)
    cells = np.unique(positions * 7 + samples)
    piece = Piece(np.stack([cells // 7, cells % 7]), rng.random(cells.size).astype(dtype))
    spill_to = spill.SpillTo(str(tmp_path), None) if spilled else None
    found: list[tasks.Part | spill.SpilledPart] = list(
        tasks.split_piece(piece, 0, (1,), (7,), cuts, np.int32, spill_to, relative=True)
    )
    absolute = [part for part in tasks.split_piece(piece, 0, (1,), (7,), cuts, np.int32)]
    assert [part.base for part in found] == cuts[:-1].tolist()
    for p, (part, whole) in enumerate(zip(found, absolute, strict=True)):
        assert isinstance(whole, tasks.Part) and whole.pairs.dtype == np.int64
        if isinstance(part, tasks.Part):
            assert not spilled and part.pairs.dtype == np.int32
            np.testing.assert_array_equal(part.pairs[0] + cuts[p], whole.pairs[0])
        start, stop = int(cuts[p]), int(cuts[p + 1])
        values = (0, whole.data.size)
        runs = tasks.sort_partition(start, stop, 7, np.int32, values, part)
        expected = tasks.sort_partition(start, stop, 7, np.int32, values, whole)
        for got, want in zip(runs, expected, strict=True):
            np.testing.assert_array_equal(got, want)


def test_a_relative_part_past_what_the_plan_holds_is_refused() -> None:
    """An offset past 2**31 would wrap in int32 and land at another position."""
    piece = Piece(np.array([[2**31 + 5], [0]]), np.array([1.0]))
    with pytest.raises(sd.LayoutError, match="outside"):
        tasks.split_piece(piece, 0, (1,), (3,), np.array([0, 2**33]), np.int32, relative=True)
