"""Assembling a layout's runs into a result's coordinates and values: numpy and kernels, no I/O.

The runs are read once for each sorted distinct position; the caller's order (unsorted,
repeated) is produced here, by mapping each kept value's coordinate to its output slots, and then
C order by counting sorts; a rank-2 read goes from the runs to the result in one kernel. Never by
fancy-indexing a ``sparse.COO`` afterwards: sparse scans every coordinate once per requested
position, seconds for a list of genes and minutes for all of them reversed
(docs/benchmarks.md, "Numbers behind the code's choices").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.format.spec import LayoutGeometry
from sporadik_dask.kernels.runs import columns_of_runs, rows_of_runs
from sporadik_dask.kernels.sort import sort_by_key
from sporadik_dask.read.routing import Runs, Stretch
from sporadik_dask.read.selection import (
    Axis,
    Positions,
    Selection,
    as_array,
    nondecreasing,
    places,
)

__all__ = ["assemble", "c_order", "lengths_of"]

#: An axis of up to this many positions (beyond 8 per value) maps coordinates through a lookup
#: table (one gather) rather than a binary search of the selected positions (log k per value).
LOOKUP_SLACK = 1 << 16


def _ranks(column: Positions, unique: Axis, size: int) -> Positions:
    """Each coordinate's index among the sorted selected positions ``unique``, or -1 if absent:
    through a lookup table of the axis where it is short, else by :func:`places`."""
    if not isinstance(unique, range) and size <= 8 * column.size + LOOKUP_SLACK:
        lookup = np.full(size, -1, dtype=np.int64)
        lookup[unique] = np.arange(unique.size, dtype=np.int64)
        return lookup[column]
    return places(column, unique)


def _within(counts: Positions) -> Positions:
    """For ``np.repeat(x, counts)``: each copy's rank among its own copies."""
    total = int(counts.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)


def _slots(
    column: Positions, selection: Selection, axis: int
) -> tuple[Positions | None, Positions]:
    """Output slots along ``axis`` of values at source coordinates ``column``.

    Returns ``(take, slots)``: value ``take[i]`` goes to slot ``slots[i]``, ``take`` ascending, a
    value repeated once per slot its position fills (none if the selection leaves it out);
    ``take`` is None when every value goes to exactly one slot, in order.

    1. Rank each coordinate among the axis's sorted distinct positions (-1: not selected).
    2. Strictly increasing positions: the rank is the slot (a reversed slice: counted from the
       end); unsorted ones, each asked once: a table from rank to slot.
    3. Repeated positions: a CSR-style table maps each distinct position to the slots asking for it
       (``slots_of[starts[r]:starts[r] + per[r]]``); each value is copied once per slot.
    """
    if selection.whole(axis):
        return None, column
    unique = selection.unique[axis]
    ranked = _ranks(column, unique, selection.shape[axis])
    if isinstance(selection.positions[axis], range) and not selection.ordered(axis):
        ranked = np.where(ranked >= 0, len(unique) - 1 - ranked, -1)  # a reversed range
    elif not selection.ordered(axis):
        return _slots_of_list(ranked, selection.inverse[axis], len(unique))
    inside = ranked >= 0
    if bool(inside.all()):
        return None, ranked
    take = np.flatnonzero(inside)
    return take, ranked[take]


def _slots_of_list(
    ranked: Positions, inverse: Positions, distinct: int
) -> tuple[Positions | None, Positions]:
    """:func:`_slots` (steps 2 and 3) for positions asked in an order of the caller's:
    ``ranked`` are the values' ranks among the ``distinct`` sorted positions, ``inverse`` each
    asked position's rank."""
    inside = ranked >= 0
    if inverse.size == distinct:  # unsorted, each once: one slot per distinct position
        slot_of = np.empty(distinct, dtype=np.int64)
        slot_of[inverse] = np.arange(inverse.size, dtype=np.int64)
        if bool(inside.all()):
            return None, slot_of[ranked]
        take = np.flatnonzero(inside)
        return take, slot_of[ranked[take]]
    per = np.bincount(inverse, minlength=distinct)
    slots_of = np.argsort(inverse, kind="stable")
    starts = np.cumsum(per) - per
    clipped = np.maximum(ranked, 0)
    copies = np.where(inside, per[clipped], 0)
    take = np.repeat(np.arange(ranked.size, dtype=np.int64), copies)
    return take, slots_of[np.repeat(starts[clipped], copies) + _within(copies)]


def slot_table(selection: Selection, axis: int, values: int) -> Positions | None:
    """Each position of ``axis``'s output slot (-1: not selected), as a table over the axis.

    None when some position is asked for twice (a value would go to two slots), or when the
    axis is too long for a table beside ``values`` values (:data:`LOOKUP_SLACK`).
    """
    positions = selection.positions[axis]
    size = selection.shape[axis]
    if len(positions) != len(selection.unique[axis]) or size > 8 * values + LOOKUP_SLACK:
        return None
    if selection.whole(axis):
        return np.arange(size, dtype=np.int64)
    table = np.full(size, -1, dtype=np.int64)
    table[as_array(positions)] = np.arange(len(positions), dtype=np.int64)
    return table


