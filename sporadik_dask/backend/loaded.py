"""Selections of a variable already read into memory: its ``sparse.COO`` taken as the runs of
a row layout, and assembled as a read from the store is.

Once a lazily opened variable is loaded (``.load()``, ``.compute()``, or xarray caching what
``.data`` read), xarray hands each later selection to ``sparse``'s indexing, one axis at a
time. Its masks and lists scan and compare every coordinate per axis, slower than reading the
whole store from disk again (docs/benchmarks.md, "Numbers behind the code's choices").
A ``sparse.COO`` in C order holds its values as rows, one run per position of the first axis.
So the values outside the selected positions are dropped first (one table lookup per axis),
and the rows left handed to the same :func:`~sporadik_dask.read.assembly.assemble` a read from
disk uses (the caller's order and repeats kept, C order by counting sorts). Outer selections
with an array on some axis go this way: every ``sparse.COO`` is in C order with no duplicates
(its constructor makes it so, and sparse's own indexing relies on it). Only a store's values
are taken so (:mod:`~sporadik_dask.backend.ours`): anyone else's ``sparse.COO`` is indexed by
``sparse`` as before. Every other key is ``sparse``'s own, its slices spelled as ``sparse``
0.19 reads them right (a negative stop no smaller than the step, which it reads as running past
position 0, spelled as None or as the position it stands for); everything with
``sporadik.pushdown: False`` is ``sparse``'s as given.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np

from sporadik_dask.backend.ours import is_read_sparse, mark_read
from sporadik_dask.format.spec import LayoutGeometry
from sporadik_dask.kernels.runs import rows_of_runs
from sporadik_dask.read.assembly import (
    LOOKUP_SLACK,
    assemble,
    assemble_points,
    descending,
    slot_table,
)
from sporadik_dask.read.routing import Stretch
from sporadik_dask.read.selection import (
    Axis,
    Selection,
    as_array,
    as_slice,
    distinct,
    normalize_points,
    ranks,
)

__all__ = ["select_loaded", "select_loaded_points", "selecting", "selecting_points", "slicing"]


@dataclass(frozen=True, slots=True)
class _Rows(LayoutGeometry):
    """A ``sparse.COO`` in C order seen as a layout along its first axis."""

    shape: tuple[int, ...]
    indexed_axis: int
    index_order: tuple[int, ...]


def selecting(original: Callable[..., Any]) -> Callable[..., Any]:
    """``ArrayApiIndexingAdapter._oindex_get``, with a store's values selected by
    :func:`select_loaded`."""

    @functools.wraps(original)
    def _oindex_get(self: Any, indexer: Any) -> Any:
        if not is_read_sparse(self.array):  # another's array: sparse's own indexing
            return original(self, indexer)
        selected = select_loaded(self.array, indexer.tuple)
        if selected is None:
            selected = original(self, _sliced_as_numpy(self.array, indexer))
        return mark_read(selected)

    return _oindex_get


def slicing(original: Callable[..., Any]) -> Callable[..., Any]:
    """``ArrayApiIndexingAdapter.__getitem__``, with a store's values sliced as numpy slices."""

    @functools.wraps(original)
    def __getitem__(self: Any, indexer: Any) -> Any:
        if not is_read_sparse(self.array):  # another's array: sparse's own indexing
            return original(self, indexer)
        return mark_read(original(self, _sliced_as_numpy(self.array, indexer)))

    return __getitem__


def _sliced_as_numpy(array: Any, indexer: Any) -> Any:
    """``indexer`` with each slice spelled so that ``sparse`` reads numpy's positions, for a
    ``sparse.COO`` (:func:`~sporadik_dask.read.selection.as_slice`): ``sparse`` 0.19 reads
    ``x[:-2:-2]`` of a 9-long axis as 5 positions where numpy reads 1."""
    if _refused(array, rank=1) or not any(isinstance(p, slice) for p in indexer.tuple):
        return indexer
    key = tuple(
        as_slice(range(size)[part]) if isinstance(part, slice) else part
        for part, size in zip(indexer.tuple, array.shape, strict=True)
    )
    return type(indexer)(key)


