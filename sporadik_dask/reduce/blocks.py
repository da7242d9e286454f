"""Reductions of ``sparse.COO`` arrays in memory and of dask arrays of them: each block's
fields from its coordinates, combined by dask's reduction or a tree of tasks."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.reduce.fields import (
    MOMENTS,
    Fields,
    Op,
    combine_moments,
    fields_of,
    finish,
    merge_into,
    result_dtype,
    widened,
)
from sporadik_dask.reduce.results import finish_fields, gather_fields, merge_fields, result_meta
from sporadik_dask.reduce.sparse_fields import SparseFields
from sporadik_dask.reduce.target import Target

__all__ = [
    "absent_value",
    "aggregate_fields",
    "block_fields",
    "combine_fields",
    "offset_fields",
    "reduce_coo",
    "reduce_dask",
]


def reduce_coo(
    array: Any, op: Op, target: Target, *, skipna: bool, ddof: int = 0, dense: bool = True
) -> Any:
    """``op`` into ``target`` over an in-memory ``sparse.COO``, by its coordinates (no sort)."""
    where, values = target.locate(list(array.coords), np.asarray(array.data))
    fields = gather_fields(op, target, where, values, skipna, dense)
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
        fill = widened(op, np.asarray(fill))[()]  # as the stored values were
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
            meta=result_meta(op, target, x.dtype, dense),
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
    return gather_fields(op, target, where, values, skipna, dense)
