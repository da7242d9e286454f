"""Every input's nonzeros as dask tasks yielding pieces: blocks of a dask array, an in-memory
array, coordinate columns, a DataFrame's partitions (with its labels' names), a stored layout.

Each builder names its layer by a token of everything its tasks depend on and hands that name to
a private, pure planner returning the layer as a plain dict, so tests read the keys without
computing anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
import numpy.typing as npt
from dask.base import tokenize
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph

from sporadik_dask.format.spec import LayoutGeometry
from sporadik_dask.reduce.graph import Key, Layer, block_offsets, fan_in
from sporadik_dask.write import array_refs, frame_pieces
from sporadik_dask.write.kept import KeptPiece, kept_piece, widened
from sporadik_dask.write.pieces import (
    Piece,
    cell_bounds,
    cell_sample,
    checked_columns,
    merge_pieces,
    piece_of_block,
    piece_of_layout,
    split_by_cell,
)
from sporadik_dask.write.shuffle import named, shuffle

__all__ = [
    "Pieces",
    "current_client",
    "kept_pieces",
    "names_of_frame",
    "persisted_pieces",
    "pieces_of_blocks",
    "pieces_of_columns",
    "pieces_of_coo",
    "pieces_of_frame",
    "pieces_of_layout",
]


#: How many partitions' names one task unites in a DataFrame's label pass: each may hold every
#: name of its axis, as Arrow strings (offsets and bytes, a few tens of MB per million names).
NAMES_FAN_IN = 8


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
    #: Whether the count pass keeps each piece it reads for the write
    #: (:mod:`~sporadik_dask.write.kept`): reading them again costs more than keeping them.
    keep: bool = False
    #: Directories holding the kept pieces these tasks read, removed when the write ends.
    kept: tuple[str, ...] = ()
    #: ``distributed`` futures of the pieces persisted on a cluster's workers
    #: (:mod:`~sporadik_dask.write.persisted`), released when the write ends.
    persisted: tuple[Any, ...] = ()


def kept_pieces(pieces: Pieces, kept: Sequence[KeptPiece], directory: str) -> Pieces:
    """``pieces`` as the count pass kept them in ``directory``, each read by a task of its own;
    the input's graph is needed no more.

    Named by the input's pieces, not by where they were kept: the same write planned twice has
    the same keys, and either's files hold the same values.
    """
    name = f"sporadik-kept-{tokenize(pieces.keys)}"
    layer: Layer = {(name, b): (kept_piece, found) for b, found in enumerate(kept)}
    graph = HighLevelGraph.from_collections(name, layer, [])
    return Pieces(graph, tuple(layer), kept=(directory,))


def persisted_pieces(pieces: Pieces, futures: Sequence[Any]) -> Pieces:
    """``pieces`` as the count pass persisted them on a cluster's workers, narrowed, a future
    each, each widened by a task of its own; the graph holds no task of the input, whose pieces
    the scheduler reads again only for a lost worker's.

    Named by the input's pieces, as :func:`kept_pieces` is.
    """
    name = f"sporadik-persisted-{tokenize(pieces.keys)}"
    layer: Layer = {(name, b): (widened, future) for b, future in enumerate(futures)}
    graph = HighLevelGraph.from_collections(name, layer, [])
    return Pieces(graph, tuple(layer), persisted=tuple(futures))


def pieces_of_blocks(x: da.Array, keep: bool = True) -> Pieces:
    """One piece per block of a dask array (``sparse``, ``scipy.sparse`` or numpy chunks);
    ``keep``: the count pass keeps each (not for an array held in memory)."""
    from sporadik_dask.read.dask_model import blocks_of, on_blocks

    name = f"sporadik-pieces-{tokenize(x)}"
    held, blocks = blocks_of(x)
    layer = _block_pieces(name, blocks, x.chunks)
    return Pieces(on_blocks(name, layer, held), tuple(layer), keep=keep)


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
    return Pieces(on_blocks(raw, layer, held), pieces, repeats, keep=True)


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
        HighLevelGraph.from_collections(raw, layer, dependencies=[frame]),
        pieces,
        repeats,
        keep=True,
    )


def _merged(
    raw: str, layer: Layer, shape: tuple[int, ...]
) -> tuple[tuple[Key, ...], tuple[Key, ...]]:
    """Raw pieces that may name a cell twice (the keys ``(raw, b)`` of ``layer``), shuffled by
    ranges of raveled cells into disjoint pieces in C order, repeats added together and counted:
    the tasks are added to ``layer``; the keys of the pieces and of their repeats are returned.

    1. Each raw piece gives a sample of its cells; the samples' quantiles bound the ranges.
    2. Each raw piece is split by those ranges, and each range's parts merged.
    """
    blocks = [key for key in layer if isinstance(key, tuple) and key[0] == raw]
    merged = named(raw, "merged")
    sampled, bounds = named(raw, "sample"), named(raw, "bounds")
    for b, block in enumerate(blocks):
        layer[(sampled, b)] = (cell_sample, block, shape)
    layer[bounds] = (cell_bounds, len(blocks), *[(sampled, b) for b in range(len(blocks))])
    outputs, shuffled = shuffle(
        merged,
        blocks,
        split=(split_by_cell, shape, bounds),
        combine=[(merge_pieces, shape)] * len(blocks),
    )
    layer.update(shuffled)
    piece, repeated = named(merged, "piece"), named(merged, "repeats")
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
