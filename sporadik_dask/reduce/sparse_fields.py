"""Fields of a sum or mean held only for the output cells some value lands in, for results
whose dense form would not fit in memory."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sporadik_dask.reduce.fields import Op, accumulator_dtype, result_dtype
from sporadik_dask.reduce.target import Target

__all__ = [
    "SPARSE_OPS",
    "SparseFields",
    "cells_of",
    "finish_sparse",
    "merge_sparse",
    "sparse_fields_of",
    "sparse_values",
    "sum_by_id",
]


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


def sum_by_id(
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
    nan_ids, nans = sum_by_id(where[nan], np.ones(int(nan.sum()), dtype=np.int64))
    if skipna and nan.any():  # a NaN adds nothing, but its cell stays (all NaN: a NaN mean)
        values = np.where(nan, np.zeros((), dtype=values.dtype), values)
    ids, total = sum_by_id(where, values.astype(accumulator_dtype(values.dtype), copy=False))
    return SparseFields(ids, total, nan_ids, nans)


def merge_sparse(parts: Sequence[SparseFields]) -> SparseFields:
    """:class:`SparseFields` of several pieces, combined."""
    ids, total = sum_by_id(
        np.concatenate([p.ids for p in parts]), np.concatenate([p.total for p in parts])
    )
    nan_ids, nans = sum_by_id(
        np.concatenate([p.nan_ids for p in parts]), np.concatenate([p.nans for p in parts])
    )
    return SparseFields(ids, total, nan_ids, nans)


def finish_sparse(
    op: Op, fields: SparseFields, target: Target, dtype: np.dtype[Any], *, skipna: bool
) -> Any:
    """A ``sparse.COO`` result of a sum or mean from its fields."""
    import sparse

    data = sparse_values(op, fields, target, dtype, skipna=skipna)
    coords = np.empty((len(target.out_shape), fields.ids.size), dtype=np.int64)
    rest = fields.ids
    for axis in reversed(range(1, len(target.out_shape))):  # unraveled in place, row by row
        np.remainder(rest, target.out_shape[axis], out=coords[axis])
        rest = rest // target.out_shape[axis]
    if len(target.out_shape):
        coords[0] = rest
    return sparse.COO(coords, data, shape=target.out_shape, has_duplicates=False, sorted=True)


def sparse_values(
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
        cells = cells_of(target, groups)
        valid = cells - (_at(fields.nan_ids, fields.nans, fields.ids) if skipna else 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            values = values / valid
    return np.asarray(values).astype(result_dtype(op, dtype), copy=False)


def cells_of(target: Target, groups: npt.NDArray[Any] | None) -> Any:
    """The cells a mean divides by: the reduced axes' cells, times the members of each of
    ``groups`` (the group of each output cell) when an axis is grouped."""
    cells: Any = math.prod(target.shape[a] for a in target.axes)
    if groups is not None and target.grouping is not None:
        cells = cells * target.grouping.members(groups)
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
