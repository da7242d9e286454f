"""Reductions of a dask array read from a store, as one pass over a layout's runs.

dask reduces a read block by block, through ``sparse``, which re-sorts every ``COO`` block for a
reduction along any axis but the last, and whose ``nanvar`` and friends of ``sparse`` blocks
raise. A reduction of a plain read of a whole store (its graph is the read and nothing else) is
therefore handed to :mod:`sporadik_dask.reduce.spans`, whose tasks each reduce a span of a
layout's runs; :class:`~sporadik_dask.read.window.SporadikArray` routes its own ``sum``,
``mean``, ... and numpy's reductions of it here. Every other reduction is dask's.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np

from sporadik_dask.read.blocks import StoreWindow, reader_of

if TYPE_CHECKING:
    from sporadik_dask.reduce.fields import Op
    from sporadik_dask.reduce.target import Target

__all__ = ["NUMPY_REDUCTIONS", "numpy_reduced", "pushed_down", "reduced", "window_reduced"]


def pushed_down(op: Op) -> Any:
    """dask's ``Array.<op>``, but :func:`reduced` when that computes it."""
    import functools
    import inspect

    own = getattr(da.Array, op)
    signature = inspect.signature(own)

    @functools.wraps(own)
    def method(self: da.Array, *args: Any, **kwargs: Any) -> Any:
        given = signature.bind(self, *args, **kwargs).arguments
        options = {k: given[k] for k in ("dtype", "keepdims", "out", "ddof") if k in given}
        pushed = reduced(self, op, given.get("axis"), **options)
        return own(self, *args, **kwargs) if pushed is None else pushed

    return method


#: numpy's reductions a read of a store answers itself (through ``__array_function__``): the
#: reduction, and whether NaNs are skipped. dask's ``nanmean``, ``nanvar`` and ``nanstd`` of
#: ``sparse`` blocks raise (fill values differ between the blocks' parts), and its ``var`` of
#: boolean or ``GCXS`` blocks too.
NUMPY_REDUCTIONS: dict[Any, tuple[Op, bool]] = {
    np.sum: ("sum", False),
    np.mean: ("mean", False),
    np.max: ("max", False),
    np.amax: ("max", False),
    np.min: ("min", False),
    np.amin: ("min", False),
    np.var: ("var", False),
    np.std: ("std", False),
    np.nansum: ("sum", True),
    np.nanmean: ("mean", True),
    np.nanmax: ("max", True),
    np.nanmin: ("min", True),
    np.nanvar: ("var", True),
    np.nanstd: ("std", True),
}


def numpy_reduced(x: Any, func: Any, args: Any, kwargs: Any) -> Any:
    """numpy's ``func(*args, **kwargs)`` of ``x`` (``__array_function__``'s arguments) as
    :func:`reduced` computes it, if ``func`` is one of :data:`NUMPY_REDUCTIONS` and ``x`` its
    array; or None to leave it to dask."""
    if func in NUMPY_REDUCTIONS and args and args[0] is x:
        import inspect

        op, skipna = NUMPY_REDUCTIONS[func]
        try:
            given = inspect.signature(func).bind(*args, **kwargs).arguments
        except TypeError:
            given = None
        known = {"a", "axis", "dtype", "keepdims", "out", "ddof"}
        if given is not None and set(given) <= known:
            options = {k: given[k] for k in known - {"a", "axis"} if k in given}
            pushed = reduced(x, op, given.get("axis"), skipna=skipna, **options)
            if pushed is not None:
                return pushed
    return None