def selecting_points(original: Callable[..., Any]) -> Callable[..., Any]:
    """``ArrayApiIndexingAdapter._vindex_get``, with a store's values selected pointwise by
    :func:`select_loaded_points`."""

    @functools.wraps(original)
    def _vindex_get(self: Any, indexer: Any) -> Any:
        if not is_read_sparse(self.array):  # another's array: sparse's own indexing
            return original(self, indexer)
        selected = select_loaded_points(self.array, indexer)
        return original(self, indexer) if selected is None else mark_read(selected)

    return _vindex_get


def select_loaded_points(array: Any, indexer: Any) -> Any:
    """A vectorized (pointwise) selection of a ``sparse.COO`` in memory, which xarray refuses
    for it ("Vectorized indexing is not supported") where the same lazy variable takes it: a
    permuted outer key (a transposed view) as :func:`select_loaded`, one integer array per axis
    as the store's reader joins points with runs (a slice among them spans an axis of its own
    after theirs, as numpy's ``vindex``). None for anything else."""
    from sporadik_dask.backend.array import outer_of

    if _refused(array):
        return None
    outer = outer_of(indexer, array.ndim)
    if outer is not None:
        positions, order = outer
        selected = select_loaded(array, positions)
        return None if selected is None else selected.transpose(order)
    key = indexer.tuple
    if len(key) != array.ndim or not all(
        isinstance(part, slice) or (isinstance(part, np.ndarray) and part.dtype.kind in "iu")
        for part in key
    ):
        return None
    import sparse

    points, shape = normalize_points(key, array.shape)
    if points[0].size == 0:
        nothing = np.zeros((len(shape), 0), dtype=np.int64)
        return sparse.COO(nothing, array.data[:0], shape=shape, fill_value=array.fill_value)
    unique = distinct(points[0])
    lengths, indices, values = _kept_runs(array, _inside(array, 0, unique), unique)
    rows = _Rows(array.shape, 0, tuple(range(1, array.ndim)))
    hits, found = assemble_points(points, unique, rows, lengths, indices, values)
    if not shape:
        return found[0] if found.size else array.fill_value[()]
    return sparse.COO(
        np.stack(np.unravel_index(hits, shape)),
        found,
        shape=shape,
        has_duplicates=False,
        sorted=True,
        fill_value=array.fill_value,
    )


def _refused(array: Any, rank: int = 2) -> bool:
    """Whether ``array`` is not a ``sparse.COO`` of ``rank`` or more and a dtype the compiled
    assembly holds, or the pushdown is switched off: ``sparse``'s to index."""
    import sys

    sparse = sys.modules.get("sparse")
    return (
        sparse is None
        or type(array) is not sparse.COO
        or array.ndim < rank
        or array.dtype.kind not in "biufc"
        or not dask.config.get("sporadik.pushdown", True)
    )


def select_loaded(array: Any, key: tuple[Any, ...]) -> Any:
    """The outer selection ``key`` of ``array`` as a ``sparse.COO`` in C order, or None where
    ``sparse``'s own indexing is to take it (see the module's note)."""
    if (
        _refused(array)
        or len(key) != array.ndim
        or not any(isinstance(part, (np.ndarray, list)) for part in key)
    ):
        return None
    import sparse

    selection = Selection.from_key(key, array.shape)
    shape = selection.result_shape
    if selection.empty:
        nothing = np.zeros((len(shape), 0), dtype=np.int64)
        return sparse.COO(
            nothing, np.zeros(0, dtype=array.dtype), shape=shape, fill_value=array.fill_value
        )
    direct = _rank2_direct(array, selection) if array.ndim == 2 else None
    if direct is not None:
        return sparse.COO(
            direct[0],
            direct[1],
            shape=shape,
            has_duplicates=False,
            sorted=True,
            fill_value=array.fill_value,
        )
    rows = _Rows(array.shape, 0, tuple(range(1, array.ndim)))
    keep = None  # values in a selected position on every axis, before any is assembled
    for axis in range(array.ndim):
        if selection.narrow(axis):
            inside = _inside(array, axis, selection.unique[axis])
            keep = inside if keep is None else np.logical_and(keep, inside, out=keep)
    lengths, indices, values = _kept_runs(array, keep, as_array(selection.unique[0]))
    coords, values = assemble(selection, rows, Stretch.of_lengths(lengths), indices, values)
    if not shape:  # one cell: a scalar, as sparse and numpy give
        return values[0] if values.size else array.fill_value[()]
    return sparse.COO(
        coords,
        values,
        shape=shape,
        has_duplicates=False,
        sorted=True,
        fill_value=array.fill_value,
    )


