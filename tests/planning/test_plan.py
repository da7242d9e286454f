"""The planner, without computing anything: partitions bound memory, regions tile every array."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sporadik_dask.planning.plan import (
    partition_bounds,
    partition_sources,
    plan_layout,
    regions_over,
)


@given(
    counts=st.lists(st.integers(0, 50), min_size=0, max_size=60),
    target=st.integers(1, 200),
)
def test_partitions_cover_every_position_once_and_stay_near_the_target(
    counts: list[int], target: int
) -> None:
    indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    bounds = partition_bounds(indptr, target)
    assert bounds[0] == 0 and bounds[-1] == len(counts)
    assert np.all(np.diff(bounds) > 0)
    sizes = np.diff(indptr[bounds])
    widths = np.diff(bounds)
    # A partition past the target is one position alone; the others stay under twice the
    # target, since a cut lands within one run of each multiple of nnz / partitions.
    assert np.all((sizes <= 2 * target) | (widths == 1))
    for position in np.flatnonzero(np.asarray(counts) > target):
        assert position in bounds and position + 1 in bounds


@given(
    counts=st.lists(st.integers(0, 30), min_size=1, max_size=60),
    cuts=st.lists(st.integers(1, 59), max_size=12),
    target=st.integers(1, 120),
    overlap=st.booleans(),
)
def test_partitions_of_pieces_that_share_no_position_each_gather_from_their_own_pieces(
    counts: list[int], cuts: list[int], target: int, overlap: bool
) -> None:
    # Row blocks: pieces cover runs of positions no other piece holds, so every partition is cut
    # between pieces (or inside a piece bigger than the target) and meets only its own.
    positions = len(counts)
    edges = sorted({0, positions, *(c for c in cuts if c < positions)})
    spans = np.array([[a, b - 1] for a, b in itertools.pairwise(edges)], dtype=np.int64)
    if overlap and len(spans) > 1:
        spans[1, 0] -= 1  # two pieces now share a position: the cuts are the plain rule's
    indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    bounds = partition_bounds(indptr, target, spans)
    assert bounds[0] == 0 and bounds[-1] == positions and np.all(np.diff(bounds) > 0)
    sizes, widths = np.diff(indptr[bounds]), np.diff(bounds)
    if overlap and len(spans) > 1:
        np.testing.assert_array_equal(bounds, partition_bounds(indptr, target))
        return
    assert np.all((sizes <= 2 * target) | (widths == 1))
    sources = partition_sources(bounds, spans, len(spans))
    for p, found in enumerate(sources):
        lo, hi = bounds[p], bounds[p + 1] - 1
        # inside one piece, or made of whole pieces
        assert len(found) == 1 or all(lo <= spans[i, 0] and spans[i, 1] <= hi for i in found)
    grouped = [int(c) for c in bounds[1:-1] if c not in set(spans[:, 0].tolist())]
    for c in grouped:  # a cut inside a piece: only in a piece holding more than the target
        piece = next(i for i in range(len(spans)) if spans[i, 0] < c <= spans[i, 1])
        assert indptr[spans[piece, 1] + 1] - indptr[spans[piece, 0]] > target


def test_row_blocks_of_a_third_of_a_partition_are_each_a_partition_and_small_ones_group() -> None:
    # 4 blocks of 10 rows, 3 values a row: 30 values a block against a target of 100
    indptr = np.arange(0, 121, 3, dtype=np.int64)
    spans = np.array([[r, r + 9] for r in range(0, 40, 10)])
    assert partition_bounds(indptr, 100, spans).tolist() == [0, 10, 20, 30, 40]
    assert partition_bounds(indptr, 100).tolist() == [0, 20, 40]  # the plain rule straddles
    # blocks of 2 rows (6 values) group up to a quarter of the target
    small = np.array([[r, r + 1] for r in range(0, 40, 2)])
    assert partition_bounds(indptr, 100, small).tolist() == [0, 10, 20, 30, 40]


def test_one_position_heavier_than_the_target_stays_whole_in_its_own_partition() -> None:
    counts = [1, 1, 1000, 1, 1]
    indptr = np.concatenate(([0], np.cumsum(counts)))
    bounds = partition_bounds(indptr, 10)
    partitions = list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
    assert (2, 3) in partitions
    assert partitions == [(0, 2), (2, 3), (3, 5)]


@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=20),
    chunk=st.integers(1, 30),
)
def test_regions_tile_the_array_in_whole_chunks_and_each_slice_comes_from_its_partition(
    sizes: list[int], chunk: int
) -> None:
    cuts = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    total = int(cuts[-1])
    regions = regions_over(cuts, chunk)
    covered = 0
    for region in regions:
        assert region.start == covered
        assert region.start % chunk == 0
        assert region.stop % chunk == 0 or region.stop == total
        # Reassemble the region from its sources: element e of partition p is cuts[p] + e.
        assembled = np.concatenate(
            [np.arange(cuts[p] + lo, cuts[p] + hi) for p, lo, hi in region.sources]
        )
        np.testing.assert_array_equal(assembled, np.arange(region.start, region.stop))
        covered = region.stop
    assert covered == total


@settings(max_examples=50)
@given(
    counts=st.lists(st.integers(0, 300), min_size=0, max_size=40),
    chunk=st.one_of(st.none(), st.integers(1, 100)),
    target=st.integers(1, 500),
)
def test_a_plan_holds_the_indptr_the_counts_give_and_chunks_like_the_reference(
    counts: list[int], chunk: int | None, target: int
) -> None:
    plan = plan_layout(
        (len(counts), 7),
        0,
        (1,),
        np.asarray(counts),
        "float64",
        partition_values=target,
        chunk=chunk,
    )
    indptr = plan.held.before(np.arange(len(counts) + 1))
    np.testing.assert_array_equal(indptr, np.concatenate(([0], np.cumsum(counts))))
    assert plan.index_dtype == np.int32
    assert plan.nnz == sum(counts)
    assert plan.regions["maxima"] == regions_over(plan.bounds, plan.chunks["maxima"])
    if chunk is None:
        assert plan.chunks["data"] == (min(16384, sum(counts)) or 16384)
        assert plan.chunks["indices"] == (min(32768, sum(counts)) or 32768)


def test_a_byte_addressable_plan_writes_each_array_as_one_chunk() -> None:
    plan = plan_layout(
        (4, 5),
        1,
        (0,),
        np.array([3, 0, 2, 1, 0]),
        "int64",
        partition_values=2,
        byte_addressable=True,
    )
    assert dict(plan.chunks) == {"data": 6, "indices": 6, "indptr": 6, "maxima": 5}
    assert plan.encoding == "csc_matrix" and plan.declared_shape == (4, 5)


@pytest.mark.parametrize(("columns", "width"), [(2**31 - 1, np.int32), (2**31, np.int64)])
def test_the_index_width_is_int64_once_an_index_would_not_fit_in_int32(
    columns: int, width: type
) -> None:
    plan = plan_layout((2, columns), 0, (1,), np.array([10, 0]), "float32", partition_values=100)
    assert plan.index_dtype == np.dtype(width)


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(0, 20), min_size=1, max_size=80),
    target=st.integers(1, 60),
    shard=st.sampled_from([None, 4, 12]),
)
def test_indptr_is_written_by_its_partitions_in_whole_shards_each_element_once(
    counts: list[int], target: int, shard: int | None
) -> None:
    plan = plan_layout(
        (len(counts), 7),
        0,
        (1,),
        np.asarray(counts),
        "float32",
        partition_values=target,
        chunk=4,
        shard=shard,
    )
    unit, length = plan.unit("indptr"), len(counts) + 1
    regions = plan.regions["indptr"]
    assert [r.start for r in regions] == [0, *[r.stop for r in regions][:-1]]
    assert regions[-1].stop == length
    assert all(r.start % unit == 0 for r in regions)
    owned = np.concatenate(([0], plan.bounds[1:-1], [length]))
    for region in regions:
        filled = 0
        for p, lo, hi in region.sources:
            assert 0 <= lo < hi <= owned[p + 1] - owned[p]
            assert owned[p] + lo == region.start + filled
            filled += hi - lo
        assert filled == region.stop - region.start


@given(
    spans=st.lists(
        st.one_of(st.tuples(st.integers(0, 30), st.integers(0, 30)), st.just((31, -1))),
        min_size=1,
        max_size=12,
    ),
    cuts=st.lists(st.integers(1, 30), max_size=6),
)
def test_a_partition_gathers_from_exactly_the_pieces_whose_span_meets_it(
    spans: list[tuple[int, int]], cuts: list[int]
) -> None:
    # (31, -1) is an empty piece's span over 31 positions.
    spans = [(min(a, b), max(a, b)) if b >= 0 else (a, b) for a, b in spans]
    bounds = np.unique([0, *cuts, 31]).astype(np.int64)
    found = partition_sources(bounds, np.array(spans, dtype=np.int64), len(spans))
    for (lo, hi), pieces in zip(itertools.pairwise(bounds.tolist()), found, strict=True):
        meets = [i for i, (a, b) in enumerate(spans) if b >= 0 and a < hi and b >= lo]
        assert pieces == (meets or list(range(len(spans))))
    assert partition_sources(bounds, None, 3) == [[0, 1, 2]] * (len(bounds) - 1)
