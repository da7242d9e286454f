"""Joins: dask's of ``sparse.COO`` blocks along a later axis by counting sorts, not sparse's
argsort; xarray's of lazily opened sporadik variables (``xr.concat``, ``reindex``).

A selection of genes under ``chunks=`` is read in blocks along the gene axis (each block reads its
genes' runs once), so computing it joins blocks along axis 1. dask hands that to
``sparse.concatenate``, which sorts the joined coordinates with an argsort and checks them with a
numba function it does not cache, compiled in every new process: a first join costs about a second
more than later ones (docs/benchmarks.md, "Numbers behind the code's choices"). The blocks are each
in C order already, so a stable counting sort along the axes before the joined one puts them in C
order in O(n), with this package's cached kernels (:mod:`sporadik_dask.backend.patches` has dask
join ``sparse.COO`` blocks with it): the result is the one sparse gives (tested against it). Blocks
that are anyone else's (not read from a store, :mod:`sporadik_dask.marks`) and any other join are
sparse's own. ``dask.config`` ``sporadik.join-in-order: False`` hands every join back to
``sparse.concatenate``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xarray.core import indexing

from sporadik_dask.marks import is_read_sparse, mark_read

__all__ = ["concatenate_in_order", "reading_first", "reading_on_index"]


def concatenate_in_order(arrays: Sequence[Any], axis: int = 0) -> Any:
    """``sparse.concatenate(arrays, axis)``, with the result put in C order by counting sorts
    when every block was read from a store.

    0. Blocks not all read from a store (:func:`~sporadik_dask.marks.is_read_sparse`) are anyone
       else's: ``sparse.concatenate`` joins them, as it would had no store been opened. Of ours, one
       block is the join: dask joins a column of blocks along each axis in turn, so a copy of each
       would be held beside the blocks and the result (docs/benchmarks.md, "Numbers behind the
       code's choices").
    1. Along the leading axis, or for anything but ``sparse.COO`` blocks of one rank, fill value
       and coordinate dtype (int64, or int32 that holds the joined axis), hand over to
       ``sparse.concatenate`` (its own join along the
       leading axis keeps C order without a sort).
    2. Join coordinates and values block after block, offsetting the joined axis.
    3. Values are then in C order within each run of equal coordinates on the axes before
       ``axis`` (block order is order along ``axis``): stable counting sorts along those axes,
       last first, leave them in C order (:func:`~sporadik_dask.read.assembly.c_order`, which
       checks the result and sorts fully if a block was not in C order).
    """
    import dask
    import sparse

    from sporadik_dask.read.assembly import c_order

    arrays = list(arrays)
    if not arrays or not all(is_read_sparse(a) for a in arrays):  # anyone else's: sparse's
        return sparse.concatenate(arrays, axis=axis)
    first = arrays[0]
    if len(arrays) == 1 and _within(axis, first.ndim):
        return first
    if (
        not dask.config.get("sporadik.join-in-order", True)
        or not _one_index_dtype(arrays, axis)
        or not _within(axis, first.ndim)
        or first.ndim < 2
        or any(a.ndim != first.ndim for a in arrays)
        or axis % first.ndim == 0
        or any(not _same_fill(a.fill_value, first.fill_value) for a in arrays)
        or any(a.shape[:axis] != first.shape[:axis] for a in arrays)
        or any(a.shape[axis + 1 :] != first.shape[axis + 1 :] for a in arrays)
    ):
        return mark_read(sparse.concatenate(arrays, axis=axis))
    axis = int(axis) % first.ndim
    shape = list(first.shape)
    shape[axis] = sum(a.shape[axis] for a in arrays)
    data = np.concatenate([a.data for a in arrays])
    coords = np.concatenate([a.coords for a in arrays], axis=1)
    at, offset = 0, 0
    for a in arrays:
        if offset:
            coords[axis, at : at + a.nnz] += offset
        at, offset = at + a.nnz, offset + a.shape[axis]
    coords, data = c_order(coords, data, tuple(shape), range(axis, first.ndim))
    joined = sparse.COO(
        coords,
        data,
        shape=tuple(shape),
        has_duplicates=False,
        sorted=True,
        fill_value=first.fill_value,
    )
    return mark_read(joined)


def _within(axis: Any, ndim: int) -> bool:
    """Whether ``axis`` is an integer naming one of ``ndim`` axes (negative from the end)."""
    return isinstance(axis, (int, np.integer)) and bool(-ndim <= axis < ndim)


def _one_index_dtype(arrays: Sequence[Any], axis: Any) -> bool:
    """Whether every block's coordinates are int64, or all int32 with the joined axis still
    within int32 (grouped results come with int32 coordinates; sparse keeps them so)."""
    kinds = {a.coords.dtype for a in arrays}
    if kinds == {np.dtype(np.int64)}:
        return True
    if kinds != {np.dtype(np.int32)} or not isinstance(axis, (int, np.integer)):
        return False
    ndim = arrays[0].ndim
    if not -ndim <= axis < ndim:
        return False
    return bool(sum(a.shape[axis] for a in arrays) < 2**31)


def _same_fill(a: Any, b: Any) -> bool:
    """Whether two fill values are one (NaN is NaN), as sparse requires of a join."""
    return bool(a == b or (a != a and b != b))


def reading_first(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Variable.concat`` (its function, under the classmethod), with lazily opened sporadik
    variables read first.

    xarray joins variables from their lazy wrappers asking numpy for the values: a backend array
    holding ``sparse.COO`` raises there ("Cannot convert a sparse array to dense
    automatically"), where the same variables loaded join as sparse. A join of no such variable
    is handed over as it came.
    """

    @functools.wraps(original)
    def concat(cls: Any, variables: Any, *args: Any, **kwargs: Any) -> Any:
        variables = list(variables)
        if any(_lazy(v) for v in variables):
            variables = [v.copy(deep=False, data=v.data) if _lazy(v) else v for v in variables]
        return original(cls, variables, *args, **kwargs)

    return concat


def reading_on_index(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Variable._getitem_with_mask`` (``reindex`` to labels the variable lacks), with a lazily
    opened sporadik variable's selection read as it is made, so missing labels are filled as
    sparse; any other variable is handed over as it came."""

    @functools.wraps(original)
    def _getitem_with_mask(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _lazy(self):
            from xarray.core.variable import Variable

            read_on_index = _ReadOnIndex(self._data)
            self = Variable(self.dims, read_on_index, self.attrs, self.encoding, fastpath=True)
        return original(self, *args, **kwargs)

    return _getitem_with_mask


def _lazy(variable: Any) -> bool:
    from sporadik_dask.backend.array import backend_under

    return backend_under(variable._data).backend is not None


class _ReadOnIndex(indexing.ExplicitlyIndexedNDArrayMixin):
    """A lazy view whose selections are read as they are made (a ``sparse.COO``)."""

    __slots__ = ("array",)

    def __init__(self, array: Any) -> None:
        self.array = array

    def _oindex_get(self, indexer: Any) -> Any:
        return self.array.oindex[indexer].get_duck_array()

    def _vindex_get(self, indexer: Any) -> Any:
        return self.array.vindex[indexer].get_duck_array()

    def __getitem__(self, indexer: Any) -> Any:
        return self.array[indexer].get_duck_array()