def _inside(array: Any, axis: int, positions: Axis) -> Any:
    """Which stored values lie at one of ``positions`` (sorted) along ``axis``: one table lookup
    each, or a rank along an axis far longer than the values (no table as long as the axis)."""
    column = array.coords[axis]
    if isinstance(positions, range):
        return ranks(column, positions) >= 0
    if array.shape[axis] > 8 * column.size + LOOKUP_SLACK:
        spot = np.minimum(np.searchsorted(positions, column), max(positions.size - 1, 0))
        return positions[spot] == column if positions.size else np.zeros(column.size, bool)
    chosen = np.zeros(array.shape[axis], dtype=bool)
    chosen[positions] = True
    return chosen[column]


def _kept_runs(array: Any, keep: Any, rows: Any) -> tuple[Any, Any, Any]:
    """The runs of the sorted distinct ``rows`` among the values ``keep`` marks (every value
    when None), as a read hands them to the assembly: each run's length, the values' indices
    raveled over the other axes, and the values (a copy: the assembly may permute them)."""
    if keep is None:
        coords, values = array.coords, array.data.copy()
    else:  # row by row: numpy's 2-D boolean take along axis 1 is 2-3x slower
        coords = np.empty((array.ndim, int(np.count_nonzero(keep))), dtype=array.coords.dtype)
        for axis in range(array.ndim):
            np.compress(keep, array.coords[axis], out=coords[axis])
        values = array.data[keep]
    # the first axis is sorted: each row's run bounded by two binary searches
    asked = rows.astype(coords.dtype, copy=False)
    lengths = np.searchsorted(coords[0], asked, side="right") - np.searchsorted(coords[0], asked)
    rest = coords[1:]
    indices = rest[0] if array.ndim == 2 else np.ravel_multi_index(tuple(rest), array.shape[1:])
    return lengths.astype(np.int64, copy=False), indices, values


def _rank2_direct(array: Any, selection: Selection) -> Any:
    """A rank-2 selection taken from the array's own rows by one kernel, as a read's runs are
    (:func:`~sporadik_dask.kernels.runs.rows_of_runs`): nothing gathered first, the result written
    once at its final size: where fresh pages are dear, gathering the kept rows first cost most of
    the time (docs/benchmarks.md, "Numbers behind the code's choices"). None for what the kernel
    does not take (a dropped axis, columns asked for twice or out of order), left to
    :func:`assemble`.
    """
    if selection.dropped or not (selection.ordered(1) or descending(selection, 1)):
        return None
    slots = slot_table(selection, 1, array.nnz)
    if slots is None:
        return None
    first = array.coords[0]
    asked = as_array(selection.positions[0]).astype(first.dtype, copy=False)
    starts = np.searchsorted(first, asked)
    lengths = np.searchsorted(first, asked, side="right") - starts
    data = array.data
    if int(lengths.sum()) == data.size:  # every value: the kernel would permute them in place
        data = data.copy()
    return rows_of_runs(
        starts.astype(np.int64, copy=False),
        lengths.astype(np.int64, copy=False),
        array.coords[1],
        data,
        slots,
        reverse=not selection.ordered(1),
    )
