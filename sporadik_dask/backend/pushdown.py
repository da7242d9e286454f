"""xarray reductions of sporadik variables, pushed down to :mod:`sporadik_dask.reduce`.

xarray reduces a variable by handing its whole data to a numpy-style function: a lazily opened
variable is read in full into one ``sparse.COO`` first, and a chunked one goes through
``sparse``'s ``nansum`` (dense ``zeros_like``, a three-way ``where``, a sort per chunk, kernels
compiled in every process). A backend has no say in either. So ``xarray.Variable.reduce`` is
wrapped: for a variable whose data is a sporadik store (lazily indexed,
or a dask array read from one) and a reduction computed here (``sum``, ``mean``, ``max``,
``min``, ``count``, ``var``, ``std``, with ``skipna``, ``ddof``; ``any`` and ``all`` of
booleans; ``median`` and ``argmax``/``argmin``: :mod:`~sporadik_dask.backend.order`), the
result is computed from the store's runs or the blocks' coordinates in one pass, as a dense
numpy (or dask) array with numpy's dtype. ``groupby(coord)`` reductions of such a variable
(one grouping coordinate along one dim) are pushed down the same way, each position's values
landing in its group's row, in place of one read per group. Every other variable and
reduction goes to xarray's own method unchanged (groupby reductions:
:mod:`sporadik_dask.backend.grouped`). ``dask.config`` ``sporadik.pushdown: False`` switches
it off. The wrappers are installed by :mod:`sporadik_dask.backend.patches`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from sporadik_dask.backend.accessor import READER_KEY
from sporadik_dask.backend.array import backend_under, read_not_kept
from sporadik_dask.backend.chunkmanager import plain_dask_array
from sporadik_dask.backend.elementwise import Recorded, recorded
from sporadik_dask.backend.order import order_data, positions_of, refuse_dense
from sporadik_dask.backend.ours import is_read_dask, is_sporadik_variable
from sporadik_dask.read import StoreReader
from sporadik_dask.read.blocks import reader_of
from sporadik_dask.read.dask_model import EXPRESSIONS

__all__ = [
    "op_of",
    "options_of",
    "pushed_data",
    "pushing_down",
    "where_filled",
]


def pushing_down(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Variable.reduce``, with a reduction of a sporadik variable computed from its store."""

    @functools.wraps(original)
    def reduce(
        self: Any,
        func: Callable[..., Any],
        dim: Any = None,
        axis: Any = None,
        keep_attrs: bool | None = None,
        keepdims: bool = False,
        **kwargs: Any,
    ) -> Any:
        pushed = _pushed_down(self, func, dim, axis, keepdims, kwargs)
        if pushed is None:
            return original(
                self, func, dim=dim, axis=axis, keep_attrs=keep_attrs, keepdims=keepdims, **kwargs
            )
        from xarray.core.options import _get_keep_attrs
        from xarray.core.variable import Variable

        dims, data = pushed
        data = plain_dask_array(data)
        keep = _get_keep_attrs(default=True) if keep_attrs is None else keep_attrs
        return Variable(dims, data, attrs=self.attrs if keep else None)

    return reduce


def op_of(func: Callable[..., Any] | str) -> str | None:
    from xarray.core import duck_array_ops

    from sporadik_dask.reduce.fields import OPS

    if isinstance(func, str):
        return func if func in OPS else None
    return next((name for name in OPS if func is getattr(duck_array_ops, name, None)), None)


def options_of(op: str | None, dtype: Any, kwargs: dict[str, Any]) -> tuple[str, bool, int] | None:
    """The reduction, ``skipna`` and ``ddof`` if computed here; None for xarray's own path."""
    import dask

    from sporadik_dask.reduce.fields import supported

    if not dask.config.get("sporadik.pushdown", True):
        return None
    if op is None or not supported(op, np.dtype(dtype)):
        return None
    extra = set(kwargs) - {"skipna", "ddof", "min_count", "numeric_only"}
    if extra or (kwargs.get("min_count") is not None and op != "sum"):
        return None
    skipna = kwargs.get("skipna")
    if skipna is None:
        skipna = np.dtype(dtype).kind in "fc"
    return op, bool(skipna), int(kwargs.get("ddof", 0))


