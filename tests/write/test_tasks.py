"""The task functions and the sorting kernels, on their own: compared with numpy's lexsort,
scipy's conversions and dense arrays, over random shapes, densities and orders."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import sparse
from hypothesis import given, settings
from hypothesis import strategies as st

import sporadik_dask as sd
from sporadik_dask.kernels.groups import group_runs, sum_runs
from sporadik_dask.kernels.regions import Regions
from sporadik_dask.kernels.runs import columns_of_runs, rows_of_runs
from sporadik_dask.kernels.sort import sort_by_key
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
            given_parts[k] = spill.write_parts(directory, p.pairs, p.data, [0, p.data.size])[0]
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


def test_a_piece_position_outside_the_planned_positions_is_refused() -> None:
    piece = Piece(np.array([[0, 9], [1, 1]]), np.array([1.0, 2.0]))
    with pytest.raises(sd.LayoutError, match=r"outside 0\.\.4"):
        tasks.split_piece(piece, 0, (1,), (3,), np.array([0, 2, 5]), np.int32)


@pytest.mark.parametrize("dtype", ["float32", "int64", "float16"])
def test_the_counting_sort_is_what_a_stable_argsort_gives(dtype: str) -> None:
    rng = np.random.default_rng(6)
    keys = rng.integers(0, 17, 500)
    rows = rng.integers(0, 1000, size=(2, 500))
    data = rng.integers(0, 100, 500).astype(dtype)
    sorted_rows, sorted_data = sort_by_key(keys, np.bincount(keys, minlength=17), rows, data)
    order = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(sorted_rows, rows[:, order])
    np.testing.assert_array_equal(sorted_data, data[order])


def _selected(rng: np.random.Generator, size: int, order: str) -> tuple[np.ndarray, np.ndarray]:
    """Positions of an axis of ``size`` picked once each in ``order``, and the slot table of
    each position (-1: not picked)."""
    picked = np.flatnonzero(rng.random(size) < 0.7)
    if order == "descending":
        picked = picked[::-1]
    elif order == "shuffled":
        picked = rng.permutation(picked)
    slots = np.full(size, -1, dtype=np.int64)
    slots[picked] = np.arange(picked.size)
    return picked, slots


def _coo_of(dense: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A dense matrix's nonzeros in C order, as ``sparse.COO`` keeps them."""
    found = sparse.COO.from_numpy(dense)
    return found.coords, found.data


def _runs_asked(
    rng: np.random.Generator, lengths: np.ndarray, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs asked for in a caller's order, some twice: the positions, starts and lengths."""
    asked = rng.integers(0, size, rng.integers(0, 2 * size + 1))
    return asked, (np.cumsum(lengths) - lengths)[asked], lengths[asked]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    rows=st.integers(1, 30),
    cols=st.integers(1, 30),
    order=st.sampled_from(["ascending", "descending"]),
    stored=st.sampled_from(["int32", "int64"]),
    every=st.booleans(),
)
def test_rows_of_runs_is_what_indexing_the_dense_matrix_gives(
    seed: int, rows: int, cols: int, order: str, stored: str, every: bool
) -> None:
    """Rows asked in any order, or every value in order (then permuted in place)."""
    rng = np.random.default_rng(seed)
    csr = sp.random(rows, cols, density=0.4, format="csr", random_state=rng)
    csr.data[:] = rng.integers(1, 100, csr.nnz)
    dense = csr.toarray()
    if every:
        asked = np.arange(rows)
        starts, lengths = csr.indptr[:-1].astype(np.int64), np.diff(csr.indptr)
        picked = np.arange(cols)[:: 1 if order == "ascending" else -1]
        slots = np.empty(cols, dtype=np.int64)
        slots[picked] = np.arange(cols)
    else:
        asked, starts, lengths = _runs_asked(rng, np.diff(csr.indptr), rows)
        picked, slots = _selected(rng, cols, order)
    got = rows_of_runs(
        starts, lengths, csr.indices.astype(stored), csr.data, slots, reverse=order != "ascending"
    )
    assert got is not None
    coords, data = _coo_of(dense[np.ix_(asked, picked)])
    np.testing.assert_array_equal(got[0], coords)
    np.testing.assert_array_equal(got[1], data)
    if every and csr.nnz:
        assert np.shares_memory(got[1], csr.data)


