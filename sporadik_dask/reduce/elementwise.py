"""Elementwise steps applied to a store's values as a reduction reads them.

``np.log1p(X / X.sum("gene") * 1e4).mean("cell")`` reads the store once: the steps (ufuncs of
the value with scalars and with vectors along one axis each) are applied to each batch of runs'
values as it is read, in numpy, before the batch is added up, where ``sparse``'s elementwise
kernels would make a new array of every block at each step. Only the stored values are
transformed, so the steps must leave the absent cells at 0 (``X * 2``, ``np.log1p``, ``X > 0``):
a step that fills them (``X + 1``) is not taken here, and its blocks count every absent cell as
its value, as they always did.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.format.errors import SporadikError
from sporadik_dask.reduce.layout import index_coords

__all__ = [
    "UFUNCS",
    "VALUE",
    "AbsentCellsError",
    "Branch",
    "Step",
    "Steps",
    "Transformed",
    "Vector",
    "check_absent_zero",
    "evaluate",
    "ufunc_of",
]

#: The ufuncs applied to stored values (their numpy names).
_NAMES = (
    *("add", "subtract", "multiply", "true_divide", "power", "negative", "absolute", "sign"),
    *("sqrt", "square", "log1p", "expm1", "sin", "tanh", "arcsinh", "rint", "floor", "ceil"),
    *("trunc", "minimum", "maximum", "fmin", "fmax", "greater", "greater_equal", "less"),
    *("less_equal", "equal", "not_equal"),
)

#: The ufuncs applied to stored values, and the operators that stand for them.
UFUNCS: dict[Any, np.ufunc] = {
    **{getattr(np, name): getattr(np, name) for name in _NAMES},
    operator.add: np.add,
    operator.sub: np.subtract,
    operator.mul: np.multiply,
    operator.truediv: np.true_divide,
    operator.pow: np.power,
    operator.neg: np.negative,
    operator.abs: np.absolute,
    operator.gt: np.greater,
    operator.ge: np.greater_equal,
    operator.lt: np.less,
    operator.le: np.less_equal,
    operator.eq: np.equal,
    operator.ne: np.not_equal,
}


def ufunc_of(func: Callable[..., Any]) -> np.ufunc | None:
    """The ufunc ``func`` is or stands for, if applied here; else None."""
    try:
        return UFUNCS.get(func)
    except TypeError:  # unhashable
        return None


class _Value:
    """The value being transformed, as an operand of a step."""

    def __repr__(self) -> str:
        return "VALUE"

    def __reduce__(self) -> str:
        return "VALUE"


#: The operand standing for the value being transformed.
VALUE = _Value()


@dataclass(frozen=True)
class Vector:
    """An operand that varies along one axis: the ``number``-th vector of the steps."""

    number: int
    axis: int


@dataclass(frozen=True)
class Branch:
    """An operand made from the stored values by steps of its own: a ``where``'s condition or
    choice (``xr.where(X > 0, np.log1p(X), 0)``), its vectors numbered among the steps'."""

    steps: Steps


Operand = Any  # VALUE, a numpy scalar, a Vector or a Branch


@dataclass(frozen=True)
class Step:
    """One ufunc and its operands, one of which is :data:`VALUE` (or a :class:`Branch`); with
    no ufunc, a cast of the value to ``cast`` (``astype``), or, with ``select``, numpy's
    ``where`` of its three operands."""

    ufunc: np.ufunc | None
    operands: tuple[Operand, ...] = (VALUE,)
    cast: np.dtype[Any] | None = None
    select: bool = False

    def __call__(self, args: list[Any]) -> Any:
        """The step on its operands' values."""
        if self.select:
            return np.where(*args)
        if self.ufunc is None:
            (value,) = args
            return np.asarray(value).astype(self.cast)
        return self.ufunc(*args)


@dataclass(frozen=True)
class Steps:
    """Ufuncs applied in turn, each to the value so far and operands; then ``dtype``.

    Not a tuple: dask would take a tuple starting with a ufunc in a task for a task itself."""

    #: The steps in the order applied.
    steps: tuple[Step, ...]
    #: The values' dtype after the last step, as numpy (and dask's meta) gives it.
    dtype: np.dtype[Any]
    #: The stored values' dtype, before the first step.
    source: np.dtype[Any]
    #: The axis of each vector operand, in the order the operands index them.
    axes: tuple[int, ...] = ()


def evaluate(
    steps: Steps,
    values: npt.NDArray[Any],
    vector_values: Sequence[npt.NDArray[Any]],
) -> npt.NDArray[Any]:
    """Every step applied to ``values``; vector operands are given already at each value (or,
    for :func:`check_absent_zero`, as whole vectors broadcast against a scalar value)."""
    out: Any = values
    with np.errstate(all="ignore"):
        for step in steps.steps:
            args = [_operand_values(o, out, values, vector_values) for o in step.operands]
            out = step(args)
    return np.asarray(out).astype(steps.dtype, copy=False)


def _operand_values(
    operand: Operand,
    value: Any,
    stored: npt.NDArray[Any],
    vector_values: Sequence[npt.NDArray[Any]],
) -> Any:
    """An operand's values: the value so far, a vector's at each value, a branch's steps
    applied to the stored values, or a scalar as it is."""
    if operand is VALUE:
        return value
    if isinstance(operand, Vector):
        return vector_values[operand.number]
    if isinstance(operand, Branch):
        return evaluate(operand.steps, stored, vector_values)
    return operand


class AbsentCellsError(SporadikError):
    """Elementwise steps would put values other than 0 in a store's absent cells."""


