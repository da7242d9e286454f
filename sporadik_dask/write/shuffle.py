"""The shuffle, laid out as dask's own, and the layers a write's graph is made of.

Both shuffles (merging coordinate columns by cell, and sorting each layout by position) are one
planner, :func:`shuffle`: one split task per input, a ``getitem`` per (input, partition) pair
that runs where the split ran, and one task per partition combining its parts. A write's shuffle
is a :class:`Deferred` layer, so those pairs' tasks are made by the scheduler, not sent by the
client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence, Set
from operator import getitem
from typing import Any

from dask.highlevelgraph import HighLevelGraph
from dask.highlevelgraph import Layer as DaskLayer
from dask.utils import key_split

from sporadik_dask.reduce.graph import Call, Key, Layer

__all__ = [
    "Deferred",
    "extend",
    "named",
    "shuffle",
]


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


def extend(graph: HighLevelGraph, name: str, layer: Layer | Deferred) -> HighLevelGraph:
    """``graph`` with one more layer on top that may read any key below it."""
    layers = {**graph.layers, name: layer}
    dependencies = {**graph.dependencies, name: set(graph.layers)}
    return HighLevelGraph(layers, dependencies)


def named(name: str, kind: str) -> str:
    """``name`` with ``kind`` added to the words before its token, where dask's ``key_split``
    reads a task's kind: ``named("sporadik-write-<token>-0", "sort")`` is
    ``"sporadik-write-sort-<token>-0"``.

    distributed estimates a task's duration by that prefix, and places and steals tasks by the
    estimate; its dashboard shows progress by it. Named after the token, every task of a write
    was one kind, ``sporadik-write``: a ``getitem`` of a few microseconds was taken to cost what
    a partition's sort does, and moved, with the whole split it reads, to an idle worker.
    """
    prefix = key_split(name)
    return f"{prefix}-{kind}{name[len(prefix) :]}"


def shuffle(
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
    splits, parts = named(name, "split"), named(name, "part")
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
