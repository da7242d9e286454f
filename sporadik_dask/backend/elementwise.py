"""Elementwise steps of a store's dask read, recorded so that a reduction applies them as it reads.

dask builds ``X * 2``, ``np.log1p(X)``, ``X / X.sum("gene")`` of a read as new layers over its
blocks, and ``sparse`` computes each step of each block in its own kernels (about 10x numpy's
time on the same values). ``dask.array.core.elemwise`` (which dask's operators and
``__array_ufunc__`` call), ``dask.array.routines.elemwise`` (which ``where`` calls) and
``Array.astype`` are wrapped: the dask array they return is unchanged, and when it is a ufunc
(:data:`~sporadik_dask.reduce.elementwise.UFUNCS`) or a cast of a plain read, or of an array
recorded so, with scalars and vectors along one axis each, or a ``where`` of such arrays of one
read and scalars or vectors, the array also carries the steps (:class:`Recorded`). A reduction
of it then reads the store once and applies the steps to each batch of values
(:class:`~sporadik_dask.reduce.elementwise.Transformed`). Anything else done to the array (a
selection, a transpose) gives an array without the record, reduced block by block as before.

An operator or ufunc of a lazily opened variable would read it into memory first (xarray takes
``variable.data``): the variable, the whole store or a selection of it, not read yet, is handed
to it as its dask read instead, so ``X * 2`` is lazy and its reductions are one pass too (of a
selection: its blocks, reduced as under ``chunks=``).
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from sporadik_dask.reduce.elementwise import (
    VALUE,
    AbsentCellsError,
    Branch,
    Step,
    Steps,
    Vector,
    check_absent_zero,
    ufunc_of,
)

__all__ = [
    "Recorded",
    "chunking_first",
    "chunking_in_order",
    "chunking_labels",
    "chunking_unary",
    "recorded",
    "recording",
    "recording_cast",
    "steps_of",
]

#: The attribute of a dask array holding its :class:`Recorded` steps.
RECORD = "_sporadik_steps"


class Recorded(NamedTuple):
    """A plain read of a store and the elementwise steps that give a dask array from it."""

    #: The dask array reading the store (whole, one layout), before any step.
    source: Any
    steps: Steps
    #: The vector operands, numpy or dask arrays of one axis each (``steps.axes``).
    vectors: tuple[Any, ...]


def recorded(x: Any) -> Recorded | None:
    """The steps recorded on dask array ``x``, or None."""
    found = getattr(x, "__dict__", {}).get(RECORD)
    return found if isinstance(found, Recorded) else None


def recording(original: Callable[..., Any]) -> Callable[..., Any]:
    """``dask.array.core.elemwise``, its result carrying the steps when they can be recorded."""

    @functools.wraps(original)
    def elemwise(op: Any, *args: Any, **kwargs: Any) -> Any:
        of_a_read = ufunc_of(op) is not None and any(map(_of_a_read, args))
        result = original(AbsentCellsSaid(op) if of_a_read else op, *args, **kwargs)
        found = _record(op, args, kwargs, result)
        if found is not None:
            result.__dict__[RECORD] = found
        return result

    return elemwise


def _of_a_read(arg: Any) -> bool:
    from sporadik_dask.backend.ours import is_read_dask

    return is_read_dask(arg)


class AbsentCellsSaid:
    """``op`` of blocks read from a store, with ``sparse``'s refusal of a step whose absent
    cells would differ along a vector (a division by a total of 0 gives NaN in that cell's
    row, 0 elsewhere) raised as :class:`AbsentCellsError`, with what to do: a step left to the
    blocks (not recorded: of a selection, say) would otherwise fail with ``sparse``'s words."""

    __slots__ = ("op",)

    def __init__(self, op: Any) -> None:
        self.op = op

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.op(*args, **kwargs)
        except ValueError as error:
            if "mixed sparse-dense" not in str(error):
                raise
            name = getattr(self.op, "__name__", repr(self.op))
            raise AbsentCellsError(
                f"The elementwise step {name} gives the absent cells of a store's read values "
                "that differ along a vector (a division by a total of 0 gives NaN in an empty "
                "cell's row, 0 elsewhere): no sparse block can hold them. Divide by "
                "total.where(total > 0, 1) to leave empty cells at 0, as scanpy's "
                "normalize_total does, or select the cells with values first."
            ) from error

    def __dask_tokenize__(self) -> Any:
        from dask.base import tokenize

        return (type(self).__name__, tokenize(self.op))

    def __reduce__(self) -> Any:
        return (type(self), (self.op,))


