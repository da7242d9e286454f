"""Fields of a reduction: the partial sums, counts, extremes and moments per output cell that
pieces merge into one result.

``sparse``'s reductions over any axis but the last re-sort every chunk, its ``nansum`` (what
xarray's default ``skipna`` calls on float data) builds a dense ``zeros_like`` and a three-way
``where``, and its kernels are compiled in every process. A reduction of a sparse array needs none
of that: each stored value adds into the output cell its kept coordinates name, and the implicit
zeros are known by count (cells per output cell minus values stored there). So every reduction
here is a few ``bincount`` passes over values and coordinates:

1. Per output cell, accumulate the *fields* the reduction needs: the sum of the values (NaN left
   out under ``skipna``), how many values are stored, how many are NaN, the largest or smallest
   stored value; for a variance, the stored values' count, mean and sum of squared deviations
   from it (``m2``), never a sum of squares, whose difference with ``n * mean**2`` loses every
   digit when the mean is large against the spread.
2. Fields of pieces (dask blocks, batches of a layout's runs) combine by adding, by ``max``, or
   for the moments by Chan's formula (dask's ``moment_combine``).
3. The result follows from the fields and the number of cells each output cell covers, with
   numpy's dtypes and NaN semantics; the implicit zeros join the moments as one more piece.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

__all__ = [
    "MOMENTS",
    "OPS",
    "Fields",
    "Op",
    "accumulator_dtype",
    "combine_moments",
    "fields_of",
    "finish",
    "merge",
    "merge_along",
    "merge_into",
    "needed_fields",
    "reduced_axes",
    "refuse_empty",
    "result_dtype",
    "supported",
    "widened",
]


Op = Literal["sum", "mean", "max", "min", "count", "var", "std"]


#: The reductions computed here; anything else takes xarray's own path.
OPS: tuple[Op, ...] = ("sum", "mean", "max", "min", "count", "var", "std")


Fields = dict[str, npt.NDArray[Any]]


#: The fields of a variance: how many values, their mean, and the sum of their squared
#: deviations from it, merged only together (:func:`combine_moments`).
MOMENTS = ("stored", "mean", "m2")


def needed_fields(op: Op) -> tuple[str, ...]:
    if op == "sum":
        return ("total", "nans")
    if op in ("max", "min"):
        return (op, "stored", "nans")
    if op in ("var", "std"):
        return (*MOMENTS, "nans")
    return ("total", "nans") if op == "mean" else ("nans",)


def reduced_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """``axis`` (an int or a sequence of them) as sorted axes of an array of ``ndim`` axes,
    refused as numpy refuses it: an axis past either end is an ``AxisError``, a repeated one a
    ``ValueError``. Taking it modulo ``ndim`` would reduce another axis without a word."""
    chosen = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    axes = []
    for a in chosen:
        a = operator.index(a)
        if not -ndim <= a < ndim:
            raise np.exceptions.AxisError(a, ndim)
        axes.append(a % ndim)
    if len(set(axes)) != len(axes):
        raise ValueError("duplicate value in 'axis'")
    return tuple(sorted(axes))


def refuse_empty(op: str, shape: Sequence[int], axes: Sequence[int]) -> None:
    """Raises numpy's ``ValueError`` for a maximum or minimum over an axis of no position:
    with no value, the result would be made up (0, -1, NaN by dtype)."""
    if op in ("max", "min") and any(shape[a] == 0 for a in axes):
        name = "maximum" if op == "max" else "minimum"
        raise ValueError(f"zero-size array to reduction operation {name} which has no identity")


def result_dtype(op: Op, dtype: np.dtype[Any]) -> np.dtype[Any]:
    """numpy's result dtype for ``op`` over values of ``dtype``."""
    if op == "count":
        return np.dtype(np.int64)
    reduce: Any = getattr(np, op)
    result: np.dtype[Any] = np.dtype(reduce(np.ones(1, dtype=dtype)).dtype)
    return result


def supported(op: str, dtype: np.dtype[Any]) -> bool:
    """Whether ``op`` over values of ``dtype`` is computed here (else xarray's own path)."""
    if op not in OPS or dtype.kind not in "biufc":
        return False
    return not (op in ("max", "min") and dtype.kind == "c")


def accumulator_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    if dtype.kind == "c":
        return np.dtype(np.complex128)
    if dtype.kind == "f":
        return np.dtype(np.float64)
    return np.dtype(np.uint64 if dtype.kind == "u" else np.int64)


