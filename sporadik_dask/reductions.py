"""Reductions as xarray users write them, at the cost of one pass over the values.

``sparse``'s reductions over any axis but the last re-sort every chunk, its ``nansum`` (what
xarray's default ``skipna`` calls on float data) builds a dense ``zeros_like`` and a three-way
``where``, and its kernels are compiled in every process. A reduction of a sparse array needs none
of that: each stored value adds into the output cell its kept coordinates name, and the implicit
zeros are known by count (cells per output cell minus values stored there). So every reduction
here is a few ``bincount`` passes over values and coordinates:

1. Per output cell, accumulate the *fields* the reduction needs: the sum of the values (NaN left
   out under ``skipna``), the sum of squares, how many values are stored, how many are NaN, the
   largest or smallest stored value.
2. Fields of pieces (dask blocks, batches of a layout's runs) combine by adding, or by ``max``.
3. The result follows from the fields and the number of cells each output cell covers, with
   numpy's dtypes and NaN semantics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

__all__ = ["OPS", "Op", "fields_of", "finish", "merge", "result_dtype"]

Op = Literal["sum", "mean", "max", "min", "count", "var", "std"]
#: The reductions computed here; anything else takes xarray's own path.
OPS: tuple[Op, ...] = ("sum", "mean", "max", "min", "count", "var", "std")

Fields = dict[str, npt.NDArray[Any]]


def _needs(op: Op) -> tuple[str, ...]:
    if op == "sum":
        return ("total", "nans")
    if op in ("max", "min"):
        return (op, "stored", "nans")
    if op in ("var", "std"):
        return ("total", "squares", "nans")
    return ("total", "nans") if op == "mean" else ("nans",)


def result_dtype(op: Op, dtype: np.dtype[Any]) -> np.dtype[Any]:
    """numpy's result dtype for ``op`` over values of ``dtype``."""
    if op == "count":
        return np.dtype(np.int64)
    reduce: Any = getattr(np, op)
    return np.dtype(reduce(np.ones(1, dtype=dtype)).dtype)


def _accumulator(dtype: np.dtype[Any]) -> np.dtype[Any]:
    if dtype.kind == "c":
        return np.dtype(np.complex128)
    if dtype.kind == "f":
        return np.dtype(np.float64)
    return np.dtype(np.uint64 if dtype.kind == "u" else np.int64)


def _add_into(size: int, where: npt.NDArray[np.int64], values: npt.NDArray[Any]) -> Any:
    """Sums of ``values`` by ``where`` into ``size`` cells, exact for integers."""
    accumulator = _accumulator(values.dtype)
    if accumulator.kind == "f":
        return np.bincount(where, weights=values, minlength=size)
    if accumulator.kind == "c":
        real = np.bincount(where, weights=values.real, minlength=size)
        return real + 1j * np.bincount(where, weights=values.imag, minlength=size)
    out = np.zeros(size, dtype=accumulator)
    np.add.at(out, where, values.astype(accumulator, copy=False))
    return out


def fields_of(
    op: Op,
    where: npt.NDArray[np.int64],
    values: npt.NDArray[Any],
    size: int,
    *,
    skipna: bool,
) -> Fields:
    """The fields ``op`` needs, per output cell, from values stored at output cells ``where``."""
    needs = _needs(op)
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
    if "squares" in needs:
        wide = values.astype(_accumulator(values.dtype), copy=False)
        fields["squares"] = _add_into(size, where, (wide * np.conj(wide)).real)
    if "stored" in needs:
        fields["stored"] = np.bincount(where, minlength=size)
    if op in ("max", "min"):
        ufunc = np.maximum if op == "max" else np.minimum
        if values.dtype.kind == "f":
            extreme = np.full(size, -np.inf if op == "max" else np.inf)
        else:  # integers and booleans, exact past 2**53
            limits = np.iinfo(np.int64)
            extreme = np.full(size, limits.min if op == "max" else limits.max, dtype=np.int64)
        ufunc.at(extreme, where, values.astype(extreme.dtype, copy=False))
        fields[op] = extreme
    return fields