def check_absent_zero(steps: Steps, vectors: Sequence[npt.NDArray[Any]]) -> None:
    """Raise unless the steps leave every absent cell at 0 with these vectors.

    The zero is carried step by step: a result that is 0 everywhere is a scalar 0 again, so
    vectors along different axes never make the outer product; a nonzero result meeting a vector
    along another axis is refused (it could not be checked without it).
    """
    state, _ = _absent(steps, vectors, steps)
    if np.any(state != 0):
        _refuse(steps, state)


def _absent(steps: Steps, vectors: Sequence[npt.NDArray[Any]], whole: Steps) -> tuple[Any, Any]:
    """What the steps give an absent cell: a value (0-d, or along one axis of the vectors) and
    that axis (None for 0-d); :func:`check_absent_zero`'s refusal of ``whole`` when two axes
    meet in a value not 0."""
    state: Any = np.zeros((), dtype=steps.source)
    along: int | None = None
    with np.errstate(all="ignore"):
        for step in steps.steps:
            args: list[Any] = []
            axes: list[int | None] = []
            for o in step.operands:
                axis: int | None
                if isinstance(o, Vector):
                    value, axis = vectors[o.number], o.axis
                elif isinstance(o, Branch):
                    value, axis = _absent(o.steps, vectors, whole)
                elif o is VALUE:
                    value, axis = state, along
                else:
                    value, axis = o, None
                args.append(value)
                axes.append(axis)
            found = {a for a in axes if a is not None}
            if len(found) > 1:
                _refuse(whole, state)
            state, along = np.asarray(step(args)), next(iter(found), None)
            if not np.any(state != 0):  # NaN != 0 too
                state, along = np.zeros((), state.dtype), None
    return state, along


def _refuse(steps: Steps, state: Any) -> None:
    bad = np.flatnonzero(np.ravel(state != 0))
    at = f" at position {int(bad[0])} of its axis" if state.ndim and bad.size else ""
    value = np.ravel(state)[bad[0]] if bad.size else state
    raise AbsentCellsError(
        f"The elementwise steps {_spelled(steps)} give {value!r} in the absent cells{at}, not "
        "0: the stored values alone would be reduced and every absent cell miscounted. A "
        "division by a total of 0 (an empty cell) does this: divide by "
        "total.where(total > 0, 1) to leave empty cells at 0, or select the cells with values "
        "first."
    )


def _spelled(steps: Steps) -> str:
    return " then ".join(
        "where"
        if step.select
        else (f"astype({step.cast})" if step.ufunc is None else step.ufunc.__name__)
        for step in steps.steps
    )


class Transformed:
    """A store's reader whose runs' values come with the steps applied: a reduction's pass
    reads through it as through the reader itself (its ``dtype`` is the steps').

    Each value's vector operands are taken at its coordinates: along the layout's indexed axis
    by its run's position (found from the run's start among the layout's), along the other axes
    from its index.
    """

    def __init__(self, reader: Any, steps: Steps, vectors: Sequence[npt.NDArray[Any]] = ()) -> None:
        self.reader = reader
        self.steps = steps
        self.vectors = tuple(np.asarray(v).reshape(-1) for v in vectors)
        if len(self.vectors) == len(steps.axes):  # else a graph's: the vectors come in a task
            check_absent_zero(steps, self.vectors)
        self._starts: dict[str, npt.NDArray[np.int64]] = {}

    @classmethod
    def made(cls, reader: Any, steps: Steps, *vectors: Any) -> Transformed:
        """As the constructor, with the vectors as separate arguments (a task's inputs)."""
        return cls(reader, steps, vectors)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("reader", "steps", "vectors", "_starts"):
            raise AttributeError(name)
        return getattr(self.reader, name)

    def __getstate__(self) -> dict[str, Any]:
        return {"reader": self.reader, "steps": self.steps, "vectors": self.vectors}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.reader, self.steps, self.vectors = state["reader"], state["steps"], state["vectors"]
        self._starts = {}

    def __dask_tokenize__(self) -> Any:
        from dask.base import tokenize

        return ("sporadik-transformed", tokenize(self.reader, self.steps, *self.vectors))

    @property
    def dtype(self) -> np.dtype[Any]:
        """The values' dtype after the steps."""
        return self.steps.dtype

    def runs(self, layout: Any, lo: Any, hi: Any, *, as_stored: bool = False) -> Any:
        """The reader's runs, their values transformed."""
        indices, values = self.reader.runs(layout, lo, hi, as_stored=as_stored)
        return indices, self._applied(layout, lo, hi, indices, values)

    def run_values(self, layout: Any, lo: Any, hi: Any) -> Any:
        """The reader's run values, transformed (with their indices read when a vector lies
        along an axis the indices give)."""
        if any(axis != layout.indexed_axis for axis in self.steps.axes):
            return self.runs(layout, lo, hi)[1]
        values = self.reader.run_values(layout, lo, hi)
        return self._applied(layout, lo, hi, None, values)

    def _applied(self, layout: Any, lo: Any, hi: Any, indices: Any, values: Any) -> Any:
        at = []
        coords: list[Any] | None = None
        for vector, axis in zip(self.vectors, self.steps.axes, strict=True):
            if axis == layout.indexed_axis:
                at.append(np.repeat(vector[self._positions(layout, lo)], hi - lo))
                continue
            if coords is None:
                coords = index_coords(len(self.reader.shape), layout, indices)
            at.append(vector[coords[axis]])
        return evaluate(self.steps, np.asarray(values), at)

    def _positions(self, layout: Any, lo: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The position of each run starting at ``lo`` (for runs with values: an empty run's
        position is never used)."""
        starts = self._starts.get(layout.path)
        if starts is None:
            every = np.arange(layout.positions, dtype=np.int64)
            ((starts, _),) = self.reader.brackets([(layout, every)])
            self._starts[layout.path] = starts
        found: npt.NDArray[np.int64] = np.searchsorted(starts, lo, side="right") - 1
        return found