def _add_into(size: int, where: npt.NDArray[np.int64], values: npt.NDArray[Any]) -> Any:
    """Sums of ``values`` by ``where`` into ``size`` cells, exact for integers."""
    accumulator = accumulator_dtype(values.dtype)
    if accumulator.kind in "fc":  # bincount of nothing gives int64, whatever the weights
        real = np.bincount(where, weights=values.real, minlength=size).astype(np.float64)
        if accumulator.kind == "f":
            return real
        return real + 1j * np.bincount(where, weights=values.imag, minlength=size)
    out = np.zeros(size, dtype=accumulator)
    np.add.at(out, where, values.astype(accumulator, copy=False))
    return out


def widened(op: Op, values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Integer values as float64 for a mean, variance or deviation, as numpy accumulates them:
    their totals in int64 would wrap (int64 values near 2**62, the squares of int32 values near
    2**31) and give 0 where numpy gives the mean."""
    if op in ("mean", "var", "std") and values.dtype.kind in "biu":
        return values.astype(np.float64)
    return values


def fields_of(
    op: Op,
    where: npt.NDArray[np.int64],
    values: npt.NDArray[Any],
    size: int,
    *,
    skipna: bool,
) -> Fields:
    """The fields ``op`` needs, per output cell, from values stored at output cells ``where``."""
    needs = needed_fields(op)
    values = widened(op, values)
    nan = np.isnan(values) if values.dtype.kind in "fc" else None
    fields: Fields = {}
    if nan is not None and nan.any():
        fields["nans"] = np.bincount(where[nan], minlength=size)
        if skipna:
            where, values = where[~nan], values[~nan]
    else:
        fields["nans"] = np.zeros(size, dtype=np.int64)
    if "total" in needs:
        fields["total"] = _add_into(size, where, values)
    if "m2" in needs:  # two passes over values in memory: the mean, then deviations from it
        fields.update(zip(MOMENTS, _moments_of(size, where, values), strict=True))
    elif "stored" in needs:
        fields["stored"] = np.bincount(where, minlength=size)
    if op in ("max", "min"):
        ufunc = np.maximum if op == "max" else np.minimum
        if values.dtype.kind == "f":
            extreme = np.full(size, -np.inf if op == "max" else np.inf)
        else:  # integers and booleans, exact past 2**53; unsigned ones past 2**63
            limits = np.iinfo(np.uint64 if values.dtype.kind == "u" else np.int64)
            extreme = np.full(size, limits.min if op == "max" else limits.max, limits.dtype)
        ufunc.at(extreme, where, values.astype(extreme.dtype, copy=False))
        fields[op] = extreme
    return fields


def _moments_of(
    size: int, where: npt.NDArray[np.int64], values: npt.NDArray[Any]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any], npt.NDArray[np.float64]]:
    """The count, mean and sum of squared deviations of the values landing in each cell."""
    stored = np.bincount(where, minlength=size)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(stored > 0, _add_into(size, where, values) / stored, 0)
    deviation = values.astype(mean.dtype, copy=False) - mean[where]
    m2 = _add_into(size, where, (deviation * np.conj(deviation)).real)
    return stored, mean, m2


def combine_moments(
    stored: npt.NDArray[Any], mean: npt.NDArray[Any], m2: npt.NDArray[Any], axis: Any
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any], npt.NDArray[np.float64]]:
    """The moments of pieces laid along ``axis``, combined by Chan's formula: the counts add,
    the mean is the pieces' means weighted by their counts, and each piece's mean's distance
    from it adds its count times its square to the pieces' ``m2``s. Every term is a deviation,
    so nothing cancels. A piece of no value has mean 0 and adds nothing."""
    count = stored.sum(axis=axis, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        weighted = np.where(stored > 0, stored * mean, 0).sum(axis=axis, keepdims=True)
        overall = np.where(count > 0, weighted / count, 0)
        # a lone piece keeps its own mean exactly (an infinite one included)
        alone = (stored > 0).sum(axis=axis, keepdims=True) == 1
        only = np.where(stored > 0, mean, 0).sum(axis=axis, keepdims=True)
        overall = np.where(alone, only, overall)
        apart = np.where(stored > 0, mean - overall, 0)
        spread = np.where(stored > 0, m2 + stored * (apart * np.conj(apart)).real, 0)
    return count, overall, spread.sum(axis=axis, keepdims=True).real


def merge_into(into: Fields, part: Fields) -> Fields:
    """``part``'s fields added (or max'd, min'd, the moments combined) into ``into``'s, in
    place."""
    with_moments = "m2" in part
    for name, array in part.items():
        if with_moments and name in MOMENTS:
            continue
        ufunc = {"max": np.maximum, "min": np.minimum}.get(name, np.add)
        ufunc(into[name], array, out=into[name])
    if with_moments:
        stored, mean, m2 = (np.stack((into[name], part[name])) for name in MOMENTS)
        for name, array in zip(MOMENTS, combine_moments(stored, mean, m2, 0), strict=True):
            into[name][...] = array[0]
    return into


def merge_along(fields: Fields, axis: int) -> Fields:
    """Fields of neighbouring cells along ``axis`` combined into one cell there (the axis kept,
    of length one): sums add, extremes compare, moments by Chan's formula."""
    merged: Fields = {}
    with_moments = "m2" in fields
    for name, array in fields.items():
        if with_moments and name in MOMENTS:
            continue
        ufunc = {"max": np.maximum, "min": np.minimum}.get(name, np.add)
        merged[name] = ufunc.reduce(array, axis=axis, keepdims=True)
    if with_moments:
        stored, mean, m2 = (fields[name] for name in MOMENTS)
        moments = combine_moments(stored, mean, m2, axis)
        merged.update(zip(MOMENTS, moments, strict=True))
    return merged


def merge(op: Op, parts: Sequence[Fields]) -> Fields:
    """Fields of several pieces over the same output cells, combined into new arrays."""
    merged = {name: array.copy() for name, array in parts[0].items()}
    for part in parts[1:]:
        merge_into(merged, part)
    return merged


def finish(
    op: Op,
    fields: Fields,
    cells: int | npt.NDArray[np.int64],
    dtype: np.dtype[Any],
    *,
    skipna: bool,
    ddof: int = 0,
) -> npt.NDArray[Any]:
    """The reduction from its fields, each output cell covering ``cells`` cells of the input.

    Implicit zeros count as values: a mean divides by every cell, a maximum is at least 0 where
    any cell of the output cell holds no stored value.
    """
    out_dtype = result_dtype(op, dtype)
    nans = fields["nans"]
    if op == "count":
        return (cells - nans).astype(out_dtype)
    valid = cells - nans if skipna else cells + np.zeros_like(nans)
    poisoned = (nans > 0) if not skipna else np.zeros(nans.shape, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        if op == "sum":
            result = fields["total"]
        elif op == "mean":
            result = fields["total"] / valid
        elif op in ("var", "std"):
            result = _spread(fields, valid) / np.maximum(valid - ddof, 0)
            if skipna:  # numpy's nanvar: no degree of freedom left is missing, not infinite
                result = np.where(valid - ddof > 0, result, np.nan)
            if op == "std":
                result = np.sqrt(result)
        else:
            result = fields[op].astype(np.float64 if dtype.kind == "f" else fields[op].dtype)
            # implicit zeros where fewer values are stored (NaN included) than cells covered
            gaps = fields["stored"] + (nans if skipna else 0) < cells
            pick = np.maximum if op == "max" else np.minimum
            result = np.where(gaps, pick(result, np.zeros((), dtype=result.dtype)), result)
            if dtype.kind == "f":
                result = np.where(valid > 0, result, np.nan)
        if dtype.kind in "fc":
            # a NaN the values carried stays as numpy leaves it (a complex one keeps its
            # imaginary part); absent cells of NaN, which the values do not carry, poison here
            result = np.where(poisoned & ~np.isnan(result), np.nan, result)
    return np.asarray(result).astype(out_dtype, copy=False)


def _spread(fields: Fields, valid: Any) -> Any:
    """The sum of squared deviations over ``valid`` cells per output cell: the stored values'
    moments joined by those of the implicit zeros (``valid - stored`` cells of mean 0)."""
    stored, mean = fields["stored"], fields["mean"]
    zeros = valid - stored
    with np.errstate(divide="ignore", invalid="ignore"):
        joined = (mean * np.conj(mean)).real * (stored * zeros / np.maximum(valid, 1))
    return fields["m2"] + np.where(zeros > 0, joined, 0)
