"""The task functions of a write's shuffle: split a piece by partition, sort a partition into its
runs, and write the zarr chunks it fills.

A *part* is one piece's values bound for one partition of one layout; *runs* are one partition
sorted and ready to write. Each is a named tuple, so a task reads ``part.pairs`` rather than an
index into a tuple. Arrays are named by :class:`~sporadik_dask.write.array_refs.ArrayRef` and
opened inside the task, never carried open. Pieces are made in :mod:`~sporadik_dask.write.pieces`,
counted in :mod:`~sporadik_dask.write.counting`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sporadik_dask.format.errors import LayoutError
from sporadik_dask.format.spec import MAXIMA, magnitudes, maxima_dtype
from sporadik_dask.kernels.compiled import LACKS_DTYPE
from sporadik_dask.kernels.sort import (
    check_runs,
    count_positions,
    deal_positions,
    sort_by_key,
    split_by_bounds,
    stable_order,
)
from sporadik_dask.planning.budgets import DENSE_POSITIONS
from sporadik_dask.planning.plan import WritePlan
from sporadik_dask.store.chunks import write_chunks, write_constant
from sporadik_dask.write.array_refs import ArrayRef
from sporadik_dask.write.pieces import Piece, ravel
from sporadik_dask.write.spill import PartReader, SpilledPart, SpillTo, write_parts

__all__ = [
    "Edges",
    "OwnRegion",
    "Part",
    "Runs",
    "SharedRegion",
    "after",
    "edges",
    "runs_constant",
    "runs_slice",
    "sort_partition",
    "split_piece",
    "write_array",
    "write_partition",
    "write_region",
    "write_shared",
    "wrote",
]


class Part(NamedTuple):
    """One piece's values bound for one partition of one layout."""

    #: Each value's position along the indexed axis (row 0), counted from ``base``, and raveled
    #: index (row 1).
    pairs: npt.NDArray[Any]
    data: npt.NDArray[Any]
    #: What row 0 counts from: 0, or the partition's first position when positions past 2**31
    #: are held as int32 offsets from it (:func:`split_piece`).
    base: int = 0


class Runs(NamedTuple):
    """One partition's values sorted by (position, index): the slices of a layout's arrays."""

    indices: npt.NDArray[Any]
    data: npt.NDArray[Any]
    #: Each position's largest absolute value.
    maxima: npt.NDArray[Any]
    #: Where each position's run starts in the layout, and where the partition's last run ends.
    indptr: npt.NDArray[Any]
    #: None when ``maxima`` and ``indptr`` cover every position of the partition; else the
    #: positions (from the partition's first) they are for, one each, and ``indptr`` one more
    #: (see :func:`runs_slice`).
    held: npt.NDArray[np.int64] | None = None


def split_piece(
    piece: Piece,
    axis: int,
    index_order: Sequence[int],
    index_shape: Sequence[int],
    bounds: npt.NDArray[np.int64],
    index_dtype: npt.DTypeLike,
    spill_to: SpillTo | None = None,
    dtype: npt.DTypeLike | None = None,
    relative: bool = False,
) -> list[Part] | list[SpilledPart]:
    """Split one piece's values by the partition their position along ``axis`` falls in.

    Positions and indices are narrowed to the layout's index width here, so every later copy
    moves half the bytes of int64 when the layout is int32; values are cast to the layout's
    ``dtype`` (the count pass checked each holds exactly). With ``spill_to``, the parts go to
    one file in its directory for where the task runs (if it has one), and what is returned
    says where. With ``relative`` (:func:`relative_parts`), positions are held as int32 offsets
    from their partition's first.
    """
    coords, data = piece
    if dtype is not None:
        data = data.astype(dtype, copy=False)
    narrow = int(bounds[-1]) < 2**31 or relative
    width = np.result_type(index_dtype, np.dtype(index_dtype) if narrow else np.dtype(np.int64))
    positions = coords[axis]
    indices = (
        coords[index_order[0]] if len(index_order) == 1 else ravel(coords, index_order, index_shape)
    )
    split = split_by_bounds(positions, indices, data, bounds, width, relative)
    if split is None:  # a dtype numba lacks: the same order from numpy
        which = np.searchsorted(bounds, positions, side="right") - 1
        offsets = positions - bounds[which] if relative else positions
        if relative and offsets.size and int(offsets.max()) >= 2**31:
            raise _outside(int(bounds[0]), int(bounds[-1]))
        pairs = np.empty((2, data.shape[0]), dtype=width)
        pairs[0] = offsets
        pairs[1] = indices
        counts = np.bincount(which, minlength=len(bounds) - 1)
        pairs, data = sort_by_key(which, counts, pairs, data)
    else:
        pairs, data, counts = split
    edges = np.concatenate(([0], np.cumsum(counts))).tolist()
    bases = [int(b) if relative else 0 for b in bounds[:-1]]
    directory = None if spill_to is None else spill_to.here()
    if directory is not None:
        return write_parts(directory, pairs, data, edges, bases)
    return [
        Part(pairs[:, lo:hi], data[lo:hi], base)
        for (lo, hi), base in zip(itertools.pairwise(edges), bases, strict=True)
    ]


