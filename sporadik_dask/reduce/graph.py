"""The reductions' dask graphs: a tree of tasks merging fields, over a store's spans of runs or a
dask array's blocks, and dask's own tree over blocks whose fields are any object.

The numeric kernels live in the other modules of :mod:`sporadik_dask.reduce` and come in as
calls (a function and its leading arguments), so this module never imports them. Each builder names
its layer by a token of everything its tasks depend on and hands it to a pure planner
(:func:`_tree_reduction`, :func:`_block_leaves`), so tests read the keys without computing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np
import numpy.typing as npt
from dask.base import tokenize
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph

import sporadik_dask.read.dask_model as dask_model

if TYPE_CHECKING:
    from sporadik_dask.read.reader import StoreReader

__all__ = [
    "MADE_READER",
    "FreshResult",
    "as_fresh",
    "block_offsets",
    "blockwise_reduction",
    "fan_in",
    "grouped_reduction",
    "store_reduction",
]

Key = Any
Layer = dict[Key, Any]
#: A task before its inputs: a function and its leading arguments.
Call = tuple[Any, ...]

#: Stands in a span's call for the reader one task makes (:func:`store_reduction`'s ``made``).
MADE_READER = "sporadik-made-reader"

#: Fields of spans or blocks one task of a reduction merges.
REDUCE_FAN_IN = 8


def block_offsets(chunks: Sequence[Sequence[int]]) -> list[list[int]]:
    """Where each block starts along each axis."""
    return [np.concatenate(([0], np.cumsum(c)[:-1])).astype(int).tolist() for c in chunks]


def fan_in(
    layer: Layer, name: str, level: list[Any], combine: Callable[..., Any], *head: Any, width: int
) -> Any:
    """Add tasks combining ``level``'s results ``width`` at a time (``combine(*head, *group)``),
    level by level, so no task holds more than ``width`` of them; return the root's key."""
    depth = 0
    while len(level) > 1:
        depth += 1
        groups = [level[i : i + width] for i in range(0, len(level), width)]
        level = []
        for j, group in enumerate(groups):
            layer[(name, depth, j)] = (combine, *head, *group)
            level.append((name, depth, j))
    return level[0]


def store_reduction(
    reader: StoreReader,
    bounds: npt.NDArray[np.int64],
    *,
    label: str,
    fields: Call,
    merge: Call | None,
    finish: Call,
    shape: tuple[int, ...],
    meta: Any,
    made: tuple[Call, Sequence[da.Array]] | None = None,
) -> da.Array:
    """A reduction of a store as a one-block dask array: one task per span of positions
    ``bounds[i]:bounds[i + 1]``, each reading its own runs, merged as :func:`_tree_reduction`.

    ``(*fields, (first, last))`` gives a span's fields; ``merge`` and ``finish`` are as in
    :func:`_tree_reduction`. Named by the reader (store, layout), the spans and the three calls
    (the reduction, its target and options), so reductions of other stores, groupings or options
    share no key. With ``made = (call, inputs)``, the reader is made by one task,
    ``(*call, *inputs)`` with each input a dask array's one block, and every span reads through
    it (in ``fields``, the reader's place holds :data:`MADE_READER`).
    """
    inputs = [] if made is None else [x.rechunk(-1) for x in made[1]]
    name = f"{label}-{tokenize(reader, bounds, fields, merge, finish, made)}"
    if made is not None:
        key = (name, "reader")
        fields = tuple(key if part is MADE_READER else part for part in fields)
    spans = zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)
    layer = _tree_reduction(name, [(*fields, span) for span in spans], merge, finish)
    if made is not None:
        layer[key] = (*made[0], *[(x.name,) + (0,) * x.ndim for x in inputs])
    graph = HighLevelGraph.from_collections(name, layer, dependencies=inputs)
    return _one_block(Delayed(name, graph), shape, meta)


def grouped_reduction(
    x: da.Array,
    *,
    label: str,
    fields: Call,
    merge: Call,
    finish: Call,
    shape: tuple[int, ...],
    meta: Any,
) -> da.Array:
    """A reduction of a dask array's blocks into one whole output (every block may add into any
    output cell, as a groupby's do), as a one-block dask array merged as :func:`_tree_reduction`.

    ``(*fields, block, offsets)`` gives the fields of a block starting at ``offsets``. Named by
    the input and the three calls.
    """
    name = f"{label}-{tokenize(x, fields, merge, finish)}"
    held, blocks = dask_model.blocks_of(x)
    layer = _tree_reduction(name, _block_leaves(fields, blocks, x.chunks), merge, finish)
    return _one_block(Delayed(name, dask_model.on_blocks(name, layer, held)), shape, meta)


