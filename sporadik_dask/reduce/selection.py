"""A reduction of a selection along several axes of a store, in the store's one pass.

Reading the selection first holds all of it; here the pass groups one selected axis and keeps
the others whole, so its fields cover the unfiltered reduction's cells (memory as for that
reduction), and the selected positions are picked from the fields afterwards: taken along a
kept axis, merged along a reduced one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.reduce.fields import Fields, Op, finish, merge_along
from sporadik_dask.reduce.store import store_fields
from sporadik_dask.reduce.target import Grouping, Target

__all__ = ["reduce_selection"]


def reduce_selection(
    reader: Any,
    positions: Sequence[npt.NDArray[np.int64] | None],
    target: Target,
    op: Op,
    *,
    skipna: bool,
    ddof: int,
) -> npt.NDArray[Any] | None:
    """``op`` into ``target`` (over the selection's shape) of the cells ``positions`` select
    along each store axis (None: the whole axis), as dense numpy; None when the pass cannot
    take it (two groupings, or a position twice where it would be added twice).

    1. The pass's one grouping: a selected reduced axis, its positions one group (a kept axis
       of one cell); else the groupby's own; else the first selected kept axis, each position
       a group of its own, in the order selected.
    2. Every other selected axis is kept whole in the pass.
    3. From the fields, each such axis's positions are taken in the order selected; along a
       reduced one, they are then merged into one cell (sums add, extremes compare, moments by
       Chan's formula).
    4. The fields, shaped as ``target``, are finished over the selection's cells.
    """
    selected = [a for a, p in enumerate(positions) if p is not None]
    reduced = [a for a in selected if a in target.axes]
    grouping = target.grouping
    if grouping is not None and reduced:
        return None
    if reduced:
        axis = reduced[0]
        grouped = _grouping(reader.shape[axis], positions[axis], axis, np.int64(0), 1)
    elif grouping is not None and grouping.axis in selected:
        axis = grouping.axis
        grouped = _grouping(
            reader.shape[axis], positions[axis], axis, grouping.codes, grouping.size
        )
    elif grouping is not None:
        axis, grouped = -1, grouping
    else:
        axis = selected[0]
        picked = positions[axis]
        assert picked is not None
        codes = np.arange(picked.size, dtype=np.int64)
        grouped = _grouping(reader.shape[axis], picked, axis, codes, picked.size)
    if grouped is None:
        return None
    store_axes = tuple(a for a in target.axes if a not in reduced)
    store_target = Target(tuple(reader.shape), store_axes, grouped)
    fields: Fields = store_fields(reader, op, store_target, skipna, dense=True)  # type: ignore[assignment]
    kept = store_target.kept
    fields = {name: array.reshape(store_target.out_shape) for name, array in fields.items()}
    for a, taken in enumerate(positions):
        if taken is None or a == axis:
            continue
        at = kept.index(a)
        fields = {name: np.take(array, taken, axis=at) for name, array in fields.items()}
        if a in reduced:
            fields = merge_along(fields, at)
    out = {name: array.ravel() for name, array in fields.items()}
    return finish(op, out, target.cells(), reader.dtype, skipna=skipna, ddof=ddof).reshape(
        target.out_shape
    )


def _grouping(
    extent: int, picked: npt.NDArray[np.int64] | None, axis: int, codes: Any, size: int
) -> Grouping | None:
    """Positions ``picked`` of an axis of ``extent`` gathered by ``codes`` (one per position, or
    one for all), the rest in no group; None when a position is picked twice."""
    assert picked is not None
    if np.unique(picked).size != picked.size:
        return None
    full = np.full(extent, -1, dtype=np.int64)
    full[picked] = codes
    return Grouping(axis, full, size)