def recording_cast(original: Callable[..., Any]) -> Callable[..., Any]:
    """``dask.array.Array.astype``, its result carrying the cast as a step when the array's
    steps are recorded (or it is a plain read)."""

    @functools.wraps(original)
    def astype(self: Any, dtype: Any, **kwargs: Any) -> Any:
        result = original(self, dtype, **kwargs)
        before = steps_of(self) if result is not self else None
        if before is not None:
            cast = Step(None, cast=np.dtype(result.dtype))
            steps = Steps(
                (*before.steps.steps, cast),
                np.dtype(result.dtype),
                before.steps.source,
                before.steps.axes,
            )
            result.__dict__[RECORD] = Recorded(before.source, steps, before.vectors)
        return result

    return astype


def _record(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
    """The :class:`Recorded` steps of ``result = op(*args)``, or None."""
    if op is np.where and len(args) == 3 and not kwargs:
        return _record_where(args, result)
    ufunc = ufunc_of(op)
    if ufunc is None or ufunc.nout != 1 or len(args) != ufunc.nin:
        return None
    if kwargs.get("out") is not None or kwargs.get("where", True) is not True:
        return None
    if set(kwargs) - {"out", "where", "dtype", "name"}:
        return None
    prior = [p for p in map(steps_of, args) if p is not None]
    if len(prior) != 1 or tuple(result.shape) != tuple(prior[0].source.shape):
        return None
    (before,) = prior
    vectors = list(before.vectors)
    axes = list(before.steps.axes)
    operands: list[Any] = []
    for arg in args:
        if steps_of(arg) is not None:
            operands.append(VALUE)
            continue
        operand = _operand(arg, result.shape)
        if operand is None:
            return None
        if isinstance(operand, tuple):  # (axis, vector)
            axis, vector = operand
            operands.append(Vector(len(vectors), axis))
            vectors.append(vector)
            axes.append(axis)
        else:
            operands.append(operand)
    steps = Steps(
        (*before.steps.steps, Step(ufunc, tuple(operands))),
        np.dtype(result.dtype),
        before.steps.source,
        tuple(axes),
    )
    try:  # vectors of 1 stand in for the vectors not computed yet: X / s + 1 is not recorded
        check_absent_zero(steps, [np.ones(1, getattr(v, "dtype", float)) for v in vectors])
    except AbsentCellsError:
        return None
    return Recorded(before.source, steps, tuple(vectors))


def _record_where(args: tuple[Any, ...], result: Any) -> Any:
    """The :class:`Recorded` steps of ``result = np.where(*args)`` when the arrays among its
    operands are steps of one read (``xr.where(X > 0, X, 0)``): each a :class:`Branch` of the
    stored values, its vectors renumbered after the others'; else None."""
    prior = [p for p in map(steps_of, args) if p is not None]
    if not prior or len({p.source.name for p in prior}) != 1:
        return None
    source = prior[0].source
    if tuple(result.shape) != tuple(source.shape):
        return None
    vectors: list[Any] = []
    axes: list[int] = []
    operands: list[Any] = []
    for arg in args:
        found = steps_of(arg)
        if found is None:
            operand = _operand(arg, result.shape)
            if operand is None:
                return None
            if isinstance(operand, tuple):  # (axis, vector)
                operands.append(Vector(len(vectors), operand[0]))
                vectors.append(operand[1])
                axes.append(operand[0])
            else:
                operands.append(operand)
            continue
        operands.append(
            Branch(_renumbered(found.steps, len(vectors))) if found.steps.steps else VALUE
        )
        vectors.extend(found.vectors)
        axes.extend(found.steps.axes)
    source_dtype = np.dtype(source.dtype)
    steps = Steps(
        (Step(None, tuple(operands), select=True),),
        np.dtype(result.dtype),
        source_dtype,
        tuple(axes),
    )
    try:
        check_absent_zero(steps, [np.ones(1, getattr(v, "dtype", float)) for v in vectors])
    except AbsentCellsError:
        return None
    return Recorded(source, steps, tuple(vectors))


def _renumbered(steps: Steps, offset: int) -> Steps:
    """``steps`` with each vector operand's number moved by ``offset`` (its branches' too)."""

    def moved(operand: Any) -> Any:
        if isinstance(operand, Vector):
            return Vector(operand.number + offset, operand.axis)
        if isinstance(operand, Branch):
            return Branch(_renumbered(operand.steps, offset))
        return operand

    renumbered = tuple(
        Step(step.ufunc, tuple(map(moved, step.operands)), step.cast, step.select)
        for step in steps.steps
    )
    return Steps(renumbered, steps.dtype, steps.source, steps.axes)


def steps_of(arg: Any) -> Recorded | None:
    """``arg``'s recorded steps, none yet for a plain read of a whole store, else None: what a
    pass over the store that applies them needs."""
    found = recorded(arg)
    if found is not None:
        return found
    from sporadik_dask.backend.ours import is_read_dask
    from sporadik_dask.read import StoreReader
    from sporadik_dask.read.blocks import reader_of

    if not is_read_dask(arg) or not isinstance(reader_of(arg), StoreReader):
        return None
    return Recorded(arg, Steps((), np.dtype(arg.dtype), np.dtype(arg.dtype)), ())


def _operand(arg: Any, shape: tuple[int, ...]) -> Any:
    """A scalar operand as it is, a vector as ``(axis, 1-D vector)``; None for anything else."""
    if isinstance(arg, (numbers.Number, np.generic)):
        return arg
    arg_shape = getattr(arg, "shape", None)
    if arg_shape is None or not hasattr(arg, "dtype") or len(arg_shape) > len(shape):
        return None
    if type(getattr(arg, "_meta", arg)) is not np.ndarray:
        return None  # a sparse or other duck array, or dask blocks of one: left to dask
    full = (1,) * (len(shape) - len(arg_shape)) + tuple(arg_shape)
    varying = [a for a, n in enumerate(full) if n != 1]
    if not varying:
        if hasattr(arg, "dask"):
            return None
        return np.asarray(arg).reshape(())
    if len(varying) != 1 or full[varying[0]] != shape[varying[0]]:
        return None
    return varying[0], arg.reshape(-1)


def chunking_first(original: Callable[..., Any]) -> Callable[..., Any]:
    """``xarray.core.variable._broadcast_compat_data`` (a binary operator's operands) or
    ``xarray.computation.apply_ufunc.broadcast_compat_data`` (a ufunc's), with a lazily opened
    store's variable made a dask read of it first, so that the step is recorded as any dask
    read's, where xarray would read the whole store into memory to apply it."""

    @functools.wraps(original)
    def broadcast_compat_data(variable: Any, *args: Any, **kwargs: Any) -> Any:
        return original(_as_read(variable), *(_as_read(a) for a in args), **kwargs)

    return broadcast_compat_data


def chunking_in_order(original: Callable[..., Any]) -> Callable[..., Any]:
    """``xarray.computation.apply_ufunc.broadcast_compat_data`` (a ufunc's operands, and
    ``xr.dot``'s), as :func:`chunking_first`, with a store's dask read put first in the order the
    function takes by its own ``transpose``: under dask's expression model, xarray's
    ``duck_array_ops.transpose`` asks numpy, which that model's arrays refuse (NEP-18)."""

    @functools.wraps(original)
    def broadcast_compat_data(variable: Any, broadcast_dims: Any, core_dims: Any) -> Any:
        from sporadik_dask.backend.ours import is_read_dask
        from sporadik_dask.read.dask_model import EXPRESSIONS

        variable = _as_read(variable)
        if EXPRESSIONS and is_read_dask(variable._data):
            order = (*(d for d in broadcast_dims if d in variable.dims), *core_dims)
            if set(order) == set(variable.dims):
                variable = variable.transpose(*order)
        return original(variable, broadcast_dims, core_dims)

    return broadcast_compat_data


def chunking_unary(original: Callable[..., Any]) -> Callable[..., Any]:
    """``DataArray._unary_op`` (``-X``, ``abs(X)``) of a lazily opened store, as of its dask
    read."""

    @functools.wraps(original)
    def _unary_op(self: Any, *args: Any, **kwargs: Any) -> Any:
        read = _as_read(self.variable)
        return original(self if read is self.variable else self._replace(read), *args, **kwargs)

    return _unary_op


def chunking_labels(original: Callable[..., Any]) -> Callable[..., Any]:
    """xarray's ``_calc_idxminmax`` (``idxmax``, ``idxmin``) of a store's variable: a lazily
    opened one as of its dask read, a loaded one's labels made dense.

    xarray takes the labels in the variable's array type (``to_like_array(coord, array.data)``):
    of a lazily opened variable of integers that reads the whole store into one ``sparse.COO``,
    and of it or a loaded one the labels come back as a ``sparse.COO``, which ``.values`` and
    ``to_pandas`` refuse."""

    @functools.wraps(original)
    def _calc_idxminmax(*, array: Any, **kwargs: Any) -> Any:
        from sporadik_dask.backend.ours import is_sporadik_variable

        if not is_sporadik_variable(array.variable):
            return original(array=array, **kwargs)
        read = _as_read(array.variable)
        result = original(array=array if read is array.variable else array._replace(read), **kwargs)
        if type(result.data).__module__.startswith("sparse") and hasattr(result.data, "todense"):
            result = result.copy(data=result.data.todense())
        return result

    return _calc_idxminmax


def _as_read(variable: Any) -> Any:
    """A lazily opened store's variable (whole or a selection), not read yet, as a variable of
    its dask read in the blocks it prefers; anything else as it is."""
    import dask
    from xarray import Variable
    from xarray.namedarray.utils import is_duck_array

    from sporadik_dask.backend.array import backend_under

    if not isinstance(variable, Variable) or is_duck_array(variable._data):
        return variable
    if not dask.config.get("sporadik.pushdown", True):
        return variable
    beneath = backend_under(variable._data)
    if beneath.backend is None:
        return variable
    return variable.chunk("auto")
