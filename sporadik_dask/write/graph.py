"""The write's two passes as dask graphs: the count pass and the write (the pieces they read
are :mod:`~sporadik_dask.write.piece_graphs`'s; a reduction's graphs are
:mod:`sporadik_dask.reduce.graph`'s).

Each public builder validates nothing, names its layer by a token of everything its tasks depend
on, and hands that name to a private, pure planner that returns the layer as a plain dict, so
tests can read the keys without computing anything. A write is named by its pieces, its plans and
its target arrays (store, path and ``zarr.json``), so two writes that differ in any of them never
share a key in one ``dask.compute``. Each layout is sorted by
:func:`~sporadik_dask.write.shuffle.shuffle`, in a :class:`~sporadik_dask.write.shuffle.Deferred`
layer whose tasks the scheduler makes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from dask.base import tokenize
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph

from sporadik_dask.format.spec import MAXIMA
from sporadik_dask.planning.plan import LayoutPlan, Region, WritePlan
from sporadik_dask.reduce.graph import Call, Key, Layer, fan_in
from sporadik_dask.write import array_refs, counting, tasks
from sporadik_dask.write.piece_graphs import Pieces
from sporadik_dask.write.shuffle import Deferred, extend, named, shuffle
from sporadik_dask.write.spill import SpillTo, directory_for, shared_directory_for

__all__ = [
    "count_graph",
    "write_graph",
]

#: How many count arrays one task adds together in the count pass.
COUNT_FAN_IN = 8
#: The arrays written from a partition's :class:`~sporadik_dask.write.tasks.Runs`, by field name.
RUN_ARRAYS = ("indices", "data", MAXIMA, "indptr")


def count_graph(
    pieces: Pieces,
    shape: Sequence[int],
    axes: Sequence[int],
    ranged: bool = False,
    keep_to: SpillTo | None = None,
) -> Delayed:
    """A delayed :class:`~sporadik_dask.write.counting.Tally`: the pass fixing every ``indptr``,
    with ``ranged`` the range of every value (which picks the dtype a write stores), and with
    ``keep_to`` each piece kept there for the write (:mod:`~sporadik_dask.write.kept`)."""
    extents = tuple((int(axis), int(shape[axis])) for axis in axes)
    token = tokenize(pieces.keys, pieces.repeats, extents, ranged, keep_to)
    name = f"sporadik-count-{token}"
    layer = _count_layer(name, pieces.keys, pieces.repeats, extents, ranged, keep_to)
    return Delayed(name, extend(pieces.graph, name, layer))


def _count_layer(
    name: str,
    pieces: Sequence[Key],
    repeats: Sequence[Key],
    extents: tuple[tuple[int, int], ...],
    ranged: bool = False,
    keep_to: SpillTo | None = None,
) -> Layer:
    """Pure: the count pass, whose result is the key ``name``.

    1. Count values per position along each axis, in each piece; with ``keep_to``, write the
       piece there, so the write reads the input no more.
    2. Add the counts together in a tree, :data:`COUNT_FAN_IN` at a time, so no task holds more
       than a few count arrays whatever the number of pieces.
    3. Add up the repeats that merging coordinate columns found.

    Each piece's span of positions along each axis, and where it was kept, come back with the
    counts, in piece order.
    """
    layer: Layer = {}
    level = []
    for i, piece in enumerate(pieces):
        layer[(name, 0, i)] = (counting.count_piece, piece, extents, ranged, keep_to)
        level.append((name, 0, i))
    root = fan_in(layer, name, level, counting.add_counts, width=COUNT_FAN_IN)
    layer[name] = (counting.tally, root, (sum, list(repeats)))
    return layer


def write_graph(
    pieces: Pieces,
    plans: Mapping[int, LayoutPlan],
    arrays: Mapping[int, Mapping[str, array_refs.ArrayRef]],
    spilled: Mapping[int, int] | None = None,
    shared: Any = None,
    first: tuple[str, Callable[[Any], Any], Any] | None = None,
) -> tuple[HighLevelGraph, list[Key], SpillTo | None]:
    """The graph writing every zarr chunk of every planned layout, the keys of its writes, and
    where the ``spilled`` layouts' parts go (or None).

    ``spilled`` maps a layout's axis to its first piece whose parts go to disk; the pieces
    before it keep theirs in memory. On a distributed worker they go inside the directory of
    the zarr group ``shared`` (the store being written, as a ``StorePath``), when it has one
    (:func:`~sporadik_dask.write.spill.shared_directory_for`); else a worker keeps them.

    With ``first``, ``(key, function, argument)``, the task ``function(argument)`` (a skeleton
    of :mod:`~sporadik_dask.write.skeleton`) runs before anything is written or spilled.

    Named by the pieces, every plan (partitions, chunking, index order, width) and every target
    array (store, path, ``zarr.json``), so two pending writes share no key unless they would
    write the same bytes to the same arrays. The layer is :class:`Deferred`: its tasks are made
    where it is read, from the pieces' keys, the :class:`~sporadik_dask.planning.plan.WritePlan` s
    and the arrays. The spill directories are this write's own (:mod:`sporadik_dask.write.spill`),
    so removing them never touches another pending write's parts.
    """
    targets = {axis: dict(sorted(refs.items())) for axis, refs in sorted(arrays.items())}
    spilled = dict(sorted((spilled or {}).items()))
    before = None if first is None else first[0]
    token = tokenize(pieces.keys, dict(sorted(plans.items())), targets, spilled, before)
    name = f"sporadik-write-{token}"
    own = f"{token}-{uuid.uuid4().hex[:8]}"
    where = (
        SpillTo(directory_for(own), None if shared is None else shared_directory_for(shared, own))
        if spilled
        else None
    )
    layouts = {
        axis: (
            f"{name}-{axis}",
            plan.for_write(),
            arrays[axis],
            (where, spilled[axis]) if where is not None and axis in spilled else None,
        )
        for axis, plan in plans.items()
    }
    writes = [key for found in layouts.values() for _, key in _write_keys(found[0], found[1])]
    layer = Deferred(_write_layers, tuple(pieces.keys), layouts, before)
    graph = pieces.graph
    if first is not None:
        key, function, argument = first
        graph = extend(graph, key, {key: (function, argument)})
    return extend(graph, name, layer), writes, where


def _write_layers(
    pieces: Sequence[Key],
    layouts: Mapping[
        int, tuple[str, WritePlan, Mapping[str, array_refs.ArrayRef], tuple[SpillTo, int] | None]
    ],
    before: Key | None = None,
) -> Layer:
    """Pure: every layout's :func:`_write_layer`, in one layer, each piece split for one layout
    after another, writing nothing before the task ``before`` has run.

    The layout whose partitions gather from the fewest pieces (the CSR layout of row blocks)
    splits each piece first, and each next layout's split of that piece waits for it. Split
    independently, dask's order (threads and distributed alike) made every piece and split the
    CSC layout's parts first and kept each piece in memory for the CSR split until the CSC
    layout was written: every input block waited, where chained, each block is split for both
    layouts and released, and each CSR partition is sorted and written as soon as its pieces
    are split.
    """
    layer: Layer = {}
    chained = sorted(
        layouts.values(), key=lambda found: sum(map(len, found[1].sources(len(pieces))))
    )
    after = None
    for name, plan, arrays, spill_to in chained:
        layer.update(_write_layer(name, pieces, plan, arrays, spill_to, after, before))
        after = named(named(name, "sort"), "split")
    return layer


def _write_keys(name: str, plan: WritePlan) -> Iterator[tuple[str, Key]]:
    """The key of every write task of one layout, and what it writes (``"runs"`` for a
    partition's, which writes every region that partition fills alone; ``"shared"`` for the
    regions one set of partitions fills together)."""
    for p in range(plan.partitions):
        yield "runs", (named(name, "wrote"), p)
    for g in range(len(_shared_groups(plan))):
        yield "shared", (named(name, "shared"), g)
    if not plan.partitions:
        yield "indptr", (named(name, "shared-indptr"), 0)


def _shared_groups(plan: WritePlan) -> dict[tuple[int, ...], list[tuple[str, Region]]]:
    """Pure: the regions several partitions fill, of every array, grouped by those partitions.

    One task writes a group, from one slice-taking task per partition: at a partition edge the
    four arrays' chunks it cuts are one write, not four, and their eight slices two takes, not
    eight; each task still holds only its regions' slices, never a partition's runs.
    """
    groups: dict[tuple[int, ...], list[tuple[str, Region]]] = {}
    for array in RUN_ARRAYS:
        for region in plan.regions[array]:
            if region.shared:
                filling = tuple(sorted({p for p, _, _ in region.sources}))
                groups.setdefault(filling, []).append((array, region))
    return groups


def _write_layer(
    name: str,
    pieces: Sequence[Key],
    plan: WritePlan,
    arrays: Mapping[str, array_refs.ArrayRef],
    spill_to: tuple[SpillTo, int] | None = None,
    after: str | None = None,
    before: Key | None = None,
) -> Layer:
    """Pure: one layout's shuffle and chunk writes, at the keys :func:`_write_keys` gives.

    With ``after``, another layout's split name, each piece is split here only once that
    layout's split of it has run (:func:`_write_layers` says why); with ``before``, a task's
    key, nothing that writes (a partition's task, a split whose parts may spill inside the
    store) runs before that task, while pieces are read and split in memory meanwhile.

    1. Shuffle the pieces into the plan's partitions; a partition gathers from the pieces whose
       span meets it (:meth:`WritePlan.sources`). With ``spill_to``, ``(where, first)``, the
       parts of piece ``first`` and after go to files where
       :class:`~sporadik_dask.write.spill.SpillTo` says.
    2. Each partition's task sorts it into :class:`~sporadik_dask.write.tasks.Runs` (which also hold
       its slice of ``indptr``), writes every region of ``indices``, ``data``, ``maxima`` and
       ``indptr`` it fills alone, and returns the slices the regions it shares need
       (:func:`~sporadik_dask.write.tasks.write_partition`), so no partition's runs wait for a
       write.
    3. The shared regions (a chunk a partition edge cuts, or one spanning several partitions)
       that the same partitions fill are written by one task, from one take of their slices
       per partition (:func:`_shared_groups`), each region's whole zarr chunks (or shards).
    4. With no position there is no partition: write ``indptr``, ``[0]``.
    """
    bounds, starts = plan.bounds.tolist(), plan.starts.tolist()
    own: list[list[tasks.OwnRegion]] = [[] for _ in range(plan.partitions)]
    edges: list[list[tuple[str, int, int]]] = [[] for _ in range(plan.partitions)]
    for array in RUN_ARRAYS:
        for region in plan.regions[array]:
            if region.shared:
                for p, lo, hi in region.sources:
                    edges[p].append((array, lo, hi))
            elif region.sources:
                ((p, lo, hi),) = region.sources
                own[p].append((arrays[array], region.start, region.stop, array, lo, hi))
    combine: list[Call] = [
        (
            tasks.write_partition,
            tuple(own[p]),
            tuple(edges[p]),
            bounds[p],
            bounds[p + 1],
            plan.extent,
            plan.index_dtype,
            (starts[p], starts[p + 1]),
        )
        for p in range(plan.partitions)
    ]
    where, first = spill_to or (None, len(pieces))
    relative = tasks.relative_parts(plan)

    def split(b: int) -> Call:
        return (
            tasks.split_piece,
            plan.indexed_axis,
            plan.index_order,
            plan.index_shape,
            plan.bounds,
            plan.index_dtype,
            where if b >= first else None,
            plan.dtype,
            relative,
        )

    sources = plan.sources(len(pieces))
    inputs: list[Key | Call] = list(pieces)
    for b in range(len(pieces)):
        if after is not None:
            inputs[b] = (tasks.after, inputs[b], (after, b))
        if before is not None and b >= first:  # its parts may go inside the store
            inputs[b] = (tasks.after, inputs[b], before)
    if before is not None:  # a partition's task writes chunks
        combine = [(call[0], (tasks.after, call[1], before), *call[2:]) for call in combine]
    sorted_, layer = shuffle(
        named(name, "sort"), inputs, split=split, combine=combine, sources=sources
    )
    if not plan.partitions:  # an empty axis: no region, and indptr is [0]
        zeros = np.zeros(1, plan.index_dtype)
        ((_, key),) = _write_keys(name, plan)
        layer[key] = (
            tasks.write_array,
            arrays["indptr"],
            0,
            zeros if before is None else (tasks.after, zeros, before),
        )
        return layer
    for p in range(plan.partitions):
        layer[(named(name, "wrote"), p)] = (tasks.wrote, sorted_[p])
    take, shared = named(name, "take"), named(name, "shared")
    for g, (filling, members) in enumerate(_shared_groups(plan).items()):
        wanted: list[list[tuple[str, int, int]]] = [[] for _ in filling]
        regions = []
        for array, region in members:
            slices = []
            for p, lo, hi in region.sources:
                t = filling.index(p)
                slices.append((t, len(wanted[t])))
                wanted[t].append((array, lo, hi))
            regions.append((arrays[array], region.start, region.stop, tuple(slices)))
        taken = []
        for t, p in enumerate(filling):
            taken.append((take, g, t))
            layer[taken[-1]] = (tasks.edges, sorted_[p], tuple(wanted[t]))
        layer[(shared, g)] = (tasks.write_shared, tuple(regions), *taken)
    return layer
