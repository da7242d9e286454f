"""Everything that differs between dask's two array models, in one place.

dask has two ``dask.array.Array``\\ s, chosen once per process at import by
``array.query-planning``: the graph model (an array is a graph, a name, chunks and a meta) and
the expression model (an array is an expression, lowered to a graph when computed; its names are
tokens of the expression, and ``from_array`` ignores ``name=``). The package builds arrays and
asks what is beneath them only through this module, so both models give the same arrays:

1. an array from a graph and a meta: ``da.Array(graph, name, chunks, meta=)`` (the graph
   model's public constructor), or the expression model's ``from_graph``, which keeps the name's
   prefix (:func:`from_graph`);
2. the same array as a subclass of ours (:func:`rewrap`), from its graph or its expression;
3. reads of a store: :func:`read_array` is dask's ``from_array`` over a source of ours, and
   registers the array's name with that source in a map of weak values (an entry lives as long as
   some graph or expression holds the source), so :func:`source_of` finds the reader of a plain
   read and :func:`reads_beneath` any read beneath an array, in either model;
   :func:`read_graph` registers a read made of tasks of its own the same way;
4. the names beneath an array (:func:`names_beneath`): its graph's layers, or its expression's
   operands;
5. a tree reduction with a meta of its result (:func:`reduction`);
6. an array's blocks as ``dask.delayed`` values (:func:`delayed_blocks`), which the expression
   model's arrays lack (``to_delayed``);
7. chunks cut smaller where an operation would grow its blocks (:func:`cut_chunks`), as dask's
   own ``einsum`` and overlaps cut them.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import dask.array as da

if TYPE_CHECKING:
    from dask.highlevelgraph import HighLevelGraph

__all__ = [
    "EXPRESSIONS",
    "blocks_of",
    "blocks_of_arrays",
    "cut_chunks",
    "delayed_blocks",
    "from_delayed",
    "from_graph",
    "graph_names",
    "names_beneath",
    "on_blocks",
    "read_array",
    "read_graph",
    "reads_beneath",
    "reduction",
    "rewrap",
    "source_of",
]

#: Whether this process's ``dask.array`` is the expression model (``array.query-planning``).
EXPRESSIONS: bool = hasattr(da.Array, "expr")

#: The name of every read of a store made in this process -> weak references to what it reads
#: (readers or windows: equal ones, as two calls making one read give the same name). A name is
#: forgotten when the last of them is.
_READS: dict[str, list[weakref.ref[Any]]] = {}

A = TypeVar("A", bound=da.Array)


def from_graph(graph: Mapping[Any, Any], name: str, chunks: Any, meta: Any) -> da.Array:
    """The array whose blocks are the keys ``(name, i, j, ...)`` of ``graph`` (a
    ``HighLevelGraph`` or a mapping of tasks). In the expression model its name is ``name``'s
    prefix and a token, its blocks aliases of those keys."""
    import numpy as np

    if not EXPRESSIONS:
        return da.Array(graph, name, chunks, meta=meta)
    from dask.array._array_expr._collection import from_graph as expression_from_graph

    keys = [(name, *index) for index in np.ndindex(*(len(c) for c in chunks))]
    prefix = name.rsplit("-", 1)[0] if "-" in name else name
    array: da.Array = expression_from_graph(
        dict(graph), meta, tuple(map(tuple, chunks)), keys, prefix
    )
    return array


def from_delayed(
    value: Any, shape: tuple[int, ...], meta: Any, *, name: str | None = None
) -> da.Array:
    """The one-block array of a ``dask.delayed`` value (dask's ``from_delayed``, which the
    expression model lacks), of ``meta``'s type and dtype."""
    from dask.base import tokenize

    name = name or f"from-value-{tokenize(value.key, shape, meta.dtype, type(meta))}"
    if not EXPRESSIONS:
        array: da.Array = da.from_delayed(value, shape, dtype=meta.dtype, meta=meta, name=name)
        return array
    graph = {**dict(value.__dask_graph__()), (name, *(0,) * len(shape)): (_same, value.key)}
    return from_graph(graph, name, tuple((n,) for n in shape), meta)


def _same(value: Any) -> Any:
    return value


def blocks_of(x: da.Array) -> tuple[HighLevelGraph, str]:
    """A graph holding ``x``'s blocks, and the name of their keys ``(name, i, j, ...)``: ``x``'s
    own graph and name, or, in the expression model, the lowered graph (one layer), whose names
    may differ from ``x``'s."""
    from dask.highlevelgraph import HighLevelGraph

    if not EXPRESSIONS:
        return x.__dask_graph__(), x.name  # type: ignore[return-value]
    first: Any = x.__dask_keys__()
    while isinstance(first, list):
        first = first[0]
    blocks = str(first[0])
    return HighLevelGraph.from_collections(blocks, dict(x.__dask_graph__()), []), blocks


def delayed_blocks(x: da.Array) -> Any:
    """``x``'s blocks as ``dask.delayed`` values, in an object array of ``x.numblocks``:
    dask's ``to_delayed``, or, in the expression model, which lacks it, the blocks of the
    lowered graph (:func:`blocks_of`)."""
    import numpy as np

    if not EXPRESSIONS:
        return x.to_delayed()
    from dask.delayed import Delayed

    graph, name = blocks_of(x)
    blocks = np.empty(x.numblocks, dtype=object)
    for index in np.ndindex(*x.numblocks):
        blocks[index] = Delayed((name, *index), graph, layer=name)
    return blocks