def relative_parts(plan: WritePlan) -> bool:
    """Whether a layout's parts hold positions as offsets from their partition's first: past
    2**31 positions, where int64 would take 8 bytes more a value (the parts of a genome's
    position layout 16 bytes a value against 8), when indices fit int32 and every position
    holding values lies within 2**31 of its partition's first (a partition reaching the end of a
    genome spans more, but holds values only near its start)."""
    return (
        int(plan.bounds[-1]) >= 2**31
        and np.dtype(plan.index_dtype).itemsize <= 4
        and plan.reach < 2**31
    )


def sort_partition(
    start: int,
    stop: int,
    extent: int,
    index_dtype: npt.DTypeLike,
    values: tuple[int, int],
    *parts: Part | SpilledPart,
) -> Runs:
    """One partition's runs: its values sorted by (position, index), their maxima and offsets.

    ``values`` is where the plan put the partition's values in the layout, ``(first, last)``;
    the partition's slice of ``indptr`` is made here from its own counts, so the client never
    sends ``indptr`` (4 bytes a position) in the graph.

    1. Refuse a partition holding other than the planned number of values: the count pass read
       another input than this pass, and every later offset would be wrong.
    2. Count the values at each position, part after part, then counting-sort each part's
       values straight into their runs: O(n), and stable, so pieces that arrive in C order
       leave each run already sorted by index. Nothing but the runs is made as large as the
       partition; a spilled part is read into one buffer that every part reuses.
    3. Only if some run is not sorted, sort by the combined key ``position * extent + index``.
    4. Refuse a cell named twice: the counts that fixed ``indptr`` assumed every cell once.
    5. Take each position's largest absolute value and offset.

    A partition spanning more positions than it holds values and than
    :data:`~sporadik_dask.planning.budgets.DENSE_POSITIONS` (a stretch of a genome) counts only
    the positions holding values (:func:`_sort_held`).
    """
    first, last = values
    reader = PartReader(parts)
    if reader.total != last - first:
        raise LayoutError(
            f"Positions {start}..{stop - 1} hold {reader.total} values, and the count pass "
            f"found {last - first}: the input gave other values the second time it was read, "
            "so the offsets written would point into the wrong runs. Make the input "
            "deterministic (seed its generator, or persist it) and write again."
        )
    if stop - start > max(reader.total, DENSE_POSITIONS):
        return _sort_held(start, stop, extent, index_dtype, values, reader, parts)
    counts = np.zeros(stop - start, dtype=np.int64)
    for part in parts:
        if count_positions(counts, reader.positions(part), start - part.base):
            raise _outside(start, stop)
    indices = np.empty(reader.total, dtype=reader.index_dtype)
    data = np.empty(reader.total, dtype=reader.data_dtype)
    offsets = np.cumsum(counts) - counts
    maxima = np.zeros(stop - start, dtype=maxima_dtype(reader.data_dtype))
    try:
        for part in parts:
            pairs, part_data = reader.whole(part)
            deal_positions(offsets, pairs[0], pairs[1], part_data, start - part.base, indices, data)
        unsorted, repeated = check_runs(counts, indices, data, maxima)
        if unsorted:
            indices, data = _sorted_within_runs(counts, extent, indices, data)
            unsorted, repeated = check_runs(counts, indices, data, maxima)
    except LACKS_DTYPE:
        indices, data, repeated = _sorted_by_numpy(reader, parts, start, counts, extent, maxima)
    if repeated:
        raise LayoutError(
            f"{repeated} cells are named twice among positions {start}..{stop - 1}, "
            "though the input said each cell is named once (a sparse.COO built with "
            "has_duplicates=False?). A reader would return one of the values at random. Pass "
            "the input as coordinate columns, which are merged, or fix its construction."
        )
    indptr = np.empty(stop - start + 1, dtype=index_dtype)
    indptr[0] = first
    np.cumsum(counts, out=indptr[1:])
    indptr[1:] += first
    return Runs(indices.astype(index_dtype, copy=False), data, maxima, indptr)


