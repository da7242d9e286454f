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

from sporadik_dask.read.selection import Axis, distinct
from sporadik_dask.reduce.fields import Fields, Op, finish, merge_along
from sporadik_dask.reduce.store import store_fields
from sporadik_dask.reduce.target import Grouping, Target

__all__ = ["reduce_selection", "reduce_selection_dask"]


def reduce_selection(
    reader: Any,
    positions: Sequence[Axis | None],
    target: Target,
    op: Op,
    *,
    skipna: bool,
    ddof: int,
) -> npt.NDArray[Any] | None:
    """``op`` into ``target`` (over the selection's shape) of the cells ``positions`` select
    along each store axis (a ``range`` for a slice; None: the whole axis), as dense numpy; None
    when the pass cannot take it (two groupings, a position twice where it would be added
    twice, or fields past ``sporadik.dense-result-cells``: an axis kept whole in the pass).

    1. The pass's one grouping: the longest selected reduced axis that selects each position
       once, its positions one group (a kept axis of one cell); else the groupby's own; else
       the longest selected kept axis that selects each position once, each a group of its
       own, in the order selected. The longest, because the others are kept whole in the
       pass's fields. The grouping is a table of the axis's codes, or along a genome's
       positions the selected positions as the selection names them (:meth:`Grouping.picked`).
    2. Every other selected axis is kept whole in the pass.
    3. From the fields, each such axis's positions are taken in the order selected; along a
       reduced one, they are then merged into one cell (sums add, extremes compare, moments by
       Chan's formula).
    4. The fields, shaped as ``target``, are finished over the selection's cells.
    """
    planned = _pass_target(tuple(reader.shape), positions, target)
    if planned is None:
        return None
    axis, store_target = planned
    reduced = [a for a, p in enumerate(positions) if p is not None and a in target.axes]
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


def _pass_target(
    shape: tuple[int, ...], positions: Sequence[Axis | None], target: Target
) -> tuple[int, Target] | None:
    """The axis the pass groups (-1: none of the selected) and the pass's target, or None when
    :func:`reduce_selection` would be: its dense fields are capped as a dense result is, so an
    axis of a genome is never kept whole in them."""
    import dask

    from sporadik_dask.reduce.results import DENSE_RESULT_CELLS

    planned = _pass_grouping(shape, positions, target)
    if planned is None:
        return None
    axis, grouped = planned
    reduced = [a for a, p in enumerate(positions) if p is not None and a in target.axes]
    store_axes = tuple(a for a in target.axes if a not in reduced)
    store_target = Target(shape, store_axes, grouped)
    if store_target.size > int(dask.config.get("sporadik.dense-result-cells", DENSE_RESULT_CELLS)):
        return None
    return axis, store_target


def _pass_grouping(
    shape: tuple[int, ...], positions: Sequence[Axis | None], target: Target
) -> tuple[int, Grouping | None] | None:
    """The axis the pass groups (-1: none of the selected, the groupby's own or none) and its
    grouping, as step 1 of :func:`reduce_selection` picks them; None when a reduced axis would
    count a position twice, or a groupby would need a second grouping."""
    selected = [a for a, p in enumerate(positions) if p is not None]
    reduced = [a for a in selected if a in target.axes]
    grouping = target.grouping
    grouped: Grouping | None
    if grouping is not None and reduced:
        return None
    if reduced:  # one that selects each position once, if any: the others may repeat
        axis = max([a for a in reduced if _once(positions[a])] or reduced, key=lambda a: shape[a])
        grouped = _grouping(shape, positions[axis], axis, 0, 1)
    elif grouping is not None and grouping.axis in selected:
        axis = grouping.axis
        grouped = None
        if grouping.lookup is not None:  # the groupby's code of each selected position
            grouped = _grouping(shape, positions[axis], axis, grouping.lookup, grouping.size)
    elif grouping is not None:
        axis, grouped = -1, grouping
    else:  # the longest kept axis selecting each position once, if any: the rest are taken
        once = [a for a in selected if _once(positions[a])]
        if not once:
            return -1, None
        axis = max(once, key=lambda a: shape[a])
        picked = positions[axis]
        grouped = _grouping(shape, picked, axis, None, 0 if picked is None else len(picked))
    return None if grouped is None else (axis, grouped)


def _once(picked: Axis | None) -> bool:
    if isinstance(picked, range):
        return True
    return picked is not None and distinct(picked).size == picked.size


def _grouping(
    shape: tuple[int, ...],
    picked: Axis | None,
    axis: int,
    codes: npt.NDArray[np.int64] | int | None,
    size: int,
) -> Grouping | None:
    """Positions ``picked`` of ``axis`` gathered by ``codes`` (one per position picked, one for
    all, or None: each its own group, in the order picked), the rest in no group; None when a
    position is picked twice."""
    if picked is None or not _once(picked):
        return None
    return Grouping.picked(axis, shape[axis], picked, codes, size)


def reduce_selection_dask(
    reader: Any,
    positions: Sequence[Axis | None],
    target: Target,
    op: Op,
    *,
    skipna: bool,
    ddof: int,
) -> Any:
    """:func:`reduce_selection` as a one-block dask array, for a chunked selection: its pass
    holds what the lazy one does, where a reduction of its blocks holds the blocks in flight
    (docs/benchmarks.md, "Numbers behind the code's choices"). None when
    :func:`reduce_selection` would be."""
    import dask
    from dask.base import tokenize

    from sporadik_dask.read.dask_model import from_delayed
    from sporadik_dask.reduce.fields import result_dtype

    if _pass_target(tuple(reader.shape), positions, target) is None:
        return None
    token = tokenize(reader, list(positions), target, op, skipna, ddof)
    value = dask.delayed(reduce_selection, pure=True)(
        reader,
        positions,
        target,
        op,
        skipna=skipna,
        ddof=ddof,
        dask_key_name=f"sporadik-selection-{op}-{token}",
    )
    meta = np.empty((0,) * len(target.out_shape), result_dtype(op, reader.dtype))
    return from_delayed(value, target.out_shape, meta)