def _block_leaves(fields: Call, blocks: str, chunks: Sequence[Sequence[int]]) -> list[Call]:
    """Pure: ``(*fields, block, offsets)`` per block of the array named ``blocks``, in C order."""
    starts = block_offsets(chunks)
    return [
        (*fields, (blocks, *index), tuple(starts[axis][i] for axis, i in enumerate(index)))
        for index in np.ndindex(*(len(c) for c in chunks))
    ]


def _tree_reduction(name: str, leaves: Sequence[Call], merge: Call | None, finish: Call) -> Layer:
    """Pure: a reduction whose result is the key ``name``.

    1. Leaf ``i`` is the task ``leaves[i]``, at key ``(name, 0, i)``.
    2. Their results are merged :data:`REDUCE_FAN_IN` at a time, ``(*merge, *parts)``, level by
       level (:func:`fan_in`), so no task holds more than a few sets of fields.
    3. ``(*finish, root)`` makes the result from the merged fields. With no ``merge``,
       ``(*finish, *leaves)`` makes it from every leaf's at once (leaves that share no output
       cell, each laid into the result once, which a merge would copy at every level).
    """
    layer: Layer = {(name, 0, i): leaf for i, leaf in enumerate(leaves)}
    if merge is None:
        layer[name] = (*finish, *list(layer))
        return layer
    root = fan_in(layer, name, list(layer), *merge, width=REDUCE_FAN_IN)
    layer[name] = (*finish, root)
    return layer


class FreshResult(da.Array):
    """A one-block dask array whose block a task makes afresh at every compute, handed back as
    it is.

    dask copies a single block on the way out, in case it is a buffer held in the graph or by a
    worker: a deep copy for ``sparse.COO``, a good part of a grouped sum (docs/benchmarks.md,
    "Numbers behind the code's choices"). A block a reduction's last task made holds nothing anyone
    else has. A persisted one is a plain dask array again, copied as dask copies.
    """

    __slots__ = ()

    def __dask_postcompute__(self) -> tuple[Callable[..., Any], tuple[()]]:
        return _the_block, ()

    if dask_model.EXPRESSIONS:

        def optimize(self) -> Any:
            """The expression model computes the optimized array: this one still."""
            return dask_model.rewrap(type(self), super().optimize())  # type: ignore[misc]

    def __reduce__(self) -> Any:
        return (_fresh_again, (dask_model.rewrap(da.Array, self),))


def _fresh_again(x: da.Array) -> FreshResult:
    """An unpickled :class:`FreshResult`."""
    return dask_model.rewrap(FreshResult, x)


def _the_block(results: Any) -> Any:
    """The one block of a computed one-block array, uncopied."""
    while isinstance(results, (list, tuple)) and len(results) == 1:
        results = results[0]
    return results


#: Names of the one-block arrays whose block a task makes afresh at every compute.
FRESH_PREFIX = "sporadik-fresh-"


def _one_block(result: Delayed, shape: tuple[int, ...], meta: Any) -> da.Array:
    """A delayed result as a dask array of one block, of ``meta``'s type and dtype."""
    name = f"{FRESH_PREFIX}{tokenize(result.key, shape, meta.dtype, type(meta))}"
    return dask_model.rewrap(FreshResult, dask_model.from_delayed(result, shape, meta, name=name))


def as_fresh(x: Any, *, read: bool = False) -> Any:
    """``x`` as a :class:`FreshResult` when it is a plain dask array of a block made afresh
    (xarray holds plain dask arrays only), else ``x``: a persisted one holds its block, which
    dask then copies as it should. A reduction of ours is made afresh, and so is a ``read`` of a
    store (its task reads the block anew at every compute)."""
    from dask.core import istask

    if (
        type(x) is not da.Array
        or not (read or str(x.name).startswith(FRESH_PREFIX))
        or x.numblocks != (1,) * x.ndim
    ):
        return x
    held, blocks = dask_model.blocks_of(x)
    if not istask(held[(blocks,) + (0,) * x.ndim]):
        return x  # persisted: the block is data held by the graph or a worker
    return dask_model.rewrap(FreshResult, x)


def blockwise_reduction(
    x: da.Array,
    axes: tuple[int, ...],
    *,
    chunk: Callable[..., Any],
    combine: Callable[..., Any],
    aggregate: Callable[..., Any],
    dtype: np.dtype[Any],
    name: str,
) -> da.Array:
    """dask's own tree reduction of ``x`` over ``axes`` into numpy blocks, each block handed to
    ``chunk`` as it is (not concatenated), so ``chunk`` and ``combine`` may return any fields.

    dask names each layer by a token of ``name``, the functions and their arguments.
    """
    return dask_model.reduction(
        x,
        chunk,
        aggregate,
        combine=combine,
        axis=axes,
        keepdims=False,
        dtype=dtype,
        concatenate=False,
        meta=np.empty((0,) * (x.ndim - len(axes)), dtype=dtype),
        name=name,
    )