def _axes_of(variable: Any, dim: Any, axis: Any) -> tuple[int, ...] | None:
    if dim is not None and axis is not None:
        return None
    if (dim is None and axis is None) or dim is ...:
        return tuple(range(variable.ndim))
    from sporadik_dask.reduce.fields import reduced_axes

    if axis is not None:
        return reduced_axes(axis, variable.ndim)
    dims: Sequence[Hashable] = [dim] if isinstance(dim, str) or not np.iterable(dim) else list(dim)
    if any(d not in variable.dims for d in dims):
        return None  # xarray raises its own error
    return reduced_axes([variable.get_axis_num(d) for d in dims], variable.ndim)


def _pushed_down(
    variable: Any,
    func: Callable[..., Any],
    dim: Any,
    axis: Any,
    keepdims: bool,
    kwargs: dict[str, Any],
) -> tuple[tuple[Hashable, ...], Any] | None:
    """The reduced dims and data, or None to leave the reduction to xarray."""
    from sporadik_dask.reduce.results import dense_result
    from sporadik_dask.reduce.target import Target

    if not is_sporadik_variable(variable):  # another's variable: xarray's own, untouched
        return None
    axes = _axes_of(variable, dim, axis)
    if variable.size == 0 and _picks(func):
        from xarray.core.variable import Variable  # no value to pick: xarray's answer or error

        empty = Variable(variable.dims, np.zeros(variable.shape, variable.dtype))
        reduced = empty.reduce(func, dim=dim, axis=axis, keepdims=keepdims, **kwargs)
        return reduced.dims, reduced.data
    positions = None if keepdims else positions_of(variable, func, axes, kwargs)
    if positions is not None and axes is not None:  # argmax, argmin along one dim
        return tuple(d for a, d in enumerate(variable.dims) if a not in axes), positions
    refuse_dense(variable, func, dim)
    if func is _median() and not keepdims:
        return _median_of(variable, dim, axis, kwargs)
    options = options_of(op_of(func) or _truth_op(func, variable.dtype), variable.dtype, kwargs)
    if keepdims or options is None or not axes:  # no axis: xarray's own (it keeps the dtype)
        return None
    target = Target(tuple(variable.shape), axes)
    dense = dense_result(target, options[0])
    min_count = kwargs.get("min_count")
    if dense is None or (min_count is not None and not dense):
        return None
    data = pushed_data(variable, target, *options, dense=dense)
    if data is None:
        return None
    if min_count is not None and options[1]:  # xarray ignores it unless NaN are skipped
        valid = pushed_data(variable, target, "count", True, 0, dense=True)
        data = _missing_below(data, valid, int(min_count), whole=not target.kept)
    return tuple(variable.dims[a] for a in target.kept), _aligned(data, variable, target)


def _truth_op(func: Callable[..., Any], dtype: Any) -> str | None:
    """``any`` and ``all`` of booleans (a comparison's, ``isnull``'s) as their ``max`` and
    ``min``, absent cells False; None for any other."""
    from xarray.core import duck_array_ops

    if np.dtype(dtype) != np.bool_:
        return None
    return {duck_array_ops.array_any: "max", duck_array_ops.array_all: "min"}.get(func)


def _picks(func: Callable[..., Any]) -> bool:
    """Whether ``func`` picks a value or its position (no value to pick along an empty dim)."""
    from xarray.core import duck_array_ops

    picking = (duck_array_ops.argmax, duck_array_ops.argmin, duck_array_ops.median)
    return op_of(func) in ("max", "min") or func in picking


def _median() -> Any:
    from xarray.core import duck_array_ops

    return duck_array_ops.median


def _median_of(
    variable: Any, dim: Any, axis: Any, kwargs: dict[str, Any]
) -> tuple[tuple[Hashable, ...], Any] | None:
    """``median`` from the stored values (:mod:`~sporadik_dask.backend.order`), numpy's
    ``nanmedian`` with ``skipna`` (by default for floats), else its ``median``."""
    import dask

    from sporadik_dask.reduce.quantiles import Statistic

    axes = _axes_of(variable, dim, axis)
    extra = set(kwargs) - {"skipna", "numeric_only"}
    if not dask.config.get("sporadik.pushdown", True) or axes is None or extra:
        return None
    if variable.dtype.kind not in "biuf":
        return None
    skipna = kwargs.get("skipna")
    if skipna is None:
        skipna = variable.dtype.kind in "cfO"
    kept = tuple(a for a in range(variable.ndim) if a not in axes)
    data = order_data(variable, kept, Statistic(None, bool(skipna)))
    return None if data is None else (tuple(variable.dims[a] for a in kept), data)


