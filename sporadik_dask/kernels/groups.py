"""Runs summed into positions and groups: the inner loops of the one-pass reductions.

A reduction reads a layout's runs once and adds each value into its output position (and its
group's row), so no block of the selection is ever assembled.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.format.errors import LayoutError
from sporadik_dask.kernels.compiled import LACKS_DTYPE, kernel
from sporadik_dask.kernels.sort import code_dtype

__all__ = ["add_runs", "group_runs", "sum_runs"]


@kernel
def _sum_runs(
    lengths: Any,
    keys: Any,
    lookup: Any,
    values: Any,
    acc: Any,
    mark: Any,
    first: int,
    extent: int,
    trail: int,
) -> Any:
    out_ids = np.empty(keys.size, dtype=np.int64)
    out_sums = np.empty(keys.size, dtype=acc.dtype)
    m = 0
    i = 0
    for run in range(len(lengths)):
        start = m
        for _ in range(lengths[run]):
            key = keys[i]
            if lookup.size:
                key = lookup[key]
            if key >= 0:
                if not mark[key]:
                    mark[key] = True
                    out_ids[m] = key
                    m += 1
                acc[key] += values[i]
            i += 1
        if trail > 1:
            out_ids[start:m].sort()
        position = first + run
        for j in range(start, m):
            key = out_ids[j]
            out_sums[j] = acc[key]
            acc[key] = 0
            mark[key] = False
            out_ids[j] = ((key // trail) * extent + position) * trail + key % trail
    return out_ids[:m], out_sums[:m]


def sum_runs(
    lengths: npt.NDArray[Any],
    keys: npt.NDArray[np.int64],
    values: npt.NDArray[Any],
    buffers: tuple[npt.NDArray[Any], npt.NDArray[np.bool_]],
    *,
    lookup: npt.NDArray[Any],
    first: int,
    extent: int,
    trail: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]] | None:
    """Sums per output cell of runs that share no cell: run ``r`` (``lengths[r]`` values) is
    position ``first + r`` of an axis of ``extent`` positions, and each of its values lands at
    cell ``keys`` of the run's ``lead * trail`` cells (-1: nowhere).

    Returns the cells some value lands in, raveled over ``(lead, extent, trail)`` and in C order
    within each run, and their sums. ``buffers`` (an accumulator of zeros and a mask of False, one
    cell per key) are left as they came, for the next batch. A non-empty ``lookup`` maps each of
    ``keys`` to its cell first (a position to its group). One pass over the values, each
    added into a cell of the accumulator: no sort of the values. None when numba cannot hold a
    dtype.
    """
    try:
        summed: tuple[npt.NDArray[np.int64], npt.NDArray[Any]]
        summed = _sum_runs(lengths, keys, lookup, values, *buffers, first, extent, trail)
        return summed
    except LACKS_DTYPE:
        return None


@kernel
def _group_runs(
    lengths: Any, where: Any, codes: Any, values: Any, skipna: bool, acc: Any, mark: Any,
    groups: Any, positions: Any, sums: Any, first: int,
) -> tuple[int, int]:  # fmt: skip
    m = 0
    i = 0
    for run in range(len(lengths)):
        start = m
        for _ in range(lengths[run]):
            index = where[i]
            if index < 0 or index >= codes.size:
                return m, i  # a stored index past its axis: stop before reading elsewhere
            group = codes[index]
            value = values[i]
            i += 1
            if group < 0:
                continue
            if not mark[group]:
                mark[group] = True
                groups[m] = group
                m += 1
            if skipna and value != value:  # a NaN adds nothing, but its cell stays
                continue
            acc[group] += value
        position = first + run
        for j in range(start, m):
            group = groups[j]
            positions[j] = position
            sums[j] = acc[group]
            acc[group] = 0
            mark[group] = False
    return m, -1


def group_runs(
    lengths: npt.NDArray[Any],
    where: npt.NDArray[Any],
    codes: npt.NDArray[Any],
    values: npt.NDArray[Any],
    buffers: tuple[npt.NDArray[Any], npt.NDArray[np.bool_]],
    *,
    first: int,
    skipna: bool,
    dtype: Any,
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]] | None:
    """Sums by group of runs that share no cell, the group leading: run ``r`` (``lengths[r]``
    values) is position ``first + r``, and each of its values adds into the group
    ``codes[where]`` of its index (-1: none; ``skipna``: a NaN adds nothing).

    Returns each cell some value lands in as its group, its position and its sum (added in the
    accumulator's dtype, given in ``dtype``), run by run, so each group's cells come in C order:
    :meth:`Regions.place_codes` lays them into the result as they come, and
    :func:`deal_by_lead` deals a span's by group, with no division per cell anywhere.
    ``buffers`` (an accumulator of zeros and a mask of False, one cell per group) are left as
    they came. ``where`` may be of any signed integer dtype, as stored: each is checked against
    ``codes`` as it is used. None when numba cannot hold a dtype; raises :class:`LayoutError`
    for an index past its axis (a damaged store).
    """
    acc, mark = buffers
    last = first + len(lengths)
    groups = np.empty(values.size, dtype=code_dtype(acc.size))
    positions = np.empty(values.size, dtype=code_dtype(last))
    sums = np.empty(values.size, dtype=dtype)
    try:
        m, bad = _group_runs(lengths, where, codes, values, skipna, acc, mark, groups, positions,
                             sums, first)  # fmt: skip
    except LACKS_DTYPE:
        return None
    if bad >= 0:
        acc[:] = 0
        mark[:] = False
        raise LayoutError(
            f"stored index {int(where[bad])} lies past its axis of {codes.size}: the layout is "
            "damaged, and a sum over it would read another position's group. Validate the "
            "store (`sporadik-dask validate`) and rewrite it."
        )
    return groups[:m], positions[:m], sums[:m]


@kernel
def _add_runs(
    bases: Any,
    lengths: Any,
    indices: Any,
    extent: int,
    lookup: Any,
    offset: int,
    stride: int,
    values: Any,
    skipna: bool,
    total: Any,
    stored: Any,
    mean: Any,
    m2: Any,
    nans: Any,
) -> int:
    i = 0
    for run in range(len(lengths)):
        base = bases[run]
        if base < 0:  # a run in no group
            i += lengths[run]
            continue
        for _ in range(lengths[run]):
            index = indices[i] if indices.size else 0
            if index < 0 or index >= extent:
                return i  # a stored index past its axis: stop before writing elsewhere
            if lookup.size:
                at = index - offset
                index = lookup[at] if 0 <= at < lookup.size else -1
                if index < 0:  # a value in no group
                    i += 1
                    continue
            cell = base + index * stride
            if cell < 0 or cell >= nans.size:
                return i
            value = values[i]
            i += 1
            if value != value:  # NaN
                nans[cell] += 1
                if skipna:
                    continue
            if total.size:
                total[cell] += value
            if m2.size:  # Welford's update: no sum of squares to cancel against the mean's
                wide = value * 1.0
                count = stored[cell] + 1
                delta = wide - mean[cell]
                mean[cell] += delta / count
                m2[cell] += delta * (wide - mean[cell])
                stored[cell] = count
    return -1


def add_runs(
    bases: npt.NDArray[np.int64],
    lengths: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    stride: int,
    values: npt.NDArray[Any],
    *,
    extent: int,
    lookup: npt.NDArray[Any],
    offset: int = 0,
    skipna: bool,
    total: npt.NDArray[Any],
    moments: tuple[npt.NDArray[np.int64], npt.NDArray[Any], npt.NDArray[Any]],
    nans: npt.NDArray[np.int64],
) -> bool:
    """Adds runs of values into dense fields in place, in one pass: value ``i`` of run ``r``
    lands in cell ``bases[r] + indices[i] * stride`` (``bases[r]`` -1: nowhere), its total into
    ``total``, its count, mean and sum of squared deviations into ``moments`` (by Welford's
    update; any may be empty: not wanted), a NaN counted in
    ``nans`` (and left out of the sums under ``skipna``). A non-empty ``lookup`` maps each index
    first (a position to its group, -1: nowhere), so the index is the grouped axis's position:
    it holds the groups of positions ``offset`` on (a window of the axis), and a position
    outside it is in no group.

    Values add in the order they come, in the accumulators' dtype, so the sums equal a
    ``bincount`` of the same values. ``indices`` may be of any signed integer dtype, as stored:
    each is checked against ``extent`` as it is used. False when numba cannot hold a dtype
    (nothing added then). Raises :class:`LayoutError` for a stored index past its axis (a
    damaged store).
    """
    try:
        bad = _add_runs(
            bases, lengths, indices, extent, lookup, offset, stride, values, skipna, total,
            *moments, nans,
        )  # fmt: skip
    except LACKS_DTYPE:
        return False
    if bad >= 0:
        raise LayoutError(
            f"stored index {int(indices[bad])} lies past its axis: the layout is damaged, and "
            "a sum over it would add values into other cells. Validate the store "
            "(`sporadik-dask validate`) and rewrite it."
        )
    return True
