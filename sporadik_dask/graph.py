"""The only place dask graphs are built: the count pass, and the shuffle that writes each layout.

Every key is a deterministic function of the inputs, so the same write builds the same graph.
The shuffle follows dask's own: one split task per piece, a ``getitem`` per (piece, partition)
pair that runs where the split ran, and one task per partition that gathers its parts and sorts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import getitem
from typing import Any

import zarr
from dask.base import tokenize
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph

from sporadik_dask import tasks
from sporadik_dask.plan import LayoutPlan
from sporadik_dask.sources import Source
from sporadik_dask.spec import MAXIMA

__all__ = ["count_graph", "write_graph"]

Key = Any

#: How many count arrays one task adds together in the count pass.
COUNT_FAN_IN = 8
#: Bytes of ``indptr`` one task writes: tens of zarr chunks, known on the client.
INDPTR_TASK_BYTES = 2**23
#: Which member of a sorted partition each array is written from.
FIELDS = {"indices": 0, "data": 1, MAXIMA: 2}


def _extend(graph: HighLevelGraph, name: str, layer: dict[Key, Any]) -> HighLevelGraph:
    """``graph`` with one more layer on top that may read any key below it."""
    layers = {**graph.layers, name: layer}
    dependencies = {**graph.dependencies, name: set(graph.layers)}
    return HighLevelGraph(layers, dependencies)


def count_graph(source: Source, axes: Sequence[int]) -> Delayed:
    """A delayed ``(counts per axis, repeated cells)``: the pass that fixes every ``indptr``.

    1. Count values per position along each axis, in each piece.
    2. Add the counts together in a tree, :data:`COUNT_FAN_IN` at a time, so no task holds more
       than a few count arrays whatever the number of pieces.
    3. Add up the repeats that merging coordinate columns found.
    """
    extents = tuple((axis, source.shape[axis]) for axis in axes)
    name = f"sporadik-count-{tokenize(source.pieces, extents)}"
    layer: dict[Key, Any] = {}
    level = []
    for i, piece in enumerate(source.pieces):
        layer[(name, 0, i)] = (tasks.count_piece, piece, extents)
        level.append((name, 0, i))
    depth = 0
    while len(level) > 1:
        depth += 1
        groups = [level[i : i + COUNT_FAN_IN] for i in range(0, len(level), COUNT_FAN_IN)]
        level = []
        for j, group in enumerate(groups):
            layer[(name, depth, j)] = (tasks.add_counts, *group)
            level.append((name, depth, j))
    layer[(name, "repeats")] = (sum, list(source.repeats))
    layer[name] = (tuple, [level[0], (name, "repeats")])
    return Delayed(name, _extend(source.graph, name, layer))


def write_graph(
    source: Source,
    plans: Mapping[int, LayoutPlan],
    arrays: Mapping[int, Mapping[str, zarr.Array[Any]]],
) -> tuple[HighLevelGraph, list[Key]]:
    """The graph writing every zarr chunk of every planned layout, and the keys of its writes."""
    name = f"sporadik-write-{tokenize(source.pieces, *(p.bounds for p in plans.values()))}"
    layer: dict[Key, Any] = {}
    writes: list[Key] = []
    for axis, plan in plans.items():
        sort = _shuffle(layer, f"{name}-{axis}", source.pieces, plan)
        for array, field in FIELDS.items():
            for r, region in enumerate(plan.regions[array]):
                slices = []
                for i, (p, lo, hi) in enumerate(region.sources):
                    slices.append((f"{name}-{axis}-take-{array}", r, i))
                    layer[slices[-1]] = (tasks.take, (sort, p), field, lo, hi)
                writes.append((f"{name}-{axis}-write-{array}", r))
                layer[writes[-1]] = (
                    tasks.write_region,
                    arrays[axis][array],
                    region.start,
                    region.stop,
                    *slices,
                )
        chunk = plan.chunks["indptr"]
        step = chunk * max(1, INDPTR_TASK_BYTES // (chunk * plan.index_dtype.itemsize))
        for start in range(0, plan.positions + 1, step):
            writes.append((f"{name}-{axis}-write-indptr", start))
            layer[writes[-1]] = (
                tasks.write_array,
                arrays[axis]["indptr"],
                start,
                plan.indptr[start : start + step],
            )
    return _extend(source.graph, name, layer), writes


def _shuffle(layer: dict[Key, Any], name: str, pieces: Sequence[Key], plan: LayoutPlan) -> str:
    """Add the split, part and sort tasks of one layout; return the sorted partitions' name."""
    split, part, sort = f"{name}-split", f"{name}-part", f"{name}-sort"
    for b, piece in enumerate(pieces):
        layer[(split, b)] = (
            tasks.split_piece,
            piece,
            plan.indexed_axis,
            plan.index_order,
            plan.index_shape,
            plan.bounds,
            plan.index_dtype,
        )
        for p in range(plan.partitions):
            layer[(part, b, p)] = (getitem, (split, b), p)
    for p in range(plan.partitions):
        layer[(sort, p)] = (
            tasks.sort_partition,
            int(plan.bounds[p]),
            int(plan.bounds[p + 1]),
            plan.extent,
            plan.index_dtype,
            *[(part, b, p) for b in range(len(pieces))],
        )
    return sort
