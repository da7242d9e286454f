"""A reduction's result from its fields, dense (numpy) or sparse (``sparse.COO``): which one,
and the steps shared by every pass (gather, combine, finish)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.reduce.fields import Fields, Op, fields_of, finish, merge, result_dtype, widened
from sporadik_dask.reduce.sparse_fields import (
    SPARSE_OPS,
    SparseFields,
    finish_sparse,
    merge_sparse,
    sparse_fields_of,
)
from sporadik_dask.reduce.target import Target

__all__ = [
    "DENSE_RESULT_CELLS",
    "combine_parts",
    "dense_result",
    "finish_fields",
    "finish_moments",
    "gather_fields",
    "merge_fields",
    "result_meta",
]


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


def gather_fields(
    op: Op,
    target: Target,
    where: npt.NDArray[np.int64],
    values: npt.NDArray[Any],
    skipna: bool,
    dense: bool,
) -> Fields | SparseFields:
    if dense:
        return fields_of(op, where, values, target.size, skipna=skipna)
    return sparse_fields_of(where, widened(op, values), skipna=skipna)


def combine_parts(op: Op, parts: Sequence[Fields | SparseFields]) -> Fields | SparseFields:
    if isinstance(parts[0], SparseFields):
        return merge_sparse(parts)  # type: ignore[arg-type]
    return merge(op, parts)  # type: ignore[arg-type]


def merge_fields(op: Op, *parts: Fields | SparseFields) -> Fields | SparseFields:
    """Fields of several pieces (blocks, spans of runs), dense or sparse, combined."""
    return combine_parts(op, parts)


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


def finish_moments(
    target: Target, dtype: np.dtype[Any], skipna: bool, ddof: int, fields: Fields
) -> npt.NDArray[np.float64]:
    """The mean and the variance (``ddof``) from a variance's merged fields, stacked (mean
    first), each shaped as the target, in float64 whatever the values' dtype (numpy's mean
    of float32 is float32: the digits scanpy keeps would be lost)."""
    cells = target.cells()
    wide = np.result_type(dtype, np.float64)
    mean = finish("mean", _totals(fields), cells, wide, skipna=skipna)
    var = finish("var", fields, cells, wide, skipna=skipna, ddof=ddof)
    return np.stack([mean, var]).reshape((2, *target.out_shape))


def _totals(fields: Fields) -> Fields:
    """A mean's fields from a variance's: the total is each output cell's stored values' count
    times their mean."""
    return {"total": fields["stored"] * fields["mean"], "nans": fields["nans"]}


def result_meta(op: Op, target: Target, dtype: np.dtype[Any], dense: bool) -> Any:
    """An empty result: numpy, or ``sparse.COO`` if not dense."""
    meta: Any = np.empty((0,) * len(target.out_shape), result_dtype(op, dtype))
    if not dense:
        import sparse

        meta = sparse.COO.from_numpy(meta)
    return meta