def cut_chunks(
    chunks: Sequence[tuple[int, ...]], axes: set[int], largest: float
) -> list[tuple[int, ...]]:
    """``chunks`` with the chunks along ``axes`` split so that a block holds about ``largest``
    elements at most: dask's private ``_calculate_new_chunksizes``, which its graph model's
    ``einsum`` and its expression model's overlaps call."""
    from dask.array._shuffle import _calculate_new_chunksizes

    # annotated int, but dask's einsum passes its quotient, a float, as this does
    cut: list[tuple[int, ...]] = _calculate_new_chunksizes(
        tuple(chunks),
        list(chunks),
        set(axes),
        largest,  # type: ignore[arg-type]
    )
    return cut


def reduction(x: da.Array, chunk: Any, aggregate: Any, *, meta: Any, **kwargs: Any) -> da.Array:
    """dask's tree ``reduction`` of ``x``, whose result has the meta ``meta``.

    The graph model takes ``meta`` as the result's; the expression model takes it as what
    ``chunk`` gives (and reshapes it to the result's rank, failing), so there the metas are
    made by ``chunk`` and ``aggregate`` themselves, called with ``computing_meta=True``.
    """
    array: da.Array = da.reduction(
        x, chunk, aggregate, meta=None if EXPRESSIONS else meta, **kwargs
    )
    return array


def blocks_of_arrays(arrays: Sequence[da.Array]) -> tuple[HighLevelGraph, list[str]]:
    """A graph holding the blocks of every array of ``arrays`` (:func:`blocks_of`), and the
    name of each one's block keys."""
    from dask.highlevelgraph import HighLevelGraph

    held = [blocks_of(x) for x in arrays]
    return HighLevelGraph.merge(*(graph for graph, _ in held)), [name for _, name in held]


def on_blocks(name: str, layer: Mapping[Any, Any], graph: HighLevelGraph) -> HighLevelGraph:
    """``graph`` (from :func:`blocks_of`) with ``layer`` on top, named ``name``."""
    from dask.highlevelgraph import HighLevelGraph

    layers = {**graph.layers, name: layer}
    return HighLevelGraph(layers, {**graph.dependencies, name: set(graph.layers)})


def rewrap(cls: type[A], x: da.Array) -> A:
    """``x`` (the same blocks, name, chunks and meta) as an instance of ``cls``, a subclass of
    ``dask.array.Array``, or of ``dask.array.Array`` itself."""
    if type(x) is cls:
        return x
    if EXPRESSIONS:
        return cls(x.expr)  # type: ignore[attr-defined,call-arg]
    return cls(x.dask, x.name, x.chunks, meta=x._meta)


def read_array(source: Any, chunks: Any, meta: Any, *, name: str, **kwargs: Any) -> da.Array:
    """dask's ``from_array(source, chunks, meta=meta, asarray=False)``, registered as a read of
    ``source`` (which must admit weak references, and have no ``copy``: dask copies
    array-likes that have one). ``name`` names it in the graph model (the expression model names
    it by its expression); ``kwargs`` go to ``from_array``."""
    x: da.Array = da.from_array(source, chunks, meta=meta, asarray=False, name=name, **kwargs)
    _register(x.name, source)
    return x


def read_graph(
    source: Any, graph: Mapping[Any, Any], name: str, chunks: Any, meta: Any
) -> da.Array:
    """The array of ``graph``'s blocks ``(name, i, j, ...)`` (:func:`from_graph`), registered
    as a read of ``source``: for a read whose tasks are not dask's getter over ``source``, but
    whose blocks are ``source``'s all the same."""
    x = from_graph(graph, name, chunks, meta)
    _register(x.name, source)
    return x


def _register(name: str, source: Any) -> None:
    """Remember ``name`` as a read of ``source`` for as long as ``source`` lives."""

    def forget(gone: weakref.ref[Any]) -> None:
        refs = _READS.get(name, [])
        refs[:] = [ref for ref in refs if ref is not gone and ref() is not None]
        if not refs:
            _READS.pop(name, None)

    _READS.setdefault(name, []).append(weakref.ref(source, forget))


def source_of(x: Any) -> Any:
    """What ``x`` reads (a reader or a window), if ``x`` is a read of this process and nothing
    more (its name is the read's); else None."""
    if not isinstance(x, da.Array):
        return None
    for ref in _READS.get(x.name, ()):
        source = ref()
        if source is not None:
            return source
    return None


def reads_beneath(x: Any) -> bool:
    """Whether a read of a store made in this process is beneath the dask array ``x``."""
    return isinstance(x, da.Array) and any(name in _READS for name in names_beneath(x))


def names_beneath(x: da.Array) -> set[str]:
    """The names of ``x`` and of every array it is computed from: the graph's layers, or the
    expression's operands (no graph is made)."""
    if EXPRESSIONS:
        return {str(e._name) for e in x.expr.walk()}  # type: ignore[attr-defined]
    return {str(name) for name in x.dask.layers}


def graph_names(x: da.Array) -> set[str]:
    """The names of the keys of ``x``'s graph as dask would run it (lowered, in the expression
    model): what a test reads to see which tasks a computation holds."""
    from dask.utils import key_split

    if not EXPRESSIONS:
        return {key_split(name) for name in x.dask.layers}
    return {key_split(key) for key in dict(x.__dask_graph__())}