def merge(op: Op, parts: Sequence[Fields]) -> Fields:
    """Fields of several pieces over the same output cells, combined."""
    merged: Fields = {}
    for name in parts[0]:
        arrays = [part[name] for part in parts]
        if name == "max":
            merged[name] = np.maximum.reduce(arrays)
        elif name == "min":
            merged[name] = np.minimum.reduce(arrays)
        else:
            merged[name] = np.add.reduce(arrays)
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
            mean = fields["total"] / valid
            spread = fields["squares"] - valid * (mean * np.conj(mean)).real
            result = np.maximum(spread, 0) / (valid - ddof)
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
            result = np.where(poisoned, np.nan, result)
    return np.asarray(result).astype(out_dtype, copy=False)


def kept_index(
    coords: Sequence[npt.NDArray[Any]], shape: Sequence[int], kept: Sequence[int]
) -> tuple[npt.NDArray[np.int64], int]:
    """Each value's output cell (raveled over the kept axes) and how many output cells there are."""
    kept_shape = tuple(int(shape[a]) for a in kept)
    size = math.prod(kept_shape)
    if not kept:
        return np.zeros(len(coords[0]) if coords else 0, dtype=np.int64), 1
    where = np.ravel_multi_index(tuple(np.asarray(coords[a]) for a in kept), kept_shape)
    return where.astype(np.int64, copy=False), size


def supported(op: str, dtype: np.dtype[Any]) -> bool:
    """Whether ``op`` over values of ``dtype`` is computed here (else xarray's own path)."""
    if op not in OPS or dtype.kind not in "biufc":
        return False
    return not (op in ("max", "min") and (dtype.kind == "c" or dtype == np.uint64))


#: Values :func:`reduce_store` reads per batch of runs: a few tens of MB with their coordinates.
BATCH_VALUES = 2**21


def reduce_store(
    reader: Any, op: Op, axes: Sequence[int], *, skipna: bool, ddof: int = 0
) -> npt.NDArray[Any]:
    """``op`` over ``axes`` of a whole store, one pass over a layout in bounded batches.

    The layout is one whose indexed axis is kept (its runs then land in consecutive output
    cells), else any; only runs are read, never sorted into C order.
    """
    shape = reader.shape
    kept = [a for a in range(len(shape)) if a not in axes]
    layouts = reader.description.layouts
    axis = next((a for a in sorted(layouts) if a in kept), min(layouts))
    layout = layouts[axis]
    layout.check_whole_read(reader.location)
    ((lo, hi),) = reader.brackets([(layout, np.arange(layout.positions, dtype=np.int64))])
    size = math.prod(shape[a] for a in kept)
    cells = math.prod(shape[a] for a in axes)
    ends = np.cumsum(hi - lo)
    cuts = np.searchsorted(
        ends, np.arange(BATCH_VALUES, int(ends[-1]) if ends.size else 0, BATCH_VALUES)
    )
    bounds = np.unique(np.concatenate(([0], cuts, [layout.positions])))
    fields: Fields | None = None
    for first, last in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        indices, values = reader.runs(layout, lo[first:last], hi[first:last])
        coords: list[Any] = [None] * len(shape)
        coords[axis] = np.repeat(
            np.arange(first, last, dtype=np.int64), hi[first:last] - lo[first:last]
        )
        for other, column in zip(
            layout.index_order, np.unravel_index(indices, layout.index_shape), strict=True
        ):
            coords[other] = column
        where, _ = kept_index(coords, shape, kept)
        part = fields_of(op, where, values, size, skipna=skipna)
        fields = part if fields is None else merge(op, [fields, part])
    if fields is None:
        fields = fields_of(
            op, np.zeros(0, dtype=np.int64), np.zeros(0, reader.dtype), size, skipna=skipna
        )
    result = finish(op, fields, cells, reader.dtype, skipna=skipna, ddof=ddof)
    return result.reshape(tuple(shape[a] for a in kept))