def reduced(
    x: Any,
    op: Op,
    axis: Any,
    *,
    skipna: bool = False,
    ddof: Any = 0,
    dtype: Any = None,
    keepdims: Any = False,
    out: Any = None,
) -> Any:
    """``x.<op>(axis)`` of a plain read of a whole store as one pass over a layout's runs
    (:func:`~sporadik_dask.reduce.spans.reduce_store_dask`), a dask array of ``sparse.COO`` as
    dask's own; of a read of a window of it, in the store's pass too when
    :func:`window_reduced` takes it; or None to leave it to dask.

    ``sparse``'s own reduction of ``COO`` blocks along any axis but the last re-sorts every block,
    many times slower than one pass (docs/benchmarks.md, "Numbers behind the code's choices"). Taken
    for ``sum``, ``mean``, ``max``, ``min``, ``var`` and ``std`` (with ``ddof``), skipping NaNs or
    not, with numpy's dtypes and NaNs, and no ``dtype``, ``keepdims`` or ``out``; over all axes too,
    a 0-d dask array of numpy's scalar: ``sparse``'s sum of a uint64 value near 2**64 is 0, and
    dask's ``nanvar`` of ``sparse`` blocks raises. Any of an array of no cell is numpy's on it
    (dask's of ``sparse`` blocks of no value raise).
    """
    import sparse

    from sporadik_dask.read.reader import StoreReader
    from sporadik_dask.reduce.fields import reduced_axes, refuse_empty, supported
    from sporadik_dask.reduce.results import dense_result
    from sporadik_dask.reduce.spans import reduce_store_dask
    from sporadik_dask.reduce.target import Target

    source = reader_of(x)
    if source is None or dtype is not None or keepdims or out is not None:
        return None
    if x.size == 0:
        return _of_no_cell(x, op, axis, skipna=skipna, ddof=ddof)
    if not supported(op, np.dtype(x.dtype)) or not isinstance(ddof, int):
        return None
    axes = reduced_axes(tuple(range(x.ndim)) if axis is None else axis, x.ndim)
    whole = len(axes) == x.ndim
    if not axes:
        return None
    refuse_empty(op, x.shape, axes)
    target = Target(tuple(x.shape), axes)
    dense = dense_result(target, op)
    if dense is None:
        return None
    if isinstance(source, StoreReader):
        result = reduce_store_dask(
            source, op, target, math.prod(x.numblocks), skipna=skipna, ddof=ddof, dense=dense
        )
    else:
        result = window_reduced(source, target, op, skipna=skipna, ddof=ddof, dense=dense)
        if result is None:
            return None
    if not dense or whole:
        return result
    meta = sparse.COO.from_numpy(np.zeros((0,) * result.ndim, dtype=result.dtype))
    return result.map_blocks(sparse.COO.from_numpy, dtype=result.dtype, meta=meta)


def window_reduced(
    source: Any, target: Target, op: Op, *, skipna: bool, ddof: int, dense: bool
) -> Any:
    """``op`` over a read of a window of a store (``source``) in the store's pass, the window's
    positions the pass's grouping (:func:`~sporadik_dask.reduce.selection.reduce_selection_dask`),
    or None for a reduction of its blocks: not a window, a window with an axis an integer
    dropped, a sparse result, or a selection estimated under ``sporadik.selection-read-values``
    values (its blocks cost what it selects). ``sparse`` reduces an integer block along an axis
    of more than 2**31 cells by its fill value times their count in the block's dtype, which
    overflows."""
    import dask

    from sporadik_dask.planning.budgets import SELECTION_READ_VALUES
    from sporadik_dask.reduce.selection import reduce_selection_dask

    if not isinstance(source, StoreWindow) or source.dropped or not dense:
        return None
    reader = source.reader
    pairs = list(zip(source.positions, reader.shape, strict=True))
    small = int(dask.config.get("sporadik.selection-read-values", SELECTION_READ_VALUES))
    if reader.description.nnz * math.prod(len(p) / max(n, 1) for p, n in pairs) < small:
        return None  # before any position is made an array: a region of a genome is a range
    chosen = [
        (None if p == range(n) else p) if isinstance(p, range) else np.asarray(p, dtype=np.int64)
        for p, n in pairs
    ]
    return reduce_selection_dask(reader, chosen, target, op, skipna=skipna, ddof=ddof)


def _of_no_cell(x: Any, op: Op, axis: Any, *, skipna: bool, ddof: Any) -> Any:
    """numpy's ``op`` of an array of no cell (a result, or numpy's error), as a dask array of
    ``sparse.COO``: nothing to read."""
    import warnings

    import sparse

    name = ("nan" if skipna else "") + op
    options = {"ddof": ddof} if op in ("var", "std") else {}
    with warnings.catch_warnings():  # numpy's 'Mean of empty slice': NaN is the answer
        warnings.simplefilter("ignore", RuntimeWarning)
        result = getattr(np, name)(np.zeros(x.shape, dtype=x.dtype), axis=axis, **options)
    if np.ndim(result) == 0:
        return da.from_array(np.asarray(result))
    return da.from_array(sparse.COO.from_numpy(result), asarray=False)