def _aligned(data: Any, variable: Any, target: Any) -> Any:
    """A dask result in the chunks of the variable's kept axes, in dask's expression model:
    there an operation between arrays of unlike chunks fails (``X / X.sum("gene")``), where
    dask's graph model rechunks them itself."""
    held = variable._data
    if not EXPRESSIONS or not target.kept or not hasattr(data, "rechunk"):
        return data
    if not hasattr(held, "chunks") or held.chunks is None:
        return data
    return data.rechunk(tuple(held.chunks[a] for a in target.kept))


def _missing_below(data: Any, valid: Any, min_count: int, *, whole: bool) -> Any:
    """``data`` missing (NaN) where fewer than ``min_count`` values were not NaN, promoted as
    xarray's ``min_count`` promotes: along axes always (an integer sum becomes float64), over
    every axis only where a cell is missing."""
    from xarray.core import dtypes

    short = valid < min_count
    if whole:
        return where_filled(short, np.nan, data)
    dtype, fill = dtypes.maybe_promote(data.dtype)
    return where_filled(short, fill, data.astype(dtype))


def where_filled(condition: Any, fill: Any, data: Any) -> Any:
    """``np.where(condition, fill, data)``, block by block for dask arrays (dask's expression
    model has no ``where``); a numpy ``condition`` of ``data``'s rank is cut as ``data`` is,
    along the axes it does not broadcast."""
    import dask.array as da

    if not isinstance(condition, da.Array) and not isinstance(data, da.Array):
        return np.where(condition, fill, data)
    if not isinstance(condition, da.Array):
        cuts = zip(condition.shape, data.shape, data.chunks, strict=True)
        condition = da.from_array(condition, tuple(c if n == m else (n,) for n, m, c in cuts))
    dtype = np.result_type(np.asarray(fill), data.dtype)
    return da.map_blocks(_filled, data, condition, fill, dtype=dtype)  # data first: its chunks


def _filled(data: Any, condition: Any, fill: Any) -> Any:
    return np.where(condition, fill, data)


def pushed_data(
    variable: Any, target: Any, op: Any, skipna: bool, ddof: int, *, dense: bool
) -> Any:
    """``op`` into ``target`` from the store beneath ``variable``, or None if it has none."""
    from sporadik_dask.read.reductions import window_reduced
    from sporadik_dask.reduce.blocks import absent_value, reduce_coo, reduce_dask
    from sporadik_dask.reduce.spans import reduce_store_dask
    from sporadik_dask.reduce.store import reduce_store

    held = variable._data
    steps = recorded(held)
    if steps is not None:  # elementwise steps of a whole read: applied as the pass reads
        return _transformed_dask(steps, target, op, skipna, ddof, dense)
    if is_read_dask(held):
        source = reader_of(held)
        if isinstance(source, StoreReader):  # still a plain read of the whole store: its runs
            spans = math.prod(held.numblocks)
            return reduce_store_dask(
                source, op, target, spans, skipna=skipna, ddof=ddof, dense=dense
            )
        window = window_reduced(source, target, op, skipna=skipna, ddof=ddof, dense=dense)
        if window is not None:
            return window
        return reduce_dask(held, op, target, skipna=skipna, ddof=ddof, dense=dense)
    beneath = backend_under(held)
    if beneath.backend is not None and beneath.whole:  # the store's runs, in the view's order
        reader = beneath.backend.reader
        data = reduce_store(
            reader, op, _in_store(target, beneath.axes), skipna=skipna, ddof=ddof, dense=dense
        )
        return _in_view(data, target, beneath.axes)
    if beneath.backend is None and READER_KEY not in variable.encoding:
        return None
    if beneath.backend is not None:
        reduced = _selection_reduced(held, target, op, skipna=skipna, ddof=ddof, dense=dense)
        if reduced is not None:
            return reduced
        # the selection read as a sparse.COO, not kept: the variable stays lazy, so a step of
        # it after the reduction is of its dask read, as before it (X.isel(...) / total)
        selected = read_not_kept(held)
    else:  # held in memory (loaded): reduced the same way, so both give the same
        selected = variable.data
    if not hasattr(selected, "coords") or absent_value(selected) is not None:
        return None  # absent cells of another value (after X + 1): xarray's own path
    return reduce_coo(selected, op, target, skipna=skipna, ddof=ddof, dense=dense)