def _outside(start: int, stop: int) -> LayoutError:
    return LayoutError(
        f"A value of positions {start}..{stop - 1} lies outside them: the input gave "
        "other coordinates the second time it was read. Make the input deterministic "
        "(seed its generator, or persist it) and write again."
    )


def _sort_held(
    start: int,
    stop: int,
    extent: int,
    index_dtype: npt.DTypeLike,
    values: tuple[int, int],
    reader: PartReader,
    parts: Sequence[Part | SpilledPart],
) -> Runs:
    """:func:`sort_partition` of a partition spanning many more positions than it holds values.

    1. Join the parts and find the distinct positions holding values (a sort of the positions).
    2. Replace each position by its rank among them, and sort as a partition of those positions
       alone: ``maxima`` and ``indptr`` come out one per held position, not per position.
    3. Return them with the held positions; :func:`runs_slice` makes any stretch of the
       partition's ``maxima`` and ``indptr`` from them, so none is as long as the span.
    """
    pairs, data = reader.joined(parts)
    positions = pairs[0].astype(np.int64) - (start - _base(parts))
    if positions.size and (int(positions.min()) < 0 or int(positions.max()) >= stop - start):
        raise _outside(start, stop)
    ordered = np.sort(positions)
    held = ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))[: ordered.size]]
    pairs[0] = np.searchsorted(held, positions)
    runs = sort_partition(0, held.shape[0], extent, index_dtype, values, Part(pairs, data))
    return runs._replace(held=held)


def _base(parts: Sequence[Part | SpilledPart]) -> int:
    """What every part's positions count from (one rule for all parts of a layout)."""
    bases = {part.base for part in parts}
    if len(bases) > 1:
        raise LayoutError(f"The parts of one partition count positions from {sorted(bases)}.")
    return bases.pop() if bases else 0


def runs_slice(runs: Runs, array: str, lo: int, hi: int) -> npt.NDArray[Any]:
    """Elements ``lo:hi`` of one of a partition's arrays, made from its held positions when
    ``maxima`` and ``indptr`` hold only those: zeros between them for ``maxima``, and for
    ``indptr`` each held position's offset repeated up to the next."""
    found: npt.NDArray[Any] = getattr(runs, array)
    if runs.held is None or array not in (MAXIMA, "indptr"):
        return found[lo:hi]
    held = runs.held
    if array == MAXIMA:
        out = np.zeros(hi - lo, dtype=found.dtype)
        k0, k1 = np.searchsorted(held, (lo, hi), side="left")
        out[held[k0:k1] - lo] = found[k0:k1]
        return out
    if hi <= lo:
        return found[:0]
    # indptr[j] is the offset of the first held position at or after j
    k0, k1 = np.searchsorted(held, (lo, hi - 1), side="left")
    ends = np.append(held[k0:k1] - lo + 1, hi - lo)
    return np.repeat(found[k0 : k1 + 1], np.diff(ends, prepend=0))


def runs_constant(runs: Runs, array: str, lo: int, hi: int) -> Any:
    """The one value elements ``lo:hi`` of a partition's ``maxima`` or ``indptr`` all hold, when
    no position holding values lies among them (a genome's empty stretch); else None."""
    held = runs.held
    if held is None or array not in (MAXIMA, "indptr") or hi <= lo:
        return None
    found: npt.NDArray[Any] = getattr(runs, array)
    last = hi if array == MAXIMA else hi - 1  # indptr[j] is the run of the first held at or past j
    k0, k1 = np.searchsorted(held, (lo, last), side="left")
    if k0 != k1:
        return None
    return found.dtype.type(0) if array == MAXIMA else found[k0]


def _sorted_by_numpy(
    reader: PartReader,
    parts: Sequence[Part | SpilledPart],
    start: int,
    counts: npt.NDArray[np.int64],
    extent: int,
    maxima: npt.NDArray[Any],
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], int]:
    """The partition's runs sorted with numpy, for a dtype numba lacks: its indices and
    values, each run's largest absolute value put in ``maxima``, and how many cells repeat."""
    pairs, data = reader.joined(parts)
    pairs[0] -= start - _base(parts)
    pairs, data = sort_by_key(pairs[0], counts, pairs, data)
    positions, indices = pairs
    same_run = positions[1:] == positions[:-1]
    if np.any(same_run & (indices[1:] < indices[:-1])):
        indices, data = _sorted_within_runs(counts, extent, indices, data)
    repeated = int(np.count_nonzero(same_run & (indices[1:] == indices[:-1])))
    # reduceat over the non-empty runs alone: their starts strictly increase, so each reduces
    # exactly its own run (an empty run's start, clipped, would cut its neighbour short)
    starts = (np.cumsum(counts) - counts)[counts > 0]
    if data.size:
        maxima[counts > 0] = np.maximum.reduceat(magnitudes(np.abs(data)), starts)
    return indices, data, repeated


