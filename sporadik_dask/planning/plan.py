"""Planning one layout's write, from nonzero counts per position: pure, no dask and no I/O.

The counts fix everything before any value moves: ``indptr`` is their running sum, so every
position's run, every partition's size and every zarr chunk's source are known in advance. The
planner turns them into partitions (ranges of positions holding about a target number of values,
so memory per task is bounded however skewed the data) and regions (runs of whole zarr chunks, each
written once by one task from slices of the partitions that hold its elements).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.format.spec import (
    MAXIMA,
    LayoutGeometry,
    anndata_encoding,
    chunk_for,
    declared_shape,
    index_dtype,
    maxima_dtype,
)

__all__ = [
    "LayoutPlan",
    "PositionCounts",
    "Region",
    "WritePlan",
    "held_bounds",
    "long_shards",
    "partition_bounds",
    "partition_sources",
    "plan_layout",
    "regions_over",
    "shard_sizes",
]

#: Elements of one array a write task makes and writes at once, where one partition fills
#: more: 32 MiB of int32 ``indptr`` over a stretch of a genome's empty positions.
REGION_ELEMENTS = 2**23

#: Chunks of ``indptr`` (or ``maxima``) past which a write shards them, :data:`SHARD_CHUNKS` a
#: shard (:func:`long_shards`): 134 M positions at int32. Unsharded, 11 M values along 3.1e9
#: positions made 94,600 ``indptr`` files and wrote in 33 s, against 6.4 s along 3.1e7.
LONG_CHUNKS = 4096

#: Chunks in one shard of a long axis's ``indptr`` or ``maxima``: 32 MiB of int32, what one
#: write region holds (:data:`REGION_ELEMENTS`); a read of one position still decodes one
#: 128 KiB chunk, after the shard's 4 KiB index.
SHARD_CHUNKS = 256


@dataclass(frozen=True, slots=True, eq=False)
class PositionCounts:
    """Values per position along one axis, as the positions holding values and their counts.

    What the count pass finds and a plan is made from. Held this way, a count costs what the
    data holds, not the axis: a genome's 3.1e9 positions holding 11 M values are 176 MB here,
    where a count per position would be 24.8 GB (and ``indptr`` as much again).
    """

    #: The positions holding values, sorted, each once (int64).
    positions: npt.NDArray[np.int64]
    #: Values at each of :attr:`positions` (int64, each at least 1).
    counts: npt.NDArray[np.int64]
    #: The axis' length.
    length: int

    @classmethod
    def of_dense(cls, counts: npt.ArrayLike) -> PositionCounts:
        """From a count per position (an axis short enough to count densely)."""
        counts = np.asarray(counts, dtype=np.int64)
        held = np.flatnonzero(counts)
        return cls(held, counts[held], int(counts.shape[0]))

    @property
    def nnz(self) -> int:
        """How many values the axis holds."""
        return int(self.counts.sum())

    def reach(self, bounds: npt.NDArray[np.int64]) -> int:
        """The largest distance of a position holding values from the first position of the
        partition of ``bounds`` it falls in (0 with none): what an offset from there needs."""
        if not self.positions.size:
            return 0
        first = bounds[np.searchsorted(bounds, self.positions, side="right") - 1]
        return int(np.max(self.positions - first))

    def before(self, positions: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Values at positions before each of ``positions``: ``indptr`` there."""
        running = np.concatenate(([0], np.cumsum(self.counts)))
        return running[np.searchsorted(self.positions, positions, side="left")]

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        return (type(self).__name__, self.positions, self.counts, self.length)


@dataclass(frozen=True, slots=True)
class Region:
    """Elements ``[start, stop)`` of one array, a run of whole zarr chunks written by one task."""

    start: int
    stop: int
    #: ``(partition, lo, hi)``: the region is the concatenation of ``partition[lo:hi]`` in order.
    sources: tuple[tuple[int, int, int], ...]

    @property
    def shared(self) -> bool:
        """Whether several partitions fill the region, so a write task of its own joins their
        slices; a region one partition fills alone is written by that partition's sort."""
        return len(self.sources) > 1


