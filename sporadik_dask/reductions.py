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
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from sporadik_dask.budgets import BATCH_VALUES

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
    result: np.dtype[Any] = np.dtype(reduce(np.ones(1, dtype=dtype)).dtype)
    return result


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


class Grouping(NamedTuple):
    """Positions along ``axis`` gathered into groups, as xarray's groupby encodes them."""

    axis: int
    #: Each position's group, or -1 for a position in none.
    codes: npt.NDArray[np.int64]
    #: How many groups.
    size: int

    def members(self) -> npt.NDArray[np.int64]:
        """Positions in each group."""
        return np.bincount(self.codes[self.codes >= 0], minlength=self.size)


@dataclass(frozen=True)
class Target:
    """Where each value of an array of ``shape`` lands when ``axes`` are reduced: its output
    cell, raveled over the kept axes. A grouped axis is kept, each position relabeled by its
    group, so an output cell there covers every member of the group."""

    shape: tuple[int, ...]
    axes: tuple[int, ...]
    grouping: Grouping | None = None

    @property
    def kept(self) -> tuple[int, ...]:
        return tuple(a for a in range(len(self.shape)) if a not in self.axes)

    @property
    def out_shape(self) -> tuple[int, ...]:
        grouped = self.grouping.axis if self.grouping else None
        return tuple(
            self.grouping.size if a == grouped and self.grouping else self.shape[a]
            for a in self.kept
        )

    @property
    def size(self) -> int:
        return math.prod(self.out_shape)

    def cells(self) -> int | npt.NDArray[np.int64]:
        """Input cells each output cell covers (per raveled output cell, when grouped)."""
        reduced = math.prod(self.shape[a] for a in self.axes)
        if self.grouping is None:
            return reduced
        spot = [1] * len(self.kept)
        spot[self.kept.index(self.grouping.axis)] = self.grouping.size
        members = self.grouping.members().reshape(spot)
        return reduced * np.broadcast_to(members, self.out_shape).ravel()

    def locate(
        self, coords: Sequence[npt.NDArray[Any]], values: npt.NDArray[Any]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
        """Each value's output cell, and the values that land in one."""
        if not self.kept:
            return np.zeros(values.size, dtype=np.int64), values
        columns = [np.asarray(coords[a]) for a in self.kept]
        if self.grouping is not None:
            at = self.kept.index(self.grouping.axis)
            columns[at] = self.grouping.codes[columns[at]]
            member = columns[at] >= 0
            if not member.all():
                columns = [column[member] for column in columns]
                values = values[member]
        where = np.ravel_multi_index(tuple(columns), self.out_shape)
        return where.astype(np.int64, copy=False), values


def supported(op: str, dtype: np.dtype[Any]) -> bool:
    """Whether ``op`` over values of ``dtype`` is computed here (else xarray's own path)."""
    if op not in OPS or dtype.kind not in "biufc":
        return False
    return not (op in ("max", "min") and (dtype.kind == "c" or dtype == np.uint64))


def reduce_store(
    reader: Any, op: Op, target: Target, *, skipna: bool, ddof: int = 0
) -> npt.NDArray[Any]:
    """``op`` into ``target`` over a whole store, one pass over a layout in bounded batches.

    The layout is one whose indexed axis is kept (its runs then land in consecutive output
    cells), else any; only runs are read, never sorted into C order.
    """
    shape = reader.shape
    layouts = reader.description.layouts
    axis = next((a for a in sorted(layouts) if a in target.kept), min(layouts))
    layout = layouts[axis]
    layout.check_whole_read(reader.location)
    ((lo, hi),) = reader.brackets([(layout, np.arange(layout.positions, dtype=np.int64))])
    ends = np.cumsum(hi - lo)
    cuts = np.searchsorted(
        ends, np.arange(BATCH_VALUES, int(ends[-1]) if ends.size else 0, BATCH_VALUES)
    )
    bounds = np.unique(np.concatenate(([0], cuts, [layout.positions])))
    fields = fields_of(
        op, np.zeros(0, np.int64), np.zeros(0, reader.dtype), target.size, skipna=skipna
    )
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
        where, values = target.locate(coords, values)
        fields = merge(op, [fields, fields_of(op, where, values, target.size, skipna=skipna)])
    result = finish(op, fields, target.cells(), reader.dtype, skipna=skipna, ddof=ddof)
    return result.reshape(target.out_shape)


def reduce_coo(
    array: Any, op: Op, target: Target, *, skipna: bool, ddof: int = 0
) -> npt.NDArray[Any]:
    """``op`` into ``target`` over an in-memory ``sparse.COO``, by its coordinates (no sort)."""
    where, values = target.locate(list(array.coords), np.asarray(array.data))
    fields = fields_of(op, where, values, target.size, skipna=skipna)
    result = finish(op, fields, target.cells(), array.dtype, skipna=skipna, ddof=ddof)
    return result.reshape(target.out_shape)


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
    target = Target(tuple(block.shape), tuple(axis))
    coords, values = _coordinates(block)
    where, values = target.locate(coords, values)
    fields = fields_of(op, where, values, target.size, skipna=skipna)
    fields["cells"] = np.full(target.size, target.cells(), dtype=np.int64)
    kept_shape = tuple(1 if a in axis else block.shape[a] for a in range(block.ndim))
    return {name: array.reshape(kept_shape) for name, array in fields.items()}


def _coordinates(block: Any) -> tuple[list[npt.NDArray[Any]], npt.NDArray[Any]]:
    """A block's coordinates and values: a ``sparse.COO``'s own, or a numpy block's nonzeros."""
    if hasattr(block, "coords"):
        return list(block.coords), np.asarray(block.data)
    dense = np.asarray(block)
    nonzero = np.nonzero(dense)
    return list(nonzero), dense[nonzero]


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


def reduce_dask(x: Any, op: Op, target: Target, *, skipna: bool, ddof: int = 0) -> Any:
    """``op`` into ``target`` over a dask array of ``sparse.COO`` blocks, as a dask array of
    numpy blocks: each block's fields from its coordinates, combined in a tree."""
    from functools import partial

    import dask.array as da

    dtype = result_dtype(op, x.dtype)
    if target.grouping is not None:
        return _grouped_dask(x, op, target, skipna=skipna, ddof=ddof)
    return da.reduction(
        x,
        partial(_block_fields, op=op, skipna=skipna),
        partial(_aggregate_fields, op=op, dtype=x.dtype, skipna=skipna, ddof=ddof),
        combine=partial(_combine_fields, op=op),
        axis=target.axes,
        keepdims=False,
        dtype=dtype,
        concatenate=False,
        meta=np.empty((0,) * len(target.kept), dtype=dtype),
        name=f"sporadik-{op}",
    )


#: Block fields a grouped reduction adds together in one task.
GROUP_FAN_IN = 8


def _offset_fields(
    block: Any, offsets: tuple[int, ...], op: Op, target: Target, skipna: bool
) -> Fields:
    """One block's fields over the whole grouped target, its coordinates made global."""
    coords, values = _coordinates(block)
    coords = [np.asarray(c, dtype=np.int64) + o for c, o in zip(coords, offsets, strict=True)]
    where, values = target.locate(coords, values)
    return fields_of(op, where, values, target.size, skipna=skipna)


def _merge_fields(op: Op, *parts: Fields) -> Fields:
    return merge(op, list(parts))


def _finish_fields(
    fields: Fields, op: Op, target: Target, dtype: np.dtype[Any], skipna: bool, ddof: int
) -> npt.NDArray[Any]:
    result = finish(op, fields, target.cells(), dtype, skipna=skipna, ddof=ddof)
    return result.reshape(target.out_shape)


def _grouped_dask(x: Any, op: Op, target: Target, *, skipna: bool, ddof: int) -> Any:
    """A grouped reduction of dask blocks: every block adds into the whole (groups, kept)
    output, so the blocks' fields are added in a tree and the result is one block."""
    import dask.array as da
    from dask.base import tokenize
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph

    name = f"sporadik-group-{op}-{tokenize(x, op, target.axes, target.grouping, skipna, ddof)}"
    starts = [np.concatenate(([0], np.cumsum(c)[:-1])).astype(int).tolist() for c in x.chunks]
    layer: dict[Any, Any] = {}
    level: list[Any] = []
    for index in np.ndindex(*x.numblocks):
        offsets = tuple(starts[a][i] for a, i in enumerate(index))
        key = (name, 0, len(level))
        layer[key] = (_offset_fields, (x.name, *index), offsets, op, target, skipna)
        level.append(key)
    depth = 0
    while len(level) > 1:
        depth += 1
        groups = [level[i : i + GROUP_FAN_IN] for i in range(0, len(level), GROUP_FAN_IN)]
        level = []
        for j, group in enumerate(groups):
            layer[(name, depth, j)] = (_merge_fields, op, *group)
            level.append((name, depth, j))
    layer[name] = (_finish_fields, level[0], op, target, x.dtype, skipna, ddof)
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[x])
    dtype = result_dtype(op, x.dtype)
    return da.from_delayed(
        Delayed(name, graph),
        target.out_shape,
        dtype=dtype,
        meta=np.empty((0,) * len(target.out_shape), dtype),
    )