def _assemble_rank2(
    selection: Selection,
    layout: LayoutGeometry,
    runs: Runs,
    indices: npt.NDArray[Any],
    data: npt.NDArray[Any],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]] | None:
    """A rank-2 selection straight from the runs into the result's coordinates, C order, by one
    kernel (:func:`~sporadik_dask.kernels.runs.rows_of_runs` along the runs,
    :func:`~sporadik_dask.kernels.runs.columns_of_runs` across them): each run taken in place,
    once per request, nothing gathered, stacked or sorted on the way, so the read holds the runs and
    the result alone, about half the peak of gathering them first
    (docs/benchmarks.md, "Numbers behind the code's choices").
    None for what they do not take: a position of the other axis asked for twice, an order of it
    neither ascending nor descending along the runs, a run not ascending, a dtype numba lacks.
    """
    axis = layout.indexed_axis
    (other,) = layout.index_order
    if axis == 0 and not (selection.ordered(other) or descending(selection, other)):
        return None
    slots = slot_table(selection, other, indices.size)
    if slots is None:
        return None
    if axis == 0:
        lengths = lengths_of(runs)
        asked = selection.inverse[axis]
        starts = (np.cumsum(lengths) - lengths)[asked]
        reverse = not selection.ordered(other)
        return rows_of_runs(starts, lengths[asked], indices, data, slots, reverse=reverse)
    extent = len(selection.positions[other])
    lo, hi = (runs.offsets[:-1], runs.offsets[1:]) if isinstance(runs, Stretch) else runs
    if selection.ordered(axis):  # the runs as read, end to end
        return columns_of_runs(lo, hi, None, indices, data, slots, extent)
    asked = selection.inverse[axis]  # each run once per request, in the caller's order
    lengths = lengths_of(runs)
    starts = (np.cumsum(lengths) - lengths)[asked]
    return columns_of_runs(lo[asked], hi[asked], starts, indices, data, slots, extent)


def lengths_of(runs: Runs) -> Positions:
    """Values in each run, int64."""
    lo, hi = runs.brackets if isinstance(runs, Stretch) else runs
    lengths: Positions = hi - lo
    return lengths


def descending(selection: Selection, axis: int) -> bool:
    """Whether the positions selected along ``axis`` strictly decrease (a reversed range)."""
    positions = selection.positions[axis]
    if isinstance(positions, range):
        return len(positions) > 1 and positions.step < 0
    return positions.size > 1 and bool(np.all(positions[1:] < positions[:-1]))


def _sorted_prefix(selection: Selection, layout: LayoutGeometry) -> list[int]:
    """The output axes the assembled values are sorted by, lexicographically, in this order.

    Runs arrive by indexed axis (kept in caller order: whole runs are copied), then by
    ``index_order`` within a run. An axis whose positions are strictly increasing keeps that
    order; one sorted with repeats keeps its own but not the next axis's (copies sit side by
    side); an unsorted one keeps neither.
    """
    prefix = [layout.indexed_axis]
    if len(layout.index_order) == 1 and layout.indexed_axis == 0:
        (other,) = layout.index_order
        if descending(selection, other):  # each run reversed by assemble
            return [0, other]
    for axis in layout.index_order:
        if selection.ordered(axis):
            prefix.append(axis)
            continue
        if nondecreasing(selection.positions[axis]):
            prefix.append(axis)
        break
    return prefix