def reduce_coo(
    array: Any, op: Op, axes: Sequence[int], *, skipna: bool, ddof: int = 0
) -> npt.NDArray[Any]:
    """``op`` over ``axes`` of an in-memory ``sparse.COO``, by its coordinates (no sort)."""
    shape = array.shape
    kept = [a for a in range(len(shape)) if a not in axes]
    where, size = kept_index(list(array.coords), shape, kept)
    fields = fields_of(op, where, np.asarray(array.data), size, skipna=skipna)
    cells = math.prod(shape[a] for a in axes)
    result = finish(op, fields, cells, array.dtype, skipna=skipna, ddof=ddof)
    return result.reshape(tuple(shape[a] for a in kept))


def _block_fields(
    block: Any,
    op: Op,
    skipna: bool,
    axis: tuple[int, ...],
    keepdims: bool = True,
    computing_meta: bool = False,
    **_: Any,
) -> Any:
    """dask's chunk step: a block's fields, shaped as the block with reduced axes of length 1."""
    if computing_meta:
        return block
    kept = [a for a in range(block.ndim) if a not in axis]
    if hasattr(block, "coords"):
        coords, values = list(block.coords), np.asarray(block.data)
    else:  # a numpy block (an empty or dense piece)
        dense = np.asarray(block)
        nonzero = np.nonzero(dense)
        coords, values = list(nonzero), dense[nonzero]
    where, size = kept_index(coords, block.shape, kept)
    fields = fields_of(op, where, values, size, skipna=skipna)
    kept_shape = tuple(1 if a in axis else block.shape[a] for a in range(block.ndim))
    cells = math.prod(block.shape[a] for a in axis)
    fields["cells"] = np.full(size, cells, dtype=np.int64)
    return {name: array.reshape(kept_shape) for name, array in fields.items()}


def _combine_fields(
    parts: Any,
    op: Op,
    axis: tuple[int, ...],
    keepdims: bool = True,
    computing_meta: bool = False,
    **_: Any,
) -> Any:
    """dask's combine step: fields of neighbouring blocks, joined along the reduced axes."""
    if computing_meta:
        return parts
    from dask.array.core import _concatenate2
    from dask.utils import deepmap

    if not isinstance(parts, list):
        parts = [parts]
    first = parts
    while isinstance(first, list):
        first = first[0]
    combined: Fields = {}
    for name in first:
        joined = _concatenate2(deepmap(lambda part, n=name: part[n], parts), axes=list(axis))
        reducer = {"max": np.max, "min": np.min}.get(name, np.sum)
        combined[name] = reducer(joined, axis=axis, keepdims=True)
    return combined


def _aggregate_fields(
    parts: Any,
    op: Op,
    dtype: np.dtype[Any],
    skipna: bool,
    ddof: int,
    axis: tuple[int, ...],
    keepdims: bool = False,
    computing_meta: bool = False,
    **_: Any,
) -> Any:
    """dask's aggregate step: the result from every block's fields."""
    if computing_meta:
        return np.empty(
            (0,) * (parts.ndim - (0 if keepdims else len(axis))), result_dtype(op, dtype)
        )
    fields = _combine_fields(parts, op, axis)
    cells = fields.pop("cells")
    result = finish(op, fields, cells, dtype, skipna=skipna, ddof=ddof)
    return result if keepdims else result.squeeze(axis=axis)


def reduce_dask(x: Any, op: Op, axes: Sequence[int], *, skipna: bool, ddof: int = 0) -> Any:
    """``op`` over ``axes`` of a dask array of ``sparse.COO`` blocks: a dask array of numpy
    blocks, each block's fields computed from its coordinates, combined in a tree."""
    from functools import partial

    import dask.array as da

    dtype = result_dtype(op, x.dtype)
    kept = tuple(a for a in range(x.ndim) if a not in axes)
    return da.reduction(
        x,
        partial(_block_fields, op=op, skipna=skipna),
        partial(_aggregate_fields, op=op, dtype=x.dtype, skipna=skipna, ddof=ddof),
        combine=partial(_combine_fields, op=op),
        axis=tuple(axes),
        keepdims=False,
        dtype=dtype,
        concatenate=False,
        meta=np.empty((0,) * len(kept), dtype=dtype),
        name=f"sporadik-{op}",
    )
