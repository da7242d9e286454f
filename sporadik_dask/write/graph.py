"""The write's dask graphs: pieces of every input, the count pass, the shuffles and the write
(a reduction's graphs are :mod:`sporadik_dask.reduce.graph`'s).

Each public builder validates nothing (``sources`` decides what an input is), names its layer by
a token of everything its tasks depend on, and hands that name to a private, pure planner that
returns the layer as a plain dict, so tests can read the keys without computing anything. A write
is named by its pieces, its plans and its target arrays (store, path and ``zarr.json``), so two
writes that differ in any of them never share a key in one ``dask.compute``.

Both shuffles (merging coordinate columns by cell, and sorting each layout by position) are one
planner, :func:`_shuffle`, laid out as dask's own: one split task per input, a ``getitem`` per
(input, partition) pair that runs where the split ran, and one task per partition combining its
parts. A write's shuffle is a :class:`Deferred` layer, so those pairs' tasks are made by the
scheduler, not sent by the client.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from operator import getitem
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np
import numpy.typing as npt
from dask.base import tokenize
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from dask.highlevelgraph import Layer as DaskLayer

from sporadik_dask.format.spec import MAXIMA, LayoutGeometry
from sporadik_dask.planning.plan import LayoutPlan, WritePlan
from sporadik_dask.reduce.graph import Call, Key, Layer, block_offsets, fan_in
from sporadik_dask.write import array_refs, counting, frame_pieces, tasks
from sporadik_dask.write.pieces import (
    Piece,
    checked_columns,
    merge_pieces,
    piece_of_block,
    piece_of_layout,
    split_by_cell,
)
from sporadik_dask.write.spill import SpillTo, directory_for, shared_directory_for

if TYPE_CHECKING:
    pass

__all__ = [
    "Deferred",
    "Pieces",
    "count_graph",
    "names_of_frame",
    "pieces_of_blocks",
    "pieces_of_columns",
    "pieces_of_coo",
    "pieces_of_frame",
    "pieces_of_layout",
    "write_graph",
]

#: How many count arrays one task adds together in the count pass.
COUNT_FAN_IN = 8
#: How many partitions' names one task unites in a DataFrame's label pass: each may hold every
#: name of its axis, as Arrow strings (offsets and bytes, a few tens of MB per million names).
NAMES_FAN_IN = 8
#: The arrays written from a partition's :class:`~sporadik_dask.write.tasks.Runs`, by field name.
RUN_ARRAYS = ("indices", "data", MAXIMA, "indptr")


@dataclass(frozen=True, slots=True, eq=False)
class Pieces:
    """Tasks yielding an input's nonzeros as :class:`~sporadik_dask.write.pieces.Piece` s.

    Pieces hold disjoint sets of cells, which is what lets the count pass give exact ``indptr``
    before any value moves.
    """

    #: The graph computing every piece (and everything it depends on).
    graph: HighLevelGraph
    #: One key per piece, in C order of the input where it has one.
    keys: tuple[Key, ...]
    #: Keys yielding how many repeated cells each piece merged; empty when none can repeat.
    repeats: tuple[Key, ...] = ()


class Deferred(DaskLayer):
    """A layer whose tasks a pure planner makes when it is first read, pickled as that call.

    A shuffle has a task per (piece, partition) pair, as many as values squared; carried as the
    planner's arguments (keys, partitions, regions), the graph a client sends to a distributed
    scheduler grows with the values instead, and the scheduler makes the tasks. Anything that
    reads the layer here (the threaded scheduler, a test) makes them here.
    """

    def __init__(self, build: Callable[..., Layer], *args: Any) -> None:
        super().__init__()
        self._build, self._args = build, args
        self._tasks: Layer | None = None

    @property
    def _made(self) -> Layer:
        if self._tasks is None:
            self._tasks = self._build(*self._args)
        return self._tasks

    def __getitem__(self, key: Key) -> Any:
        return self._made[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._made)

    def __len__(self) -> int:
        return len(self._made)

    def __contains__(self, key: object) -> bool:
        return key in self._made

    def is_materialized(self) -> bool:
        return self._tasks is not None

    def get_output_keys(self) -> Set[Key]:
        return self._made.keys()

    def __getstate__(self) -> dict[str, Any]:
        made = ("_tasks", "has_legacy_tasks")  # what reading it built or cached
        return {k: v for k, v in self.__dict__.items() if k not in made} | {"_tasks": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


def _extend(graph: HighLevelGraph, name: str, layer: Layer | Deferred) -> HighLevelGraph:
    """``graph`` with one more layer on top that may read any key below it."""
    layers = {**graph.layers, name: layer}
    dependencies = {**graph.dependencies, name: set(graph.layers)}
    return HighLevelGraph(layers, dependencies)


# -- pieces of each input --------------------------------------------------------------------


def pieces_of_blocks(x: da.Array) -> Pieces:
    """One piece per block of a dask array (``sparse``, ``scipy.sparse`` or numpy chunks)."""
    from sporadik_dask.read.dask_model import blocks_of, on_blocks

    name = f"sporadik-pieces-{tokenize(x)}"
    held, blocks = blocks_of(x)
    layer = _block_pieces(name, blocks, x.chunks)
    return Pieces(on_blocks(name, layer, held), tuple(layer))


def _block_pieces(name: str, blocks: str, chunks: Sequence[Sequence[int]]) -> Layer:
    """Pure: a :func:`~sporadik_dask.write.pieces.piece_of_block` task per block, in C order."""
    starts = block_offsets(chunks)
    layer: Layer = {}
    for index in np.ndindex(*(len(c) for c in chunks)):
        offsets = tuple(starts[axis][i] for axis, i in enumerate(index))
        layer[(name, len(layer))] = (piece_of_block, (blocks, *index), offsets)
    return layer


def pieces_of_coo(
    coords: npt.NDArray[np.int64], data: npt.NDArray[Any], shape: Sequence[int], step: int
) -> Pieces:
    """Pieces of an in-memory canonical array: ranges of ``step`` of its values, at least one.

    With a ``distributed.Client`` as the scheduler, the pieces are scattered to its workers
    once, and the graph holds their futures: held in the graph, the array would be sent to the
    scheduler with every pass over it (the count pass, then the write; distributed warns of a
    "large graph" at each).
    """
    name = f"sporadik-pieces-{tokenize(coords, data, tuple(shape), step)}"
    starts = range(0, max(data.shape[0], 1), step)
    client = current_client()
    if client is None:
        layer: Layer = {
            (name, i): (Piece, coords[:, s : s + step], data[s : s + step])
            for i, s in enumerate(starts)
        }
    else:
        pieces = [Piece(coords[:, s : s + step], data[s : s + step]) for s in starts]
        layer = {(name, i): future for i, future in enumerate(client.scatter(pieces))}
    return Pieces(HighLevelGraph.from_collections(name, layer, []), tuple(layer))


def current_client(get: Any = None) -> Any:
    """The ``distributed.Client`` whose ``get`` is ``get`` (default: the scheduler dask
    computes on now), or None for a local scheduler."""
    from dask.base import get_scheduler

    client = getattr(get or get_scheduler(), "__self__", None)
    return client if hasattr(client, "scatter") and hasattr(client, "gather") else None


def pieces_of_columns(
    values: da.Array, columns: Sequence[da.Array], shape: Sequence[int]
) -> Pieces:
    """Parallel coordinate columns, chunked alike, as pieces merged by cell."""
    from sporadik_dask.read.dask_model import blocks_of_arrays, on_blocks

    shape = tuple(shape)
    raw = f"sporadik-columns-{tokenize(values, *columns, shape)}"
    held, names = blocks_of_arrays([values, *columns])
    layer: Layer = {
        (raw, b): (checked_columns, shape, *[(name, b) for name in names])
        for b in range(len(values.chunks[0]))
    }
    pieces, repeats = _merged(raw, layer, shape)
    return Pieces(on_blocks(raw, layer, held), pieces, repeats)


def names_of_frame(frame: Any, labelled: Sequence[str]) -> Delayed:
    """A delayed mapping of each ``labelled`` column to its sorted distinct names (Arrow strings).

    1. Each partition's distinct names, column by column (:func:`frame_pieces.frame_names`).
    2. United in a tree, :data:`NAMES_FAN_IN` at a time, so no task holds more than that many
       partitions' names, and the graph holds no name whatever their number.

    dask's own ``unique`` (``split_out=True``) shuffles the names between as many outputs as
    there are partitions and hands them to the client as pandas objects; here the client gets
    one Arrow array per column.
    """
    labelled = tuple(labelled)
    parts = frame[list(labelled)].to_delayed()
    name = f"sporadik-frame-names-{tokenize(frame, labelled)}"
    layer: Layer = {}
    level = []
    for b, part in enumerate(parts):
        layer[(name, 0, b)] = (frame_pieces.frame_names, part.key, labelled)
        level.append((name, 0, b))
    root = fan_in(layer, name, level, frame_pieces.unite_names, width=NAMES_FAN_IN)
    layer[name] = (frame_pieces.unite_names, root)
    return Delayed(name, HighLevelGraph.from_collections(name, layer, dependencies=parts))


def pieces_of_frame(
    frame: Any,
    shape: Sequence[int],
    columns: Sequence[str],
    values: str | None,
    labels: Any,
) -> Pieces:
    """A dask DataFrame's partitions as pieces merged by cell; ``labels`` (sorted Arrow strings
    by column, or a ``distributed`` future of them) turn names into positions.

    On a cluster, ``labels`` is the label pass's future: held in the graph, every name would be
    sent to the scheduler with each pass (the count pass, then the write).
    """
    shape, columns = tuple(shape), tuple(columns)
    raw = f"sporadik-frame-{tokenize(frame, shape, columns, values, labels)}"
    names_key = f"{raw}-labels"  # once in the graph, not copied into every task
    layer: Layer = {
        (raw, b): (frame_pieces.frame_piece, key, shape, columns, values, names_key)
        for b, key in enumerate(frame.__dask_keys__())
    }
    layer[names_key] = labels
    pieces, repeats = _merged(raw, layer, shape)
    return Pieces(
        HighLevelGraph.from_collections(raw, layer, dependencies=[frame]), pieces, repeats
    )


def _merged(
    raw: str, layer: Layer, shape: tuple[int, ...]
) -> tuple[tuple[Key, ...], tuple[Key, ...]]:
    """Raw pieces that may name a cell twice (the keys ``(raw, b)`` of ``layer``), shuffled by a
    hash of the cell into disjoint pieces, repeats added together and counted: the tasks are
    added to ``layer``; the keys of the pieces and of their repeats are returned."""
    blocks = [key for key in layer if isinstance(key, tuple) and key[0] == raw]
    merged = f"{raw}-merged"
    outputs, shuffled = _shuffle(
        merged,
        blocks,
        split=(split_by_cell, shape, len(blocks)),
        combine=[(merge_pieces, shape)] * len(blocks),
    )
    layer.update(shuffled)
    piece, repeated = f"{merged}-piece", f"{merged}-repeats"
    pieces, repeats = [], []
    for p, key in enumerate(outputs):
        layer[(piece, p)] = (getattr, key, "piece")
        layer[(repeated, p)] = (getattr, key, "repeats")
        pieces.append((piece, p))
        repeats.append((repeated, p))
    return tuple(pieces), tuple(repeats)


def pieces_of_layout(
    indices: array_refs.ArrayRef,
    data: array_refs.ArrayRef,
    indptr: npt.NDArray[np.int64],
    bounds: npt.NDArray[np.int64],
    layout: LayoutGeometry,
) -> Pieces:
    """A stored layout's positions ``bounds[i]:bounds[i + 1]`` as piece ``i``, read in the task.

    ``indptr`` (read and checked on the client) is in the token and ``indices`` and ``data`` are
    named by store, path and ``zarr.json``, so a layout rewritten since gives other keys.
    """
    geometry = (layout.indexed_axis, tuple(layout.index_order), tuple(layout.shape))
    name = f"sporadik-layout-pieces-{tokenize(indices, data, indptr, bounds, geometry)}"
    layer: Layer = {}
    for start, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        layer[(name, len(layer))] = (
            piece_of_layout,
            indices,
            data,
            indptr[start : stop + 1],
            start,
            *geometry,
        )
    return Pieces(HighLevelGraph.from_collections(name, layer, []), tuple(layer))


# -- the shuffle -----------------------------------------------------------------------------


def _shuffle(
    name: str,
    inputs: Sequence[Key | Call],
    *,
    split: Call | Callable[[int], Call],
    combine: Sequence[Call],
    sources: Sequence[Sequence[int]] | None = None,
) -> tuple[list[Key], Layer]:
    """Pure: move every input's values to the partition they belong to; one output per partition.

    1. ``(*split[:1], input, *split[1:])`` returns one part per partition, in partition order
       (``split(b)`` is input ``b``'s call when ``split`` is a function).
    2. ``getitem(split, p)`` picks part ``p``; it runs where the split ran, so only that part
       travels.
    3. ``(*combine[p], *parts)`` gets partition ``p``'s parts from every input in
       ``sources[p]`` (all of them by default), in input order: an input holding no value for
       ``p`` is neither waited for nor sent.

    Returns the output keys, ``(name, p)``, and the layer.
    """
    # One string object per name: a pickled graph then holds each name once, not once per key.
    splits, parts = f"{name}-split", f"{name}-part"
    everyone = range(len(inputs))
    layer: Layer = {}
    for b, key in enumerate(inputs):
        func, *args = split(b) if callable(split) else split
        layer[(splits, b)] = (func, key, *args)
    outputs = []
    for p, call in enumerate(combine):
        gathered = []
        for b in everyone if sources is None else sources[p]:
            layer[(parts, b, p)] = (getitem, (splits, b), p)
            gathered.append((parts, b, p))
        layer[(name, p)] = (*call, *gathered)
        outputs.append((name, p))
    return outputs, layer


# -- the count pass and the write ------------------------------------------------------------


def count_graph(pieces: Pieces, shape: Sequence[int], axes: Sequence[int]) -> Delayed:
    """A delayed :class:`~sporadik_dask.write.counting.Tally`: the pass fixing every ``indptr``."""
    extents = tuple((int(axis), int(shape[axis])) for axis in axes)
    name = f"sporadik-count-{tokenize(pieces.keys, pieces.repeats, extents)}"
    layer = _count_layer(name, pieces.keys, pieces.repeats, extents)
    return Delayed(name, _extend(pieces.graph, name, layer))


def _count_layer(
    name: str,
    pieces: Sequence[Key],
    repeats: Sequence[Key],
    extents: tuple[tuple[int, int], ...],
) -> Layer:
    """Pure: the count pass, whose result is the key ``name``.

    1. Count values per position along each axis, in each piece.
    2. Add the counts together in a tree, :data:`COUNT_FAN_IN` at a time, so no task holds more
       than a few count arrays whatever the number of pieces.
    3. Add up the repeats that merging coordinate columns found.

    Each piece's span of positions along each axis comes back with the counts, in piece order.
    """
    layer: Layer = {}
    level = []
    for i, piece in enumerate(pieces):
        layer[(name, 0, i)] = (counting.count_piece, piece, extents)
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
        graph = _extend(graph, key, {key: (function, argument)})
    return _extend(graph, name, layer), writes, where


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
        after = f"{name}-sort-split"
    return layer


def _write_keys(name: str, plan: WritePlan) -> Iterator[tuple[str, Key]]:
    """The key of every write task of one layout, and the array it writes (``"runs"`` for a
    partition's, which writes every region that partition fills alone)."""
    for p in range(plan.partitions):
        yield "runs", (f"{name}-wrote", p)
    for array in RUN_ARRAYS:
        for r, region in enumerate(plan.regions[array]):
            if region.shared:
                yield array, (f"{name}-write-{array}", r)
    if not plan.partitions:
        yield "indptr", (f"{name}-write-indptr", 0)


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
    3. Each shared region (a chunk a partition edge cuts, or one spanning several partitions)
       takes those slices and writes its whole zarr chunks (or shards) in one task.
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

    def split(b: int) -> Call:
        return (
            tasks.split_piece,
            plan.indexed_axis,
            plan.index_order,
            plan.index_shape,
            plan.bounds,
            plan.index_dtype,
            where if b >= first else None,
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
    sorted_, layer = _shuffle(f"{name}-sort", inputs, split=split, combine=combine, sources=sources)
    regions = {array: list(plan.regions[array]) for array in RUN_ARRAYS}
    takes = {array: f"{name}-take-{array}" for array in RUN_ARRAYS}
    for array, key in _write_keys(name, plan):
        if array == "runs":
            layer[key] = (tasks.wrote, sorted_[key[1]])
            continue
        if not plan.partitions:  # an empty axis: no region, and indptr is [0]
            zeros = np.zeros(1, plan.index_dtype)
            layer[key] = (
                tasks.write_array,
                arrays[array],
                0,
                zeros if before is None else (tasks.after, zeros, before),
            )
            continue
        region = regions[array][key[1]]
        slices = []
        for i, (p, lo, hi) in enumerate(region.sources):
            slices.append((takes[array], key[1], i))
            layer[slices[-1]] = (tasks.edge, sorted_[p], array, lo, hi)
        layer[key] = (tasks.write_region, arrays[array], region.start, region.stop, *slices)
    return layer
