"""Dask chunks of a lazily opened sporadik variable stay sparse, whatever ``chunks=`` xarray gets.

xarray's dask manager gives every lazily indexed backend array a numpy ``meta``, and its adapter
then densifies each chunk (``xarray.namedarray.daskmanager.DaskManager.from_array``); a backend
has no say in either. Left alone, ``xr.open_dataset(store, engine="sporadik", chunks={})`` would
turn every chunk of a store dense: gigabytes per block of a single-cell matrix.

So xarray's dask manager is given one rule (installed by :mod:`sporadik_dask.backend.patches`),
applied to sporadik variables only: they go to dask with a ``sparse.COO`` meta and
``asarray=False``, through dask's own getter, so slice fusion stays and chunks stay sparse.
Every other array goes to dask's manager unchanged. The same rule is also registered as a
chunk manager of its own, ``chunked_array_type="sporadik"``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from xarray.namedarray.daskmanager import DaskManager

from sporadik_dask.backend.array import backend_under
from sporadik_dask.backend.ours import is_read_dask, is_read_sparse, mark_read

__all__ = ["SporadikChunkManager", "computing_fresh", "keeping_sparse", "plain_dask_array"]


class SporadikChunkManager(DaskManager):
    """dask, with sparse meta for lazily opened sporadik variables and dask's own for the rest.

    It never claims an array as its own (dask's manager does), so it never competes with it; as
    the session's manager (``xr.set_options(chunk_manager="sporadik")``) it is therefore asked to
    chunk dask data afresh, which it rechunks, with dims left unnamed made whole.
    """

    def is_chunked_array(self, data: Any) -> bool:
        return False

    def from_array(self, data: Any, chunks: Any, **kwargs: Any) -> Any:
        import dask.array as da

        if isinstance(data, da.Array):  # as the session's manager, asked to rechunk dask data
            return data.rechunk(chunks)
        chunked = _sparse_from_array(data, chunks, kwargs)
        return super().from_array(data, chunks, **kwargs) if chunked is None else chunked


def computing_fresh(compute: Callable[..., Any]) -> Callable[..., Any]:
    """``DaskManager.compute``, each one-block reduction or read of ours made afresh handed back
    uncopied (:class:`~sporadik_dask.reduce.graph.FreshResult`): a variable holds it as a plain dask
    array (:func:`plain_dask_array`), whose one block dask would deep-copy on the way out. A
    read computed whole is marked as read (:func:`~sporadik_dask.backend.ours.mark_read`)."""

    @functools.wraps(compute)
    def compute_fresh(self: Any, *data: Any, **kwargs: Any) -> Any:
        from sporadik_dask.reduce.graph import as_fresh

        # anyone else's array is handed over as it came
        ours = [as_fresh(x, read=is_read_dask(x)) for x in data]
        computed = compute(self, *ours, **kwargs)
        # a read computed whole is a read still: its selections and products stay ours
        return tuple(
            mark_read(c) if is_read_dask(x) else c for x, c in zip(data, computed, strict=True)
        )

    return compute_fresh


def keeping_sparse(from_array: Callable[..., Any]) -> Callable[..., Any]:
    """``DaskManager.from_array``, with a lazily opened sporadik variable chunked into
    ``sparse.COO`` blocks; any other array goes to dask's manager unchanged."""

    @functools.wraps(from_array)
    def sparse_for_sporadik(self: Any, data: Any, chunks: Any, **kwargs: Any) -> Any:
        chunked = _sparse_from_array(data, chunks, kwargs)
        return from_array(self, data, chunks, **kwargs) if chunked is None else chunked

    return sparse_for_sporadik


def _sparse_from_array(data: Any, chunks: Any, kwargs: dict[str, Any]) -> Any:
    """A dask array of sparse chunks over a lazily opened sporadik variable, or None for any
    other array."""
    import sparse
    from dask.base import tokenize

    from sporadik_dask.read.blocks import READ_PREFIX, read_blocks

    # the reading stack, loaded on first use
    from sporadik_dask.read.dask_model import read_array

    given = kwargs.get("name")
    options = {k: v for k, v in kwargs.items() if k not in ("name", "meta", "asarray")}
    beneath = backend_under(data)
    backend = beneath.backend
    if backend is None:
        held = _held_sparse(data)
        if held is None:
            return None
        # read already (xarray keeps what ``.data`` read): blocks of it, sparse; registered as
        # a read, so reductions of it take the pass over stored values
        meta = sparse.COO.from_numpy(np.zeros((0,) * held.ndim, dtype=held.dtype))
        name = f"{READ_PREFIX}{given or tokenize(held, chunks)}"
        return read_array(_Indexed(held), chunks, meta, name=name, **options)

    meta = sparse.COO.from_numpy(np.zeros((0,) * data.ndim, dtype=data.dtype))
    # registered as a sporadik read, so reductions of it are pushed down (backend.pushdown)
    name = f"{READ_PREFIX}{given or tokenize(backend.reader, data, chunks)}"
    if beneath.whole and beneath.axes == tuple(range(data.ndim)):
        # dask's own getter over the reader: blocks are sparse, slices fuse
        return read_blocks(backend.reader, chunks, meta, name=name, **options)
    return read_array(_Indexed(data), chunks, meta, name=name, **options)


class _Indexed:
    """What dask's getter reads a chunked sporadik variable's blocks from, when it is not the
    whole store's reader: a lazily indexed view of a store (xarray's lazy result unwrapped), or
    the ``sparse.COO`` read from one. A holder of ours, so the read can be registered by a weak
    reference to it, and no ``copy`` for dask's ``from_array`` to call."""

    __slots__ = ("__weakref__", "array", "dtype", "ndim", "shape")

    def __init__(self, array: Any) -> None:
        self.array = array
        self.dtype = array.dtype
        self.ndim = array.ndim
        self.shape = array.shape

    def __getitem__(self, key: Any) -> Any:
        result = self.array[key]
        return mark_read(result.get_duck_array() if hasattr(result, "get_duck_array") else result)

    def __dask_tokenize__(self) -> Any:
        from dask.base import tokenize

        return (type(self).__name__, tokenize(self.array))


def _held_sparse(data: Any) -> Any:
    """The ``sparse.COO`` read from a store that an xarray in-memory wrapper holds
    (``MemoryCachedArray`` once ``.data`` was read), or None: dask's manager would give it numpy
    meta and dense blocks. Anyone else's ``sparse.COO`` is chunked as dask's manager chunks it."""
    import sparse
    from xarray.core import indexing

    while data is not None:
        if type(data) is sparse.COO:
            return data if is_read_sparse(data) else None  # another's: dask's manager's rule
        if isinstance(data, (indexing.LazilyIndexedArray, indexing.LazilyVectorizedIndexedArray)):
            return None
        data = getattr(data, "array", None)
    return None


def plain_dask_array(x: Any) -> Any:
    """``x`` as a plain ``dask.array.Array`` (the same graph, name, chunks and meta) when it is
    of a subclass, else ``x``.

    xarray refuses to compute a Dataset whose dask variables are of more than one type
    (``Mixing chunked array types``): one of ours beside any plain dask array (a non-index
    coordinate, a variable the user adds) would make ``.compute()`` fail. Selections of a
    variable are reads all the same, through xarray's indexing adapter
    (:mod:`~sporadik_dask.backend.dask_selection`).
    """
    import dask.array as da

    from sporadik_dask.read.dask_model import rewrap

    if not isinstance(x, da.Array) or type(x) is da.Array:
        return x
    return rewrap(da.Array, x)