def _sorted_within_runs(
    counts: npt.NDArray[np.int64], extent: int, indices: npt.NDArray[Any], data: npt.NDArray[Any]
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Each run sorted by index (the runs already in position order): the long way."""
    positions = np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts)
    if counts.shape[0] * extent < 2**62:
        _, order = stable_order(positions * extent + indices, counts.shape[0] * extent)
    else:  # pragma: no cover - a combined key past int64: rank-4 arrays of ~10^19 cells
        order = np.lexsort((indices, positions))
    return indices[order], data[order]


#: A partition's slices that regions shared with its neighbours need, by ``(array, lo, hi)``.
Edges = dict[tuple[str, int, int], npt.NDArray[Any]]

#: A region a partition fills alone: ``(array's ref, start, stop, array, lo, hi)``, elements
#: ``lo:hi`` of the partition's ``array`` written as the array's ``[start, stop)``.
OwnRegion = tuple[ArrayRef, int, int, str, int, int]


def write_partition(
    own: Sequence[OwnRegion],
    edges: Sequence[tuple[str, int, int]],
    start: int,
    stop: int,
    extent: int,
    index_dtype: npt.DTypeLike,
    values: tuple[int, int],
    *parts: Part | SpilledPart,
) -> Edges:
    """Sort one partition (:func:`sort_partition`), write the regions it fills alone, and return
    copies of the slices the regions it shares with its neighbours need.

    Writing in the task that sorts means no partition's runs outlive their sort. Given the runs
    as a task's result, dask's order (threads and distributed alike) ran every sort of a layout
    before any of its writes, since the one chunk of ``maxima`` and of ``indptr`` that spans
    every partition made the sorts one path: a layout's whole values waited in memory, 8 bytes a
    value for float32 with int32 indices, and on a cluster were pickled to the worker writing
    them.
    """
    runs = sort_partition(start, stop, extent, index_dtype, values, *parts)
    kept = {(array, lo, hi): runs_slice(runs, array, lo, hi).copy() for array, lo, hi in edges}
    for ref, first, last, array, lo, hi in own:
        constant = runs_constant(runs, array, lo, hi)
        if constant is None:
            write_region(ref, first, last, runs_slice(runs, array, lo, hi))
        elif constant:  # a region of zeros is the fill value: no object to write
            ref.check_still_laid_out()
            write_constant(ref.open(), first, last, constant)
    return kept


def after(value: Any, done: Any) -> Any:
    """``value``, once ``done`` (another task's result) exists: an order, not a computation."""
    return value


def edges(kept: Edges, wanted: tuple[tuple[str, int, int], ...]) -> tuple[npt.NDArray[Any], ...]:
    """The slices of one partition's arrays, ``(array, lo, hi)`` each, that one group of shared
    regions needs."""
    return tuple(kept[w] for w in wanted)


#: A shared region written as the array's ``[start, stop)``, from the slices ``(take, index)``
#: of the takes its task is given, in order.
SharedRegion = tuple[ArrayRef, int, int, tuple[tuple[int, int], ...]]


def write_shared(regions: Sequence[SharedRegion], *taken: tuple[npt.NDArray[Any], ...]) -> None:
    """Write the regions one set of partitions fills together, from the slices taken of each."""
    for ref, start, stop, sources in regions:
        write_region(ref, start, stop, *(taken[t][i] for t, i in sources))


def wrote(kept: Edges) -> None:
    """That a partition's sort and its own regions' writes returned: one small result, so the
    edges are never gathered by whoever waits for the write."""


def write_region(ref: ArrayRef, start: int, stop: int, *slices: npt.NDArray[Any]) -> None:
    """Write whole zarr chunks ``[start, stop)`` from the slices that fill them, in order."""
    values = slices[0] if len(slices) == 1 else np.concatenate(slices)
    if values.shape[0] != stop - start:
        raise LayoutError(  # pragma: no cover - a planning error, never user input
            f"region {start}:{stop} of {ref.path} got {values.shape[0]} values"
        )
    ref.check_still_laid_out()
    write_chunks(ref.open(), start, values)


def write_array(ref: ArrayRef, start: int, values: npt.NDArray[Any]) -> None:
    """Write ``values`` (known on the client, like ``indptr``) at ``start``."""
    ref.check_still_laid_out()
    write_chunks(ref.open(), start, values)