def c_order(
    coords: npt.NDArray[np.int64],
    data: npt.NDArray[Any],
    shape: tuple[int, ...],
    prefix: Sequence[int],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    """Values in C order, as ``sparse.COO`` keeps them, by stable counting sorts: O(n) each,
    rather than sparse's argsort.

    The values arrive sorted lexicographically by the axes ``prefix``. If ``prefix`` restricted
    to the axes ``m..`` is exactly ``m, m+1, ...``, stable sorts by axes ``m-1, ..., 0`` leave
    ties in that order, which is C order: one pass for a CSC read, none for CSR. Values whose
    runs are not sorted (a writer need not sort them) fail the final check and get every pass.
    Along an axis far longer than the values (:data:`LOOKUP_SLACK`) a pass is a stable argsort:
    counts per position would be an array as long as the axis.
    """
    if data.size < 2:
        return coords, data
    rank = len(shape)
    lead = next(m for m in range(rank + 1) if [a for a in prefix if a >= m] == [*range(m, rank)])
    for axis in reversed(range(lead)):
        coords, data = _sorted_along(coords, data, axis, shape[axis])
    linear = np.ravel_multi_index(tuple(coords), shape)
    if bool(np.all(linear[1:] > linear[:-1])):
        return coords, data
    for axis in reversed(range(rank)):
        coords, data = _sorted_along(coords, data, axis, shape[axis])
    return coords, data


def _sorted_along(
    coords: npt.NDArray[np.int64], data: npt.NDArray[Any], axis: int, size: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    """``coords`` and ``data`` stably sorted by the coordinates along ``axis`` (of ``size``)."""
    if size > 8 * data.size + LOOKUP_SLACK:
        if bool(np.all(coords[axis][1:] >= coords[axis][:-1])):
            return coords, data
        order = np.argsort(coords[axis], kind="stable")
        return coords[:, order], data[order]
    counts = np.bincount(coords[axis], minlength=size)
    return sort_by_key(coords[axis], counts, coords, data)


def assemble(
    selection: Selection,
    layout: LayoutGeometry,
    runs: Runs,
    indices: npt.NDArray[np.integer[Any]],
    data: npt.NDArray[Any],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    """Coordinates (over :attr:`Selection.result_shape`) and values of the selection, C order.

    ``indices`` (any integer dtype) and ``data`` are the layout's runs for the selection's sorted
    distinct positions along its indexed axis, ``runs`` (their brackets, or a stretch's offsets
    as stored: no array of their lengths is made where a kernel takes them). ``data`` is the
    caller's to give: when the result keeps every value, it is the result's values, permuted in
    place.

    1. Rank 2: one kernel from the runs to the result (:func:`_assemble_rank2`), when it takes
       the selection. Otherwise:
    2. Unravel each value's index over ``index_order``; map every other axis's coordinate to its
       output slots (:func:`_slots`), dropping values no slot asks for and copying repeated ones.
    3. Along the indexed axis, copy whole runs into the caller's order: the run of each requested
       position, once per request, by repeating run starts.
    4. Put the values in C order by counting sorts over the axes the values are not yet sorted by
       (:func:`c_order`).
    """
    axis = layout.indexed_axis
    rank = len(selection.shape)
    kept_axes = [a for a in range(rank) if a not in selection.dropped]
    if rank == 2 and kept_axes:
        direct = _assemble_rank2(selection, layout, runs, indices, data)
        if direct is not None:
            coords, values = direct
            return (coords if rank == len(kept_axes) else coords[kept_axes]), values
    lengths = lengths_of(runs)
    rows: dict[int, Positions] = {}
    run_of = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
    origin: Positions | None = None  # which value of ``data`` each kept one is
    for other, column in zip(
        layout.index_order, np.unravel_index(indices, layout.index_shape), strict=True
    ):
        take, slots = _slots(column if origin is None else column[origin], selection, other)
        if take is not None:
            origin = take if origin is None else origin[take]
            run_of = run_of[take]
            rows = {a: row[take] for a, row in rows.items()}
        rows[other] = slots
    kept = lengths if origin is None else np.bincount(run_of, minlength=lengths.size)
    if selection.ordered(axis):
        rows[axis], per_run = run_of, kept
    else:  # whole runs, in the caller's order, each once per request
        asked = selection.inverse[axis]
        per_run = kept[asked]
        gather = np.repeat((np.cumsum(kept) - kept)[asked], per_run) + _within(per_run)
        origin = gather if origin is None else origin[gather]
        rows = {a: row[gather] for a, row in rows.items()}
        rows[axis] = np.repeat(np.arange(asked.size, dtype=np.int64), per_run)
    values = data if origin is None else data[origin]
    if not kept_axes:  # one cell
        return np.zeros((0, values.size), dtype=np.int64), values
    if rank == 2 and axis == 0 and selection.ordered(0) and descending(selection, 1):
        # each run holds its row's values by descending output column: reverse each run
        starts = np.cumsum(per_run) - per_run
        order = np.repeat(2 * starts + per_run - 1, per_run) - np.arange(values.size)
        rows[1], values = rows[1][order], values[order]
    coords = np.stack([rows[a] for a in kept_axes])
    prefix = [kept_axes.index(a) for a in _sorted_prefix(selection, layout) if a in kept_axes]
    return c_order(coords, values, selection.result_shape, prefix)


def assemble_points(
    points: Sequence[Positions],
    unique: Positions,
    layout: LayoutGeometry,
    lengths: Positions,
    indices: Positions,
    data: npt.NDArray[Any],
) -> tuple[Positions, npt.NDArray[Any]]:
    """Which points hold a value, and the values: a join of the points with the runs read.

    ``points`` are positions per axis (point ``i`` is one cell); the runs are those of the sorted
    distinct positions ``unique`` along the layout's indexed axis.

    1. Key each value by (its run, its index) and each point by (the run of its position along
       the indexed axis, its other coordinates raveled over ``index_order``).
    2. Sort the value keys if a writer left runs unsorted; find each point's key among them.
    """
    extent = max(layout.extent, 1)
    runs = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
    keys = runs * extent + indices
    if not bool(np.all(keys[1:] > keys[:-1])):
        order = np.argsort(keys, kind="stable")
        keys, data = keys[order], data[order]
    others = [points[axis] for axis in layout.index_order]
    raveled = np.ravel_multi_index(others, layout.index_shape) if others else 0
    wanted = np.searchsorted(unique, points[layout.indexed_axis]) * extent + raveled
    spot = np.searchsorted(keys, wanted)
    found = spot < keys.size
    found[found] = keys[spot[found]] == wanted[found]
    hits = np.flatnonzero(found)
    return hits, data[spot[hits]]