@dataclass(frozen=True, slots=True, eq=False)
class LayoutPlan(LayoutGeometry):
    """Everything about one layout's write that the counts determine."""

    #: The array's own shape.
    shape: tuple[int, ...]
    #: The axis this layout makes contiguous.
    indexed_axis: int
    #: The other axes, in the order ``indices`` are raveled over them.
    index_order: tuple[int, ...]
    #: Values per position along ``indexed_axis``: ``indptr`` is their running sum.
    held: PositionCounts
    #: dtype of ``indices`` and ``indptr``.
    index_dtype: np.dtype[Any]
    #: dtype of ``data``.
    dtype: np.dtype[Any]
    #: Partition ``p`` holds positions ``bounds[p]:bounds[p + 1]``.
    bounds: npt.NDArray[np.int64]
    #: Elements per zarr chunk of each array.
    chunks: Mapping[str, int]
    #: The writes of ``data``, ``indices``, ``maxima`` and ``indptr``, each tiling its array.
    regions: Mapping[str, tuple[Region, ...]]
    #: Elements per shard object of each sharded array (a multiple of its chunk); an array
    #: missing here, or all of them when None, is unsharded.
    shards: Mapping[str, int] | None = None
    #: The first and last position each piece of the input holds, shape ``(pieces, 2)``, or
    #: None: every piece may hold values for every partition.
    spans: npt.NDArray[np.int64] | None = None

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        """What decides every task of the layout's write; the regions follow from these."""
        chunks = tuple(sorted(self.chunks.items()))
        shards = tuple(sorted(self.shards.items())) if self.shards else None
        geometry = (self.shape, self.indexed_axis, self.index_order, self.dtype.str)
        planned = (self.held, self.index_dtype.str, self.bounds, chunks, shards, self.spans)
        return (type(self).__name__, *geometry, *planned)

    def unit(self, name: str) -> int:
        """Elements of ``name`` a write task writes whole: a shard object, else a chunk."""
        return (self.shards or {}).get(name, self.chunks[name])

    def for_write(self) -> WritePlan:
        """What the write's tasks need: the plan without the counts."""
        return WritePlan(
            shape=self.shape,
            indexed_axis=self.indexed_axis,
            index_order=self.index_order,
            index_dtype=self.index_dtype,
            dtype=self.dtype,
            bounds=self.bounds,
            starts=self.held.before(self.bounds).astype(np.int64),
            regions=self.regions,
            spans=self.spans,
            reach=self.held.reach(self.bounds),
        )

    @property
    def nnz(self) -> int:
        """How many values the layout holds."""
        return self.held.nnz

    @property
    def partitions(self) -> int:
        """How many partitions the values are shuffled into."""
        return len(self.bounds) - 1

    @property
    def encoding(self) -> str:
        """The ``encoding-type`` the layout's group declares."""
        return anndata_encoding(len(self.shape), self.indexed_axis)

    @property
    def declared_shape(self) -> tuple[int, ...]:
        """The shape the layout's group declares."""
        return declared_shape(self.shape, self.indexed_axis, self.index_order)

    def dtypes(self) -> dict[str, np.dtype[Any]]:
        """dtype of every array the layout writes."""
        return _dtypes(self.dtype, self.index_dtype)

    def lengths(self) -> dict[str, int]:
        """Length of every array the layout writes."""
        return _lengths(self.positions, self.nnz)


@dataclass(frozen=True, slots=True, eq=False)
class WritePlan(LayoutGeometry):
    """The part of a :class:`LayoutPlan` a write's graph carries: partitions and regions.

    It grows with partitions and zarr chunks, not positions: ``indptr`` of 2.4 M cells is 9 MiB,
    and each sort task makes its own slice of it from ``starts`` and its values.
    """

    shape: tuple[int, ...]
    indexed_axis: int
    index_order: tuple[int, ...]
    #: dtype of ``indices`` and ``indptr``.
    index_dtype: np.dtype[Any]
    #: dtype of ``data``: each piece's values are cast to it when split.
    dtype: np.dtype[Any]
    #: Partition ``p`` holds positions ``bounds[p]:bounds[p + 1]``.
    bounds: npt.NDArray[np.int64]
    #: ``indptr`` at every bound: partition ``p`` holds values ``starts[p]:starts[p + 1]``.
    starts: npt.NDArray[np.int64]
    #: The writes of ``data``, ``indices``, ``maxima`` and ``indptr`` (none for an empty axis).
    regions: Mapping[str, tuple[Region, ...]]
    #: As :attr:`LayoutPlan.spans`.
    spans: npt.NDArray[np.int64] | None = None
    #: How far past its partition's first position the last position holding values lies, at
    #: most (:meth:`PositionCounts.reach`).
    reach: int = 0

    @property
    def partitions(self) -> int:
        """How many partitions the values are shuffled into."""
        return len(self.bounds) - 1

    def sources(self, pieces: int) -> list[list[int]]:
        """The pieces each partition gathers parts from: see :func:`partition_sources`."""
        return partition_sources(self.bounds, self.spans, pieces)