def test_rows_of_runs_declines_a_run_out_of_order_and_a_dtype_numba_lacks() -> None:
    one = np.array([0]), np.array([2])
    slots = np.arange(3)
    assert rows_of_runs(*one, np.array([2, 1]), np.ones(2), slots, reverse=False) is None
    half = np.ones(2, dtype=np.float16)
    assert rows_of_runs(*one, np.array([1, 2]), half, slots, reverse=False) is None
    values = np.array([1.0, 2.0])
    assert rows_of_runs(*one, np.array([2, 1]), values, slots, reverse=True) is None
    np.testing.assert_array_equal(values, [1.0, 2.0])  # declined before touching them


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    rows=st.integers(1, 30),
    cols=st.integers(1, 30),
    order=st.sampled_from(["ascending", "descending", "shuffled"]),
    unsorted=st.booleans(),
)
def test_columns_of_runs_is_what_indexing_the_dense_matrix_gives(
    seed: int, rows: int, cols: int, order: str, unsorted: bool
) -> None:
    """Whatever the rows' order, and whatever the order within a run (a writer need not sort)."""
    rng = np.random.default_rng(seed)
    csc = sp.random(rows, cols, density=0.4, format="csc", random_state=rng)
    csc.data[:] = rng.integers(1, 100, csc.nnz)
    indices, data = csc.indices.copy(), csc.data.copy()
    if unsorted:
        for lo, hi in itertools.pairwise(csc.indptr):
            indices[lo:hi], data[lo:hi] = indices[lo:hi][::-1].copy(), data[lo:hi][::-1].copy()
    asked, starts, lengths = _runs_asked(rng, np.diff(csc.indptr), cols)
    picked, slots = _selected(rng, rows, order)
    got = columns_of_runs(starts, lengths, indices, data, slots, picked.size)
    assert got is not None
    coords, expected = _coo_of(csc.toarray()[np.ix_(picked, asked)])
    np.testing.assert_array_equal(got[0], coords)
    np.testing.assert_array_equal(got[1], expected)


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


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    shape=st.lists(st.integers(1, 6), min_size=2, max_size=3),
    lead_axes=st.integers(0, 1),
    batches=st.integers(1, 5),
    slack=st.integers(0, 3),
)
def test_cells_laid_into_regions_batch_by_batch_come_out_as_numpy_sorts_them(
    seed: int, shape: list[int], lead_axes: int, batches: int, slack: int
) -> None:
    """Batches of distinct cells, each a stretch of the later axes' C order (as runs arrive)
    sorted by lead, into regions sized with room to spare: compacted, every cell is where a
    sort of the whole puts it, with its value."""
    rng = np.random.default_rng(seed)
    out = tuple(shape)
    leads = int(np.prod(out[:lead_axes]))
    span = int(np.prod(out[lead_axes:]))
    cells = np.sort(rng.choice(leads * span, size=rng.integers(0, leads * span + 1), replace=False))
    data = rng.integers(-9, 9, cells.size).astype(np.float32)
    bound = np.bincount(cells // span, minlength=leads) + rng.integers(0, slack + 1, leads)
    regions = Regions(out, span, np.minimum(bound, span), np.float32)
    # batches cut along the later axes (C order within each lead), each sorted by lead
    cuts = np.sort(rng.integers(0, span + 1, batches - 1))
    within = cells % span
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, span], strict=True):
        taken = (within >= lo) & (within < hi)
        regions.place(cells[taken], data[taken])
    coords, values = regions.result()
    np.testing.assert_array_equal(coords, np.stack(np.unravel_index(cells, out)))
    np.testing.assert_array_equal(values, data)


def test_a_region_given_more_cells_than_its_bound_is_refused() -> None:
    regions = Regions((2, 3), 3, np.array([1, 3]), np.float64)
    regions.place(np.array([0, 3]), np.ones(2))
    with pytest.raises(sd.LayoutError, match="bound of 1"):
        regions.place(np.array([1]), np.ones(1))


def test_cells_placed_by_lead_code_come_out_as_numpy_sorts_them_and_a_full_lead_refuses() -> None:
    """Rank 2, one lead per row: cells given as (lead, offset), each lead's in order, in any
    interleaving of leads."""
    rng = np.random.default_rng(3)
    shape = (5, 9)
    cells = np.sort(rng.choice(45, size=30, replace=False))
    leads, offsets = np.divmod(cells, 9)
    data = np.arange(cells.size, dtype=np.float64)
    bound = np.bincount(leads, minlength=5) + 1
    regions = Regions(shape, 9, bound, np.float64)
    order = np.lexsort((np.arange(cells.size), offsets))  # by offset: leads interleaved
    regions.place_cells(leads[order].astype(np.int32), offsets[order].astype(np.int32), data[order])
    coords, values = regions.result()
    assert coords.dtype == np.int32  # every axis fits
    np.testing.assert_array_equal(coords, np.stack([leads, offsets]))
    np.testing.assert_array_equal(values, data)
    full = Regions(shape, 9, np.array([1, 0, 0, 0, 0]), np.float64)
    with pytest.raises(sd.LayoutError, match="bound of 0"):
        full.place_cells(np.array([0, 1], np.int32), np.array([0, 0], np.int32), np.ones(2))


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