def _selection_reduced(
    held: Any, target: Any, op: Any, *, skipna: bool, ddof: int, dense: bool
) -> Any:
    """``op`` over a lazy selection of a store along one of its axes, in the store's one pass with
    the selection as a grouping: memory as for the whole store's reduction, where reading the
    selection first held all of it (docs/benchmarks.md, "Numbers behind the code's choices"). Along
    several axes, :func:`~sporadik_dask.reduce.selection.reduce_selection`. None for a position
    twice where it would be added twice, a transposed view, a sparse result of several axes, and for
    a selection estimated under ``sporadik.selection-read-values`` values: read, it costs what it
    selects.

    1. Selected along a kept axis: each selected position is a group of its own, in the order
       selected; with a groupby along that axis, each keeps its group.
    2. Selected along a reduced axis: the selected positions are one group, a kept axis of one
       position, dropped from the result.
    """
    from sporadik_dask.backend.array import outer_selection
    from sporadik_dask.read.selection import distinct
    from sporadik_dask.reduce.store import reduce_store
    from sporadik_dask.reduce.target import Grouping, Target

    outer = outer_selection(held)
    if outer is None or outer.axes != tuple(range(len(outer.axes))):
        return None
    along = [a for a in range(len(outer.axes)) if not outer.whole(a)]
    if not along:
        return None
    import dask

    from sporadik_dask.planning.budgets import SELECTION_READ_VALUES

    shape = outer.backend.shape
    reader = outer.backend.reader
    small = int(dask.config.get("sporadik.selection-read-values", SELECTION_READ_VALUES))
    share = math.prod(len(outer.positions[a]) / max(shape[a], 1) for a in along)
    if reader.description.nnz * share < small:
        return None
    if len(along) > 1:  # one axis grouped in the pass, the others picked from its fields
        from sporadik_dask.reduce.selection import reduce_selection

        if not dense:
            return None
        chosen = [p if a in along else None for a, p in enumerate(outer.positions)]
        return reduce_selection(reader, chosen, target, op, skipna=skipna, ddof=ddof)
    (axis,) = along
    picked = outer.positions[axis]  # a slice's a range: no array of the positions it spans
    if not isinstance(picked, range) and distinct(picked).size != picked.size:
        return None
    grouping = target.grouping
    if axis in target.axes:
        if grouping is not None:
            return None
        axes = tuple(a for a in target.axes if a != axis)
        grouped = Target(shape, axes, Grouping.picked(axis, shape[axis], picked, 0, 1))
    elif grouping is None:
        each = Grouping.picked(axis, shape[axis], picked, None, len(picked))
        grouped = Target(shape, target.axes, each)
    elif grouping.axis == axis and grouping.lookup is not None:  # the groupby's code of each
        kept = Grouping.picked(axis, shape[axis], picked, grouping.lookup, grouping.size)
        grouped = Target(shape, target.axes, kept)
    else:
        return None
    data = reduce_store(reader, op, grouped, skipna=skipna, ddof=ddof, dense=dense)
    return data.reshape(target.out_shape)


def _transformed_dask(
    steps: Recorded, target: Any, op: Any, skipna: bool, ddof: int, dense: bool
) -> Any:
    """``op`` of a read's elementwise steps, one pass over the store applying them."""
    import dask.array as da

    from sporadik_dask.reduce.elementwise import Transformed
    from sporadik_dask.reduce.spans import reduce_store_dask

    source = steps.source
    reader = Transformed(reader_of(source), steps.steps)
    vectors = [v if hasattr(v, "dask") else da.from_array(v, chunks=-1) for v in steps.vectors]
    spans = math.prod(source.numblocks)
    return reduce_store_dask(
        reader, op, target, spans, skipna=skipna, ddof=ddof, dense=dense, vectors=vectors
    )


def _in_store(target: Any, axes: tuple[int, ...]) -> Any:
    """``target`` of a view whose axis d is the store's axis ``axes[d]``, in the store's axes."""
    from sporadik_dask.reduce.target import Target

    if axes == tuple(range(len(axes))):
        return target
    shape = [0] * len(axes)
    for d, axis in enumerate(axes):
        shape[axis] = target.shape[d]
    grouping = target.grouping
    if grouping is not None:
        grouping = grouping._replace(axis=axes[grouping.axis])
    return Target(tuple(shape), tuple(sorted(axes[d] for d in target.axes)), grouping)


def _in_view(data: Any, target: Any, axes: tuple[int, ...]) -> Any:
    """A result over the store's kept axes (in the store's order), in the view's order."""
    in_store = sorted(axes[d] for d in target.kept)
    order = [in_store.index(axes[d]) for d in target.kept]
    return data if order == sorted(order) else data.transpose(order)
