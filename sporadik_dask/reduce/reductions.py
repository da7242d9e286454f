"""Reductions as xarray users write them, at the cost of one pass over the values.

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

import functools
import itertools
import math
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from sporadik_dask.format.spec import check_indices
from sporadik_dask.kernels.groups import add_runs, group_runs, sum_runs
from sporadik_dask.kernels.regions import Regions, deal_by_lead, gather_leads
from sporadik_dask.kernels.sort import sort_by_lead
from sporadik_dask.planning.budgets import BATCH_VALUES, DENSE_PARTIALS_BYTES, SPARSE_BATCH_CELLS

__all__ = [
    "DENSE_RESULT_CELLS",
    "OPS",
    "Op",
    "dense_result",
    "fields_of",
    "finish",
    "merge",
    "result_dtype",
]

Op = Literal["sum", "mean", "max", "min", "count", "var", "std"]
#: The reductions computed here; anything else takes xarray's own path.
OPS: tuple[Op, ...] = ("sum", "mean", "max", "min", "count", "var", "std")

Fields = dict[str, npt.NDArray[Any]]
_T = TypeVar("_T")
#: The fields of a variance: how many values, their mean, and the sum of their squared
#: deviations from it, merged only together (:func:`combine_moments`).
MOMENTS = ("stored", "mean", "m2")


#: Groups up to which a dense grouped reduction reads a layout indexed by the grouped axis
#: (each run adds into a column of one cell per group) rather than the grouped axis's own (each
#: run scatters over a row). Sums of cell groups of the 89.6 M-value store, CPU s, gene layout
#: against cell layout: 50 groups 1.19 vs 1.59, 1,000 groups 1.60 vs 2.27, 5,000 groups 4.10 vs
#: 4.87 but slower in wall time (4.31 s vs 4.02 s).
LOOKUP_GROUPS = 1024


def _needs(op: Op) -> tuple[str, ...]:
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


def _accumulator(dtype: np.dtype[Any]) -> np.dtype[Any]:
    if dtype.kind == "c":
        return np.dtype(np.complex128)
    if dtype.kind == "f":
        return np.dtype(np.float64)
    return np.dtype(np.uint64 if dtype.kind == "u" else np.int64)


def _add_into(size: int, where: npt.NDArray[np.int64], values: npt.NDArray[Any]) -> Any:
    """Sums of ``values`` by ``where`` into ``size`` cells, exact for integers."""
    accumulator = _accumulator(values.dtype)
    if accumulator.kind in "fc":  # bincount of nothing gives int64, whatever the weights
        real = np.bincount(where, weights=values.real, minlength=size).astype(np.float64)
        if accumulator.kind == "f":
            return real
        return real + 1j * np.bincount(where, weights=values.imag, minlength=size)
    out = np.zeros(size, dtype=accumulator)
    np.add.at(out, where, values.astype(accumulator, copy=False))
    return out


def _widened(op: Op, values: npt.NDArray[Any]) -> npt.NDArray[Any]:
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
    needs = _needs(op)
    values = _widened(op, values)
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
        self,
        coords: Sequence[npt.NDArray[Any]],
        values: npt.NDArray[Any],
        *,
        grouped: bool = False,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
        """Each value's output cell, and the values that land in one.

        ``grouped`` says the grouped axis's coordinates are group codes already (mapped once per
        run rather than once per value).
        """
        if not self.kept:
            return np.zeros(values.size, dtype=np.int64), values
        columns = [np.asarray(coords[a]) for a in self.kept]
        if self.grouping is not None:
            at = self.kept.index(self.grouping.axis)
            if not grouped:
                columns[at] = self.grouping.codes[columns[at]]
            member = columns[at] >= 0
            if not member.all():
                columns = [column[member] for column in columns]
                values = values[member]
        # raveled by hand: every coordinate is in range, so ravel_multi_index's checks are waste
        where = columns[0].astype(np.int64, copy=True)
        for column, size in zip(columns[1:], self.out_shape[1:], strict=True):
            where *= size
            where += column
        return where, values


#: Reductions that may give a sparse result (an output cell holding no value is 0 for them).
SPARSE_OPS: tuple[Op, ...] = ("sum", "mean")


class SparseFields(NamedTuple):
    """Fields of a sum or mean held only for the output cells some value lands in: for targets
    whose dense form would not fit (50,000 groups x 20,000 genes), in memory bounded by the
    values themselves."""

    #: Output cells holding a value, sorted and distinct.
    ids: npt.NDArray[np.int64]
    total: npt.NDArray[Any]
    #: Output cells holding a NaN (left out of ``total`` under ``skipna``), and how many.
    nan_ids: npt.NDArray[np.int64]
    nans: npt.NDArray[np.int64]


def _sum_by_id(
    ids: npt.NDArray[np.int64], values: npt.NDArray[Any]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    """Distinct ids, sorted, and the sum of the values at each: one sort and one ``reduceat``."""
    if ids.size == 0:
        return ids, values
    order = np.argsort(ids, kind="stable")
    ids, values = ids[order], values[order]
    starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
    return ids[starts], np.add.reduceat(values, starts)


def sparse_fields_of(
    where: npt.NDArray[np.int64], values: npt.NDArray[Any], *, skipna: bool
) -> SparseFields:
    """:class:`SparseFields` of values landing at output cells ``where``."""
    nan = np.isnan(values) if values.dtype.kind in "fc" else np.zeros(values.shape, dtype=bool)
    nan_ids, nans = _sum_by_id(where[nan], np.ones(int(nan.sum()), dtype=np.int64))
    if skipna and nan.any():  # a NaN adds nothing, but its cell stays (all NaN: a NaN mean)
        values = np.where(nan, np.zeros((), dtype=values.dtype), values)
    ids, total = _sum_by_id(where, values.astype(_accumulator(values.dtype), copy=False))
    return SparseFields(ids, total, nan_ids, nans)


def merge_sparse(parts: Sequence[SparseFields]) -> SparseFields:
    """:class:`SparseFields` of several pieces, combined."""
    ids, total = _sum_by_id(
        np.concatenate([p.ids for p in parts]), np.concatenate([p.total for p in parts])
    )
    nan_ids, nans = _sum_by_id(
        np.concatenate([p.nan_ids for p in parts]), np.concatenate([p.nans for p in parts])
    )
    return SparseFields(ids, total, nan_ids, nans)


def finish_sparse(
    op: Op, fields: SparseFields, target: Target, dtype: np.dtype[Any], *, skipna: bool
) -> Any:
    """A ``sparse.COO`` result of a sum or mean from its fields."""
    import sparse

    data = _sparse_values(op, fields, target, dtype, skipna=skipna)
    coords = np.empty((len(target.out_shape), fields.ids.size), dtype=np.int64)
    rest = fields.ids
    for axis in reversed(range(1, len(target.out_shape))):  # unraveled in place, row by row
        np.remainder(rest, target.out_shape[axis], out=coords[axis])
        rest = rest // target.out_shape[axis]
    if len(target.out_shape):
        coords[0] = rest
    return sparse.COO(coords, data, shape=target.out_shape, has_duplicates=False, sorted=True)


def _sparse_values(
    op: Op, fields: SparseFields, target: Target, dtype: np.dtype[Any], *, skipna: bool
) -> npt.NDArray[Any]:
    """The result's value at each of ``fields.ids``, in numpy's dtype, from fields holding every
    value those cells receive."""
    values = fields.total
    if op == "mean":
        groups = None
        if target.grouping is not None:
            grouped = np.unravel_index(fields.ids, target.out_shape)
            groups = grouped[target.kept.index(target.grouping.axis)]
        cells = _cells_of(target, groups)
        valid = cells - (_at(fields.nan_ids, fields.nans, fields.ids) if skipna else 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            values = values / valid
    return np.asarray(values).astype(result_dtype(op, dtype), copy=False)


def _cells_of(target: Target, groups: npt.NDArray[Any] | None) -> Any:
    """The cells a mean divides by: the reduced axes' cells, times the members of each of
    ``groups`` (the group of each output cell) when an axis is grouped."""
    cells: Any = math.prod(target.shape[a] for a in target.axes)
    if groups is not None and target.grouping is not None:
        cells = cells * target.grouping.members()[groups]
    return cells


def _at(
    ids: npt.NDArray[np.int64], counts: npt.NDArray[np.int64], where: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """``counts`` of ``ids`` looked up at ``where`` (0 where absent)."""
    spot = np.searchsorted(ids, where)
    found = spot < ids.size
    found[found] = ids[spot[found]] == where[found]
    out = np.zeros(where.shape, dtype=np.int64)
    out[found] = counts[spot[found]]
    return out


def _gather(
    op: Op,
    target: Target,
    where: npt.NDArray[np.int64],
    values: npt.NDArray[Any],
    skipna: bool,
    dense: bool,
) -> Fields | SparseFields:
    if dense:
        return fields_of(op, where, values, target.size, skipna=skipna)
    return sparse_fields_of(where, _widened(op, values), skipna=skipna)


def _combine(op: Op, parts: Sequence[Fields | SparseFields]) -> Fields | SparseFields:
    if isinstance(parts[0], SparseFields):
        return merge_sparse(parts)  # type: ignore[arg-type]
    return merge(op, parts)  # type: ignore[arg-type]


def finish_fields(
    op: Op,
    target: Target,
    dtype: np.dtype[Any],
    skipna: bool,
    ddof: int,
    fields: Fields | SparseFields,
) -> Any:
    """The reduction from merged fields: numpy shaped as the target, or ``sparse.COO``."""
    if isinstance(fields, SparseFields):
        return finish_sparse(op, fields, target, dtype, skipna=skipna)
    result = finish(op, fields, target.cells(), dtype, skipna=skipna, ddof=ddof)
    return result.reshape(target.out_shape)


#: Output cells a dense result may hold (2 GiB of float64), unless ``dask.config``
#: ``sporadik.dense-result-cells`` says otherwise; past it a sum or a mean comes back as a
#: ``sparse.COO`` holding the cells some value lands in, and other reductions are not computed
#: here.
DENSE_RESULT_CELLS = 2**28


def dense_result(target: Target, op: str) -> bool | None:
    """Whether the result is dense, sparse (False), or not computed here (None)."""
    import dask

    if target.size <= int(dask.config.get("sporadik.dense-result-cells", DENSE_RESULT_CELLS)):
        return True
    return False if op in SPARSE_OPS else None


def supported(op: str, dtype: np.dtype[Any]) -> bool:
    """Whether ``op`` over values of ``dtype`` is computed here (else xarray's own path)."""
    if op not in OPS or dtype.kind not in "biufc":
        return False
    return not (op in ("max", "min") and dtype.kind == "c")


def _layout_for(reader: Any, target: Target, dense: bool = True) -> Any:
    """The layout a reduction reads: one whose indexed axis is kept (its runs then land in
    consecutive output cells), else any. A sparse result prefers a kept axis that is not grouped:
    each batch of its runs then fills output cells no other batch reaches (:class:`_Disjoint`).
    A dense result of few groups prefers a layout indexed by the grouped axis alone: a run then
    adds into one column of :data:`LOOKUP_GROUPS` cells at most, where a run of the grouped axis
    scatters over a whole row."""
    layouts = reader.description.layouts
    kept = [a for a in sorted(layouts) if a in target.kept]
    grouping = target.grouping
    if not dense and grouping is not None:
        kept = [a for a in kept if a != grouping.axis] or kept
    if dense and grouping is not None and grouping.size <= LOOKUP_GROUPS:
        by_group = [a for a in kept if tuple(layouts[a].index_order) == (grouping.axis,)]
        kept = by_group + [a for a in kept if a not in by_group]
    return layouts[kept[0] if kept else min(layouts)]


class _Disjoint:
    """Output cells of a sum or mean that keeps the layout's indexed axis ungrouped: the output
    axes before it (*lead*, ``L`` cells), the axis itself (``A`` positions) and the axes after
    it (*trail*, ``T`` cells).

    A run reaches only its own position's ``L * T`` cells, so no two runs share a cell: each
    run's values add into a reused accumulator of ``L * T`` cells (:func:`sum_runs`, one pass,
    no sort) and the runs' sums are concatenated, never added. Runs come in position order, so
    one stable counting sort by the lead cell puts the whole in C order (within a run the trail
    cells are sorted). Memory: the cells some value lands in, plus the accumulator.
    """

    def __init__(self, target: Target, axis: int, dtype: np.dtype[Any]) -> None:
        at = target.kept.index(axis)
        out = target.out_shape
        self.target, self.axis = target, axis
        self.lead, self.extent, self.trail = math.prod(out[:at]), out[at], math.prod(out[at + 1 :])
        self._cells = self.lead * self.trail
        self._buffers: tuple[npt.NDArray[Any], npt.NDArray[np.bool_]] | None = None
        self._dtype, self._stored = _accumulator(dtype), dtype
        grouping = target.grouping
        others = [a for a in target.kept if a != axis]
        #: Group codes (int32, a quarter of the cache int64 takes) when the only other kept axis
        #: is the grouped one: each value's key is then its code, looked up in the kernel.
        self._codes: npt.NDArray[np.int32] | None = None
        self._grouped = grouping.axis if grouping is not None else -1
        if grouping is not None and others == [grouping.axis] and grouping.size < 2**31:
            self._codes = grouping.codes.astype(np.int32)

    @property
    def by_code(self) -> bool:
        """Whether :meth:`lead_cells` serves: the lead is the grouped axis alone."""
        return self._codes is not None and self.trail == 1 and self._cells <= SPARSE_BATCH_CELLS

    @classmethod
    def of(cls, target: Target, axis: int, dtype: np.dtype[Any]) -> _Disjoint | None:
        grouped = target.grouping.axis if target.grouping is not None else None
        if axis not in target.kept or axis == grouped:
            return None
        return cls(target, axis, dtype)

    def _keys(self, coords: Sequence[Any], size: int) -> npt.NDArray[np.int64]:
        """Each value's cell among its run's ``L * T`` (lead and trail raveled), -1 for a value
        whose position along the grouped axis is in no group."""
        target, grouping = self.target, self.target.grouping
        if self._codes is not None:
            looked: npt.NDArray[np.int64] = self._codes[coords[self._grouped]].astype(np.int64)
            return looked
        others = [
            (axis, extent)
            for axis, extent in zip(target.kept, target.out_shape, strict=True)
            if axis != self.axis
        ]
        keys = np.zeros(size, dtype=np.int64)
        outside = None
        for axis, extent in others:
            column = np.asarray(coords[axis])
            if grouping is not None and axis == grouping.axis:
                column = grouping.codes[column]  # -1: in no group
                outside = column < 0
            if len(others) == 1:  # the key is the column itself, -1 included
                return column.astype(np.int64, copy=False)
            keys *= extent
            keys += column
        if outside is not None and outside.any():
            keys[outside] = -1
        return keys

    def fields(
        self,
        first: int,
        lengths: npt.NDArray[np.int64],
        coords: Sequence[Any],
        values: npt.NDArray[Any],
        *,
        skipna: bool,
    ) -> SparseFields:
        """:class:`SparseFields` (C order within each run) of the runs of positions
        ``first, first + 1, ...``, ``lengths`` values each."""
        nan = np.isnan(values) if values.dtype.kind in "fc" else None
        nan_ids, nans = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        keys = None
        if nan is not None and nan.any():
            keys = self._keys(coords, values.size)
            runs = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
            hit = nan & (keys >= 0)
            nan_ids, nans = _sum_by_id(
                self._ids(first, keys[hit], runs[hit]), np.ones(int(hit.sum()), np.int64)
            )
            if skipna:  # a NaN adds nothing, but its cell stays (all NaN: a NaN mean)
                values = np.where(nan, np.zeros((), dtype=values.dtype), values)
        summed = None
        if self._cells <= SPARSE_BATCH_CELLS:
            if self._buffers is None:
                self._buffers = np.zeros(self._cells, self._dtype), np.zeros(self._cells, bool)
            if self._codes is not None:  # the grouped axis's positions, mapped in the kernel
                where, lookup = np.asarray(coords[self._grouped]), self._codes
            else:
                keys = self._keys(coords, values.size) if keys is None else keys
                where, lookup = keys, np.zeros(0, np.int32)
            summed = sum_runs(
                lengths, where, values, self._buffers, lookup=lookup, first=first,
                extent=self.extent, trail=self.trail,
            )  # fmt: skip
        if summed is None:  # too many cells per run for an accumulator, or a dtype numba lacks
            keys = self._keys(coords, values.size) if keys is None else keys
            runs = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
            inside = keys >= 0
            found = sparse_fields_of(
                self._ids(first, keys[inside], runs[inside]), values[inside], skipna=False
            )
            return SparseFields(found.ids, found.total, nan_ids, nans)
        return SparseFields(summed[0], summed[1], nan_ids, nans)

    def lead_cells(
        self,
        op: Op,
        first: int,
        lengths: npt.NDArray[np.int64],
        coords: Sequence[Any],
        values: npt.NDArray[Any],
        *,
        skipna: bool,
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]] | None:
        """The finished cells of the runs of positions ``first, first + 1, ...`` when the lead
        is the grouped axis alone (rank 2 out, groups first): each cell's group, position and
        value in the result's dtype, run by run. None otherwise, or for a mean that skips NaNs
        of a batch holding some (:meth:`fields` then)."""
        if not self.by_code or self._codes is None:
            return None
        if op == "mean" and skipna and values.dtype.kind in "fc" and np.isnan(values).any():
            return None
        if self._buffers is None:
            self._buffers = np.zeros(self._cells, self._dtype), np.zeros(self._cells, bool)
        where = np.asarray(coords[self._grouped])
        out = result_dtype(op, self._stored)
        found = group_runs(
            lengths, where, self._codes, values, self._buffers, first=first, skipna=skipna,
            dtype=self._dtype if op == "mean" else out,
        )  # fmt: skip
        if found is None:
            return None
        groups, positions, data = found
        if op == "mean":
            data = (data / _cells_of(self.target, groups)).astype(out, copy=False)
        return groups, positions, data

    def _ids(
        self, first: int, keys: npt.NDArray[np.int64], runs: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """Output cells (raveled over the output) of run ``runs`` (from ``first``) at ``keys``."""
        ids = keys // self.trail
        ids *= self.extent
        ids += runs + first
        ids *= self.trail
        ids += keys % self.trail
        return ids

    def merge(self, parts: list[SparseFields]) -> SparseFields:
        """The batches' fields (``parts`` is emptied as they are taken), concatenated (no cell
        is in two) and put in C order."""
        ids = np.concatenate([p.ids for p in parts])
        total = np.concatenate([p.total for p in parts])
        nan_ids, nans = _sum_by_id(
            np.concatenate([p.nan_ids for p in parts]), np.concatenate([p.nans for p in parts])
        )
        parts.clear()
        if self.lead > 1:
            ids, total = sort_by_lead(ids, total, self.extent * self.trail, self.lead)
        return SparseFields(ids, total, nan_ids, nans)


@dataclass(frozen=True)
class _Fetch:
    """The indices (None if not ``runs_only``) and values of batch ``a:b`` of runs ``lo:hi``."""

    reader: Any
    layout: Any
    lo: npt.NDArray[np.int64]
    hi: npt.NDArray[np.int64]
    runs_only: bool = False
    #: Indices in their stored dtype, unchecked, for :func:`kernels.add_runs` (which checks).
    as_stored: bool = False

    def __call__(self, a: int, b: int) -> tuple[Any, Any]:
        lo, hi = self.lo[a:b], self.hi[a:b]
        if self.runs_only:
            return None, self.reader.run_values(self.layout, lo, hi)
        indices, values = self.reader.runs(self.layout, lo, hi, as_stored=self.as_stored)
        return indices, values


def _bounds(lo: npt.NDArray[np.int64], hi: npt.NDArray[np.int64]) -> list[tuple[int, int]]:
    """Batches of consecutive positions (offsets into ``lo``/``hi``), about ``BATCH_VALUES``
    values each."""
    ends = np.cumsum(hi - lo)
    cuts = np.searchsorted(
        ends, np.arange(BATCH_VALUES, int(ends[-1]) if ends.size else 0, BATCH_VALUES)
    )
    bounds = np.unique(np.concatenate([[0], cuts, [lo.size]])).tolist()
    return list(itertools.pairwise(bounds))


def _ahead(
    fetch: Callable[[int, int], _T], batches: Sequence[tuple[int, int]]
) -> Iterator[tuple[int, int, _T]]:
    """``fetch`` of each batch in turn, the next one read while the caller works on this one:
    decoding releases the GIL, so reading and adding overlap (two batches in memory at most)."""
    if len(batches) < 2:
        yield from ((a, b, fetch(a, b)) for a, b in batches)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(fetch, *batches[0])
        for at, (a, b) in enumerate(batches):
            fetched = pending.result()
            if at + 1 < len(batches):
                pending = pool.submit(fetch, *batches[at + 1])
            yield a, b, fetched


class _Affine(NamedTuple):
    """Each value's dense output cell: its run's coordinate (position, or group code) times
    ``run_stride``, plus its raveled index (or, ``grouped``, the group of the position it is)
    times ``index_stride``."""

    run_stride: int
    index_stride: int
    grouped: bool = False


def _affine(op: Op, target: Target, layout: Any, dtype: np.dtype[Any]) -> _Affine | None:
    """How each value's dense output cell follows from its run and index, when it is affine
    in them: the case :func:`kernels.add_runs` adds in one pass, with no per-value coordinates
    built. None otherwise (another axis reduced, an index over several axes one of which is
    grouped, a ravel order the output's does not share), and for dtypes or ops the kernel does
    not take."""
    if (
        dtype.kind not in "fiu"
        or op in ("max", "min")
        or (op == "mean" and dtype.kind in "iu" and dtype.itemsize == 8)  # see _widened
    ):
        return None
    if 0 in target.shape:  # no value at all, and strides of 0 that say nothing
        return None
    out = target.out_shape
    stride = {a: math.prod(out[p + 1 :]) for p, a in enumerate(target.kept)}
    if target.kept in ((), (layout.indexed_axis,)):  # the run alone says where a value lands
        return _Affine(stride.get(layout.indexed_axis, 0), 0)
    grouped = target.grouping.axis if target.grouping is not None else None
    if tuple(layout.index_order) == (grouped,) and grouped in stride:  # the index's group
        return _Affine(stride.get(layout.indexed_axis, 0), stride[grouped], grouped=True)
    index_strides = [math.prod(layout.index_shape[p + 1 :]) for p in range(len(layout.index_order))]
    others = [
        (o, s)
        for o, s in zip(layout.index_order, index_strides, strict=True)
        if target.shape[o] > 1 or o == grouped  # a lone position may still be relabeled
    ]
    if any(o not in stride or o == grouped for o, _ in others):
        return None
    step = stride[others[-1][0]] // others[-1][1] if others else 0
    if any(stride[o] != step * s for o, s in others):
        return None
    return _Affine(stride.get(layout.indexed_axis, 0), step)


def _index_coords(ndim: int, layout: Any, indices: npt.NDArray[Any] | None) -> list[Any]:
    """Coordinates of a batch of runs' values along each axis their ``indices`` ravel (None on
    the others, and everywhere when no index was read); an index over one axis is that axis's
    position itself, taken as it is."""
    coords: list[Any] = [None] * ndim
    if indices is None:
        return coords
    one = len(layout.index_shape) == 1
    columns = (indices,) if one else np.unravel_index(indices, layout.index_shape)
    for other, column in zip(layout.index_order, columns, strict=True):
        coords[other] = column
    return coords


def store_fields(
    reader: Any,
    op: Op,
    target: Target,
    skipna: bool,
    dense: bool,
    span: tuple[int, int] | None = None,
) -> Fields | SparseFields:
    """The fields of the runs of positions ``span`` (default all) of the reduction's layout,
    read in bounded batches (the next read while this one is added); the runs' values alone
    when their axis is the only one kept."""
    layout = _layout_for(reader, target, dense)
    axis = layout.indexed_axis
    first, last = span or (0, layout.positions)
    ((lo, hi),) = reader.brackets([(layout, np.arange(first, last, dtype=np.int64))])
    disjoint = None if dense else _Disjoint.of(target, axis, reader.dtype)
    batches = _bounds(lo, hi)
    grouped_here = target.grouping is not None and target.grouping.axis == axis
    nothing = np.zeros(0, np.int64), np.zeros(0, reader.dtype)
    parts = [_gather(op, target, *nothing, skipna, dense)]
    strides = _affine(op, target, layout, reader.dtype) if dense else None
    fields: Fields = parts[0]  # type: ignore[assignment]
    empty = np.zeros(0, np.float64)
    # the one-pass adder checks each index as it adds: signed indices need no widened copy
    stored = layout.index_dtypes["indices"]
    as_stored = strides is not None and stored.kind == "i"
    # each value's output cell is its run's when only the run's axis is kept: no index read
    fetch = _Fetch(reader, layout, lo, hi, runs_only=target.kept == (axis,), as_stored=as_stored)

    lookup = np.zeros(0, np.int8)
    grouping = target.grouping
    if strides is not None and strides.grouped and grouping is not None:  # narrow, for the cache
        lookup = grouping.codes.astype(np.min_scalar_type(-max(grouping.size, 1)))

    none_stored = np.zeros(0, np.int64)
    moments = (
        (fields["stored"], fields["mean"], fields["m2"])
        if "m2" in fields
        else (none_stored, empty, empty)
    )

    def add(bases: Any, lengths: Any, indices: Any, stride: int, values: Any) -> bool:
        return add_runs(
            bases,
            lengths,
            indices,
            stride,
            values,
            extent=layout.extent,
            lookup=lookup,
            skipna=skipna,
            total=fields.get("total", empty),
            moments=moments,
            nans=fields["nans"],
        )

    none = nothing[0]
    probe = np.zeros(0, stored if as_stored else np.int64)  # numba takes both dtypes, or not
    if strides is not None and add(none, none, probe, 0, nothing[1]):
        run_stride, index_stride, _ = strides
        for a, b, (indices, values) in _ahead(fetch, batches):
            positions = np.arange(first + a, first + b, dtype=np.int64)
            if grouped_here:
                positions = target.grouping.codes[positions]  # type: ignore[union-attr]
            bases = np.where(positions >= 0, positions * run_stride, -1)
            lengths = hi[a:b] - lo[a:b]
            add(bases, lengths, none if indices is None else indices, index_stride, values)
        return fields
    for a, b, (indices, values) in _ahead(fetch, batches):
        coords = _index_coords(len(reader.shape), layout, indices)
        positions = np.arange(first + a, first + b, dtype=np.int64)
        if grouped_here:  # each run's group, once per run
            positions = target.grouping.codes[positions]  # type: ignore[union-attr]
        coords[axis] = np.repeat(positions, hi[a:b] - lo[a:b])
        if disjoint is not None:
            lengths = hi[a:b] - lo[a:b]
            parts.append(disjoint.fields(first + a, lengths, coords, values, skipna=skipna))
            continue
        where, values = target.locate(coords, values, grouped=grouped_here)
        part = _gather(op, target, where, values, skipna, dense)
        if dense:  # dense fields add up as they come, in place
            merge_into(parts[0], part)  # type: ignore[arg-type]
        else:
            parts.append(part)
    if disjoint is not None:
        return disjoint.merge(parts)  # type: ignore[arg-type]
    return _combine(op, parts)


def reduce_store(
    reader: Any, op: Op, target: Target, *, skipna: bool, ddof: int = 0, dense: bool = True
) -> Any:
    """``op`` into ``target`` over a whole store, one pass over a layout in bounded batches.

    Only runs are read, never sorted into C order. The result is numpy, or a ``sparse.COO`` when
    not ``dense`` (sums and means only).
    """
    _layout_for(reader, target, dense).check_whole_read(reader.location)
    placed = None if dense else _placed(reader, op, target, skipna)
    if placed is not None:
        return placed
    fields = store_fields(reader, op, target, skipna, dense)
    return finish_fields(op, target, reader.dtype, skipna, ddof, fields)


def _lead_bound(
    reader: Any, target: Target, layout: Any, disjoint: _Disjoint
) -> npt.NDArray[np.int64] | None:
    """The most output cells each lead cell of ``disjoint`` can receive: the values it receives,
    at most its cells. With no lead axis that is every value of the layout; with one, the values
    at each of its positions (summed over each group's members) from its own layout's counts.
    None for a lead of several axes, or of an axis with no layout."""
    lead_axes = target.kept[: target.kept.index(layout.indexed_axis)]
    cells = disjoint.extent * disjoint.trail
    if not lead_axes:
        return np.array([min(layout.nnz, cells)], dtype=np.int64)
    if len(lead_axes) > 1 or lead_axes[0] not in reader.description.layouts:
        return None
    lead = lead_axes[0]
    counts = reader.counts(lead)
    grouping = target.grouping
    if grouping is not None and grouping.axis == lead:
        member = grouping.codes >= 0
        grouped = np.bincount(grouping.codes[member], counts[member], minlength=grouping.size)
        counts = grouped.astype(np.int64)  # float64 sums of int64 counts: exact below 2**53
    bound: npt.NDArray[np.int64] = np.minimum(counts, cells)
    return bound


def _placed(reader: Any, op: Op, target: Target, skipna: bool) -> Any:
    """A sparse sum or mean over a whole store whose layout's indexed axis is kept ungrouped, as
    a ``sparse.COO``: each batch's cells are finished (no other batch reaches them) and laid
    straight into the result's regions (:class:`~sporadik_dask.kernels.regions.Regions`) on a second
    thread while the next batch is added up, so memory is the result's bound plus two batches,
    however many batches. None when no bound is known or numba lacks the result's dtype
    (float16): the caller merges batches instead."""
    import sparse

    layout = _layout_for(reader, target, dense=False)
    axis = layout.indexed_axis
    disjoint = _Disjoint.of(target, axis, reader.dtype)
    out_dtype = result_dtype(op, reader.dtype)
    if disjoint is None or out_dtype == np.float16:
        return None
    bound = _lead_bound(reader, target, layout, disjoint)
    if bound is None:
        return None
    regions = Regions(target.out_shape, disjoint.extent * disjoint.trail, bound, out_dtype)
    with _OneBehind() as behind:  # each batch is laid down while the next is added up
        behind.then(regions.prefault)
        for cells in _finished_cells(reader, op, skipna, layout, disjoint):
            behind.then(functools.partial(regions.place_cells, *cells))
    placed, data = regions.result()
    return sparse.COO(placed, data, shape=target.out_shape, has_duplicates=False, sorted=True)


def _finished_cells(
    reader: Any,
    op: Op,
    skipna: bool,
    layout: Any,
    disjoint: _Disjoint,
    span: tuple[int, int] | None = None,
) -> Iterator[tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]]:
    """The finished cells of each batch of runs of positions ``span`` (default all) of
    ``layout``, as :meth:`Regions.place_cells` takes them: each cell's lead, its offset among
    the lead's cells and its value, each lead's cells in C order."""
    first, last = span or (0, layout.positions)
    ((lo, hi),) = reader.brackets([(layout, np.arange(first, last, dtype=np.int64))])
    # the grouping kernel checks each index as it looks it up: signed indices need no widening
    stored = disjoint.by_code and layout.index_dtypes["indices"].kind == "i"
    fetch = _Fetch(reader, layout, lo, hi, as_stored=stored)
    cells = disjoint.extent * disjoint.trail
    for a, b, (indices, values) in _ahead(fetch, _bounds(lo, hi)):
        lengths = hi[a:b] - lo[a:b]
        coords = _index_coords(len(reader.shape), layout, indices)
        found = disjoint.lead_cells(op, first + a, lengths, coords, values, skipna=skipna)
        if found is not None:
            yield found
            continue
        if stored and indices is not None:  # read unchecked for the kernel, int64 ones too
            check_indices(indices, layout.extent, f"Layout {layout.path!r} in {reader.location}")
            coords = _index_coords(len(reader.shape), layout, indices.astype(np.int64, copy=False))
        fields = disjoint.fields(first + a, lengths, coords, values, skipna=skipna)
        data = _sparse_values(op, fields, disjoint.target, reader.dtype, skipna=skipna)
        yield fields.ids // cells, fields.ids % cells, data