def partition_sources(
    bounds: npt.NDArray[np.int64], spans: npt.NDArray[np.int64] | None, pieces: int
) -> list[list[int]]:
    """The pieces whose span of positions meets each partition, in piece order.

    A piece of rows holds values for the one or two row partitions it meets, so a CSR layout
    of row blocks waits for those pieces alone, not for all of them (and the shuffle's memory
    is that of the partitions in flight). Without spans, or for a partition no piece meets
    (it holds no value), every piece.
    """
    everyone = list(range(pieces))
    if spans is None:
        return [everyone] * (len(bounds) - 1)
    first, last = spans[:, 0], spans[:, 1]
    found = []
    for lo, hi in itertools.pairwise(bounds.tolist()):
        meets = np.flatnonzero((first < hi) & (last >= lo)).tolist()
        found.append(meets or everyone)
    return found


def _dtypes(dtype: np.dtype[Any], width: np.dtype[Any]) -> dict[str, np.dtype[Any]]:
    return {"data": dtype, "indices": width, "indptr": width, MAXIMA: maxima_dtype(dtype)}


def _lengths(positions: int, nnz: int) -> dict[str, int]:
    return {"data": nnz, "indices": nnz, "indptr": positions + 1, MAXIMA: positions}


def partition_bounds(
    indptr: npt.NDArray[Any], target: int, spans: npt.NDArray[np.int64] | None = None
) -> npt.NDArray[np.int64]:
    """Cut the positions into ranges holding about ``target`` values each.

    Given the input pieces' ``spans`` along the axis, when no two pieces share a position (the
    rows of row blocks), the cuts fall between pieces (:func:`_cuts_between_pieces`): each
    partition then gathers from its own pieces alone and is sorted as soon as they are split,
    rather than waiting for a neighbouring piece that dask may split much later. Otherwise:

    1. Take as many partitions as ``nnz / target`` rounded up (one if there are no values).
    2. Cut at the first position whose offset reaches each multiple of ``nnz / partitions``.
    3. Cut on both sides of every position heavier than the target: it stays whole, in a
       partition of its own, so no partition holds more than the target beside it.
    4. Drop repeated cuts.

    Every partition holds at least one position; an empty axis has no partition.
    """
    positions = len(indptr) - 1
    if positions == 0:
        return np.zeros(1, dtype=np.int64)
    starts = None if spans is None else _disjoint_starts(spans)
    if starts is not None:
        return _cuts_between_pieces(indptr, target, starts)
    nnz = int(indptr[-1])
    target = max(int(target), 1)
    count = max(math.ceil(nnz / target), 1)
    wanted = np.arange(1, count) * (nnz / count)
    heavy = np.flatnonzero(np.diff(indptr) > target)
    cuts = np.concatenate((np.searchsorted(indptr, wanted, side="left"), heavy, heavy + 1))
    cuts = cuts[(cuts > 0) & (cuts < positions)]
    return np.unique(np.concatenate(([0], cuts, [positions]))).astype(np.int64)


def held_bounds(
    held: PositionCounts, target: int, spans: npt.NDArray[np.int64] | None = None
) -> npt.NDArray[np.int64]:
    """Cut an axis into partitions of about ``target`` values, from the positions holding values.

    1. Run :func:`partition_bounds` over the held positions alone, as if no other existed (the
       pieces' ``spans`` given as held positions too).
    2. Put each cut at the held position it falls on: a stretch of empty positions goes with
       the values after it, and the first partition starts at 0, the last ends at the length.

    On an axis where every position holds values this is :func:`partition_bounds` itself; on a
    genome's it costs the held positions, never an array as long as the axis.
    """
    if held.length == 0:
        return np.zeros(1, dtype=np.int64)
    count = held.positions.shape[0]
    if count == 0:
        return np.array([0, held.length], dtype=np.int64)
    running = np.concatenate(([0], np.cumsum(held.counts)))
    if spans is not None:
        spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        first = np.searchsorted(held.positions, spans[:, 0], side="left")
        last = np.where(spans[:, 1] >= 0, np.searchsorted(held.positions, spans[:, 1]), -1)
        spans = np.stack([first, last], axis=1)
    cuts = partition_bounds(running, target, spans)
    inner = held.positions[np.clip(cuts, 0, count - 1)]
    return np.where(cuts == 0, 0, np.where(cuts == count, held.length, inner)).astype(np.int64)