class _OneBehind:
    """Calls run in order on a thread of their own, one behind the caller: the compiled
    kernels release the GIL, so laying one batch down overlaps adding up the next (two batches'
    cells in memory at most). An error of a call is raised at the next :meth:`then` or on
    leaving."""

    def __enter__(self) -> _OneBehind:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(1)
        self._pending: Any = None
        return self

    def then(self, call: Callable[[], None]) -> None:
        if self._pending is not None:
            self._pending.result()
        self._pending = self._pool.submit(call)

    def __exit__(self, *exc: object) -> None:
        try:
            if self._pending is not None and exc[0] is None:
                self._pending.result()
        finally:
            self._pool.shutdown(wait=True)


def reduce_store_dask(
    reader: Any,
    op: Op,
    target: Target,
    spans: int,
    *,
    skipna: bool,
    ddof: int = 0,
    dense: bool = True,
) -> Any:
    """:func:`reduce_store` as a dask array: one task per span of the layout's positions (about
    equal in values), their fields added in a tree, so every worker reads its own runs; for a
    dense result, no more spans than ``sporadik.dense-partials-bytes`` of their fields hold.
    Spans of a sparse sum or mean that keeps the layout's axis ungrouped share no output cell:
    each span's finished cells are laid into the result once (:func:`place_spans`), not
    merged."""
    from sporadik_dask.planning.plan import partition_bounds
    from sporadik_dask.reduce.graph import store_reduction

    layout = _layout_for(reader, target, dense)
    layout.check_whole_read(reader.location)
    if dense:  # each span's fields fill the whole result, and their merge holds all of them
        import dask

        budget = int(dask.config.get("sporadik.dense-partials-bytes", DENSE_PARTIALS_BYTES))
        partial = math.prod(target.out_shape) * 8 * len(_needs(op))
        spans = min(spans, max(1, budget // max(partial, 1)))
    ((lo, hi),) = reader.brackets([(layout, np.arange(layout.positions, dtype=np.int64))])
    indptr = np.concatenate(([0], np.cumsum(hi - lo)))
    bounds = partition_bounds(indptr, max(1, -(-int(indptr[-1]) // max(spans, 1))))
    if bounds.size < 2:  # an empty axis has no partition, but the result still needs a task
        bounds = np.zeros(2, dtype=np.int64)
    meta = _meta(op, target, reader.dtype, dense)
    disjoint = None if dense else _Disjoint.of(target, layout.indexed_axis, reader.dtype)
    if disjoint is not None and meta.dtype != np.float16:  # spans share no cell: laid down
        cells = disjoint.extent * disjoint.trail
        return store_reduction(
            reader,
            bounds,
            label=f"sporadik-{op}",
            fields=(span_cells, reader, op, target, skipna, cells, disjoint.lead),
            merge=None,
            finish=(place_spans, target.out_shape, cells),
            shape=target.out_shape,
            meta=meta,
        )
    return store_reduction(
        reader,
        bounds,
        label=f"sporadik-{op}",
        fields=(store_fields, reader, op, target, skipna, dense),
        merge=(merge_spans, op, target, layout.indexed_axis, reader.dtype),
        finish=(finish_fields, op, target, reader.dtype, skipna, ddof),
        shape=target.out_shape,
        meta=meta,
    )


class SpanCells(NamedTuple):
    """The finished cells of one span of runs of a sparse sum or mean that keeps the runs' axis
    ungrouped (:class:`_Disjoint`): no other span reaches them."""

    #: How many cells each lead cell holds; the cells come lead by lead.
    leads: npt.NDArray[np.int64]
    #: Each cell among its lead's, in C order within each lead, in the narrowest unsigned dtype
    #: that holds them (uint16 for 20,000 genes: a quarter of raveled int64 ids).
    offsets: npt.NDArray[Any]
    #: The result's value at each, in its dtype.
    data: npt.NDArray[Any]


def span_cells(
    reader: Any, op: Op, target: Target, skipna: bool, cells: int, leads: int, span: tuple[int, int]
) -> SpanCells:
    """:class:`SpanCells` of the runs of positions ``span`` of a sparse sum or mean's layout,
    whose output has ``leads`` lead cells of ``cells`` cells each."""
    layout = _layout_for(reader, target, dense=False)
    disjoint = _Disjoint.of(target, layout.indexed_axis, reader.dtype)
    assert disjoint is not None, "spans of cells are planned for disjoint runs only"
    found = list(_finished_cells(reader, op, skipna, layout, disjoint, span))
    if not found:  # no runs in the span
        none = np.zeros(0, np.int64)
        found = [(none, none, np.zeros(0, result_dtype(op, reader.dtype)))]
    counts, offsets, data = deal_by_lead(found, leads, np.min_scalar_type(max(cells - 1, 0)))
    return SpanCells(counts, offsets, data)


def place_spans(shape: tuple[int, ...], cells: int, *spans: SpanCells) -> Any:
    """Every span's cells, in span order, as one ``sparse.COO`` of ``shape`` whose leads hold
    ``cells`` cells each: spans cover consecutive positions, so each lead's cells in span order
    are in C order, and :func:`~sporadik_dask.kernels.regions.gather_leads` writes them lead by
    lead. No sort, and no copy of a span. Memory: the spans' cells and the result, once each."""
    import sparse

    coords, data = gather_leads(shape, cells, [(s.leads, s.offsets, s.data) for s in spans])
    return sparse.COO(coords, data, shape=shape, has_duplicates=False, sorted=True)


def reduce_coo(
    array: Any, op: Op, target: Target, *, skipna: bool, ddof: int = 0, dense: bool = True
) -> Any:
    """``op`` into ``target`` over an in-memory ``sparse.COO``, by its coordinates (no sort)."""
    where, values = target.locate(list(array.coords), np.asarray(array.data))
    fields = _gather(op, target, where, values, skipna, dense)
    return finish_fields(op, target, array.dtype, skipna, ddof, fields)


def block_fields(
    block: Any,
    op: Op,
    skipna: bool,
    axis: tuple[int, ...],
    keepdims: bool = True,
    computing_meta: bool = False,
    **_: Any,
) -> Any:
    """dask's chunk step: a block's fields, shaped as the block with reduced axes of length 1."""
    if computing_meta:  # numpy, so that dask's later meta steps never call sparse's kernels
        return np.empty((0,) * block.ndim, dtype=np.float64)
    target = Target(tuple(block.shape), tuple(axis))
    fill = absent_value(block)
    coords, values = (list(block.coords), block.data) if fill is not None else _coordinates(block)
    where, values = target.locate(coords, np.asarray(values))
    fields = fields_of(op, where, values, target.size, skipna=skipna)
    if fill is not None:  # absent cells hold ``fill``: each counts as that value
        absent = target.cells() - np.bincount(where, minlength=target.size)
        _count_absent(fields, op, fill, absent)
    fields["cells"] = np.full(target.size, target.cells(), dtype=np.int64)
    kept_shape = tuple(1 if a in axis else block.shape[a] for a in range(block.ndim))
    return {name: array.reshape(kept_shape) for name, array in fields.items()}


def absent_value(block: Any) -> Any:
    """A sparse block's fill value when it is not 0 (after ``X + 1``, ``np.exp(X)``,
    ``X.where(...)``, absent cells hold 1 or NaN), else None."""
    if not hasattr(block, "coords"):
        return None
    fill = np.asarray(block.fill_value)
    return None if bool(fill == 0) else fill[()]


def _count_absent(fields: Fields, op: Op, fill: Any, absent: npt.NDArray[np.int64]) -> None:
    """Fields over the stored values, completed in place with ``absent`` cells of ``fill`` per
    output cell: NaN ones are missing values (skipped, or poisoning without ``skipna``), other
    values add to the total, the moments and the extremes."""
    if np.isnan(fill):
        fields["nans"] = fields["nans"] + absent
        return
    some = absent > 0  # an infinite fill times no absent cell adds nothing, not NaN
    if op in ("mean", "var", "std"):
        fill = _widened(op, np.asarray(fill))[()]  # as the stored values were
    with np.errstate(invalid="ignore"):
        if "total" in fields:
            fields["total"] = fields["total"] + np.where(some, fill * absent, 0)
    if "m2" in fields:  # the absent cells are one more piece: ``absent`` values of ``fill``
        filled = np.full(absent.shape, fill, dtype=fields["mean"].dtype)
        pieces = (absent, filled, np.zeros(absent.shape))
        merge_into(fields, dict(zip(MOMENTS, pieces, strict=True)))
    if op in ("max", "min"):
        pick = np.maximum if op == "max" else np.minimum
        extreme = fields[op]
        filled = pick(extreme, np.asarray(fill, dtype=extreme.dtype))
        fields[op] = np.where(some, filled, extreme)
        fields["stored"] = fields["stored"] + absent


def _coordinates(
    block: Any, op: Op = "sum", skipna: bool = True
) -> tuple[list[npt.NDArray[Any]], npt.NDArray[Any]]:
    """A block's coordinates and values: a ``sparse.COO``'s own, or a numpy block's nonzeros.

    A sparse block whose absent cells are not 0 (its fill value, after ``X + 1``,
    ``np.exp(X)`` or ``X.where(...)``) is taken as its dense values, so that they count: a pass
    over the stored values alone would give a wrong sum, mean, minimum or count without a
    word. One exception keeps the pass: a sum skipping NaN over absent cells that are NaN.
    """
    if hasattr(block, "coords"):
        fill = absent_value(block)
        skipped = op == "sum" and skipna and fill is not None and bool(np.isnan(fill))
        if fill is None or skipped:
            return list(block.coords), np.asarray(block.data)
        block = block.todense()
    dense = np.asarray(block)
    nonzero = np.nonzero(dense)
    return list(nonzero), dense[nonzero]


def combine_fields(
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
    joined = {
        name: _concatenate2(deepmap(lambda part, n=name: part[n], parts), axes=list(axis))
        for name in first
    }
    with_moments = "m2" in joined
    for name, array in joined.items():
        if not (with_moments and name in MOMENTS):
            reducer = {"max": np.max, "min": np.min}.get(name, np.sum)
            combined[name] = reducer(array, axis=axis, keepdims=True)
    if with_moments:
        moments = combine_moments(joined["stored"], joined["mean"], joined["m2"], axis)
        combined.update(zip(MOMENTS, moments, strict=True))
    return combined


def aggregate_fields(
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
    fields = combine_fields(parts, op, axis)
    cells = fields.pop("cells")
    result = finish(op, fields, cells, dtype, skipna=skipna, ddof=ddof)
    return result if keepdims else result.squeeze(axis=axis)


def reduce_dask(
    x: Any, op: Op, target: Target, *, skipna: bool, ddof: int = 0, dense: bool = True
) -> Any:
    """``op`` into ``target`` over a dask array of ``sparse.COO`` blocks, as a dask array of
    numpy blocks: each block's fields from its coordinates, combined in a tree.

    A grouped or sparse result is one block that every block's fields add into; any other is
    dask's own reduction over the blocks' fields.
    """
    from functools import partial

    from sporadik_dask.reduce.graph import blockwise_reduction, grouped_reduction

    if target.grouping is not None or not dense:
        return grouped_reduction(
            x,
            label=f"sporadik-group-{op}",
            fields=(offset_fields, op, target, skipna, dense),
            merge=(merge_fields, op),
            finish=(finish_fields, op, target, x.dtype, skipna, ddof),
            shape=target.out_shape,
            meta=_meta(op, target, x.dtype, dense),
        )
    return blockwise_reduction(
        x,
        target.axes,
        chunk=partial(block_fields, op=op, skipna=skipna),
        combine=partial(combine_fields, op=op),
        aggregate=partial(aggregate_fields, op=op, dtype=x.dtype, skipna=skipna, ddof=ddof),
        dtype=result_dtype(op, x.dtype),
        name=f"sporadik-{op}",
    )


def offset_fields(
    op: Op, target: Target, skipna: bool, dense: bool, block: Any, offsets: tuple[int, ...]
) -> Fields | SparseFields:
    """One block's fields over the whole grouped target, its coordinates made global."""
    coords, values = _coordinates(block, op, skipna)
    coords = [np.asarray(c, dtype=np.int64) + o for c, o in zip(coords, offsets, strict=True)]
    where, values = target.locate(coords, values)
    return _gather(op, target, where, values, skipna, dense)


def merge_fields(op: Op, *parts: Fields | SparseFields) -> Fields | SparseFields:
    """Fields of several pieces (blocks, spans of runs), dense or sparse, combined."""
    return _combine(op, parts)


def merge_spans(
    op: Op, target: Target, axis: int, dtype: np.dtype[Any], *parts: Fields | SparseFields
) -> Fields | SparseFields:
    """Fields of consecutive spans of a layout's runs, in span order, combined: sparse fields
    of a target keeping ``axis`` ungrouped share no cell, so they are concatenated and put in C
    order by one counting sort (:meth:`_Disjoint.merge`), not sorted by comparison."""
    disjoint = _Disjoint.of(target, axis, dtype) if isinstance(parts[0], SparseFields) else None
    if disjoint is None:
        return _combine(op, parts)
    return disjoint.merge(list(parts))  # type: ignore[arg-type]


def _meta(op: Op, target: Target, dtype: np.dtype[Any], dense: bool) -> Any:
    """An empty result: numpy, or ``sparse.COO`` if not dense."""
    meta: Any = np.empty((0,) * len(target.out_shape), result_dtype(op, dtype))
    if not dense:
        import sparse

        meta = sparse.COO.from_numpy(meta)
    return meta