def _disjoint_starts(spans: npt.NDArray[np.int64]) -> npt.NDArray[np.int64] | None:
    """Each piece's first position, in order, when no two pieces' spans meet; else None."""
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    held = spans[spans[:, 1] >= spans[:, 0]]  # an empty piece spans (length, -1)
    if len(held) < 2:
        return None
    held = held[np.argsort(held[:, 0], kind="stable")]
    if np.any(held[1:, 0] <= held[:-1, 1]):
        return None
    return held[:, 0]


def _cuts_between_pieces(
    indptr: npt.NDArray[Any], target: int, starts: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """Cuts at piece starts only: a piece of at least a quarter of ``target`` values is a
    partition of its own (two whole pieces to a partition would wait for each other, split in
    whatever order dask takes them), smaller ones are grouped up to that quarter, and a piece
    holding more than ``target`` is cut inside by :func:`partition_bounds`' own rule."""
    positions = len(indptr) - 1
    inner = starts[(starts > 0) & (starts < positions)]
    edges = [0, *np.unique(inner).tolist(), positions]
    target = max(int(target), 1)
    cuts = [0]
    for a, b in itertools.pairwise(edges):
        if int(indptr[b] - indptr[a]) > target:  # a piece bigger than a partition
            inside = partition_bounds(indptr[a : b + 1] - indptr[a], target) + a
            cuts.extend(inside.tolist())
        elif a > cuts[-1] and (
            int(indptr[a] - indptr[cuts[-1]]) >= target // 4
            or int(indptr[b] - indptr[cuts[-1]]) > target
        ):
            cuts.append(a)
    cuts.append(positions)
    return np.unique(np.asarray(cuts, dtype=np.int64))


def regions_over(
    cuts: npt.NDArray[Any], chunk: int, most: int = REGION_ELEMENTS
) -> tuple[Region, ...]:
    """Regions tiling an array whose elements partitions fill: ``cuts[p]:cuts[p + 1]`` is ``p``'s.

    1. Inside each partition, the whole zarr chunks it alone fills are regions from it alone,
       each at most ``most`` elements (rounded down to whole chunks, at least one), so a
       partition spanning a genome's empty positions makes and writes their ``indptr`` and
       ``maxima`` a stretch at a time.
    2. Every chunk that a partition edge cuts through is a region of its own, assembled from each
       partition that overlaps it.

    So every chunk is written exactly once, and a task reads from one partition except at edges.
    """
    total = int(cuts[-1])
    edges: set[int] = set()
    found: list[tuple[int, int]] = []
    for p in range(len(cuts) - 1):
        start, stop = int(cuts[p]), int(cuts[p + 1])
        if start == stop:
            continue
        inner_start = -(-start // chunk) * chunk
        inner_stop = stop if stop == total else (stop // chunk) * chunk
        step = max(most // chunk, 1) * chunk
        found.extend((a, min(a + step, inner_stop)) for a in range(inner_start, inner_stop, step))
        if start % chunk:
            edges.add((start // chunk) * chunk)
    found.extend((edge, min(edge + chunk, total)) for edge in edges)
    return tuple(Region(s, t, _sources(cuts, s, t)) for s, t in sorted(found))


def _sources(cuts: npt.NDArray[Any], start: int, stop: int) -> tuple[tuple[int, int, int], ...]:
    first = int(np.searchsorted(cuts, start, side="right")) - 1
    sources = []
    for p in range(first, len(cuts) - 1):
        lo, hi = int(cuts[p]), int(cuts[p + 1])
        if lo >= stop:
            break
        if hi > start and hi > lo:
            sources.append((p, max(start, lo) - lo, min(stop, hi) - lo))
    return tuple(sources)


def plan_layout(
    shape: Sequence[int],
    indexed_axis: int,
    index_order: Sequence[int],
    counts: PositionCounts | npt.ArrayLike,
    dtype: npt.DTypeLike,
    *,
    partition_values: int,
    chunk: int | None = None,
    byte_addressable: bool = False,
    shard: int | None = None,
    spans: npt.NDArray[np.int64] | None = None,
) -> LayoutPlan:
    """Plan the layout making ``indexed_axis`` contiguous, given values per position (held
    positions and their counts, or a count per position).

    ``partition_values`` is how many values a partition should hold (the memory bound of a sort
    task); ``chunk`` overrides the elements per zarr chunk; ``byte_addressable`` writes each array
    as one chunk; ``shard`` puts that many elements in one object (:func:`shard_sizes`), and then
    every write task writes whole shards; ``spans`` is each input piece's first and last
    position along ``indexed_axis``, which the count pass found.
    """
    shape = tuple(int(size) for size in shape)
    order = tuple(int(axis) for axis in index_order)
    held = counts if isinstance(counts, PositionCounts) else PositionCounts.of_dense(counts)
    nnz = held.nnz
    extent = math.prod(shape[axis] for axis in order)
    width = index_dtype(extent, nnz)
    bounds = held_bounds(held, partition_values, spans)
    lengths, dtypes = _lengths(held.length, nnz), _dtypes(np.dtype(dtype), width)
    chunks = {
        name: max(length if byte_addressable else chunk or chunk_for(dtypes[name], length), 1)
        for name, length in lengths.items()
    }
    shards = shard_sizes(shard, chunks, lengths, chunk_given=chunk is not None)
    if shards is None and not byte_addressable:
        shards = long_shards(chunks, lengths)
    units = {**chunks, **(shards or {})}
    element_cuts = held.before(bounds).astype(np.int64)
    return LayoutPlan(
        shape=shape,
        indexed_axis=int(indexed_axis),
        index_order=order,
        held=held,
        index_dtype=np.dtype(width),
        dtype=np.dtype(dtype),
        bounds=bounds,
        chunks=chunks,
        regions={
            "data": regions_over(element_cuts, units["data"]),
            "indices": regions_over(element_cuts, units["indices"]),
            MAXIMA: regions_over(bounds, units[MAXIMA]),
            "indptr": regions_over(_indptr_cuts(bounds), units["indptr"]),
        },
        shards=shards,
        spans=None if spans is None else np.asarray(spans, dtype=np.int64).reshape(-1, 2),
    )


def _indptr_cuts(bounds: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Which elements of ``indptr`` each partition makes: its positions' offsets, and the last
    partition the closing offset too (an empty axis has no partition, and ``indptr`` is [0])."""
    cuts = bounds.copy()
    cuts[-1] += 1
    return cuts


def long_shards(chunks: Mapping[str, int], lengths: Mapping[str, int]) -> dict[str, int] | None:
    """Shards of ``indptr`` and ``maxima`` when either is longer than
    :data:`LONG_CHUNKS` chunks, ``SHARD_CHUNKS`` chunks each;
    None when neither is.

    Their length is the axis's, not the values': a genome's 3.1e9 positions are 94,600 chunk
    objects of ``indptr`` for however few values, and making that many files cost a write more
    than sorting 11 M values. Sharded, they are 370 objects, each inner chunk still read alone.
    """
    shards = {
        name: min(chunks[name] * SHARD_CHUNKS, -(-lengths[name] // chunks[name]) * chunks[name])
        for name in ("indptr", MAXIMA)
        if lengths[name] > chunks[name] * LONG_CHUNKS
    }
    return shards or None


def shard_sizes(
    shard: int | None,
    chunks: Mapping[str, int],
    lengths: Mapping[str, int],
    *,
    chunk_given: bool,
) -> dict[str, int] | None:
    """Elements per shard object of each array: ``shard`` rounded up to a multiple of the array's
    chunk (chunks differ by dtype unless ``chunk`` was given), and never past the array's length
    rounded up to a chunk. None when unsharded.

    A ``shard`` that is not a multiple of an explicit ``chunk`` is refused: zarr's sharding needs
    whole inner chunks per shard, and silently writing other shard sizes than asked would leave
    a user's object counts unexplained.
    """
    from sporadik_dask.format.errors import LayoutError

    if shard is None:
        return None
    shard = int(shard)
    if shard < 1 or (chunk_given and shard % next(iter(chunks.values()))):
        raise LayoutError(
            f"shard={shard} must be a positive multiple of chunk={next(iter(chunks.values()))}: "
            "a shard object holds whole chunks. Pick a multiple (e.g. 512 chunks, 64 MiB of "
            "4-byte values)."
        )
    sizes = {}
    for name, chunk in chunks.items():
        whole = -(-max(lengths[name], 1) // chunk) * chunk
        sizes[name] = min(-(-shard // chunk) * chunk, whole)
    return sizes
