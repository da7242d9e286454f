"""Compiled sorting kernels shared by the writer's shuffle and the reader's output.

Counts per key are always known before values move (from a bincount, or from ``indptr``), so a
stable counting sort puts every value straight into its place in one O(n) pass, where a
comparison sort would be O(n log n) and move each array once more.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from sporadik_dask.format.errors import LayoutError
from sporadik_dask.kernels import numba_cache

numba_cache.install()  # before the first kernel is defined: cached in the user's cache directory

__all__ = [
    "Regions",
    "add_runs",
    "check_runs",
    "columns_of_runs",
    "count_positions",
    "deal_by_lead",
    "deal_positions",
    "gather_leads",
    "group_runs",
    "rows_of_runs",
    "sort_by_code",
    "sort_by_key",
    "sort_by_lead",
    "split_by_bounds",
    "sum_runs",
]


@numba.njit(cache=True, nogil=True)
def _starts(counts: Any) -> Any:
    """Where each key's values begin in the sorted output: the exclusive running sum of counts."""
    offsets = np.empty(len(counts), dtype=np.int64)
    running = 0
    for key in range(len(counts)):
        offsets[key] = running
        running += counts[key]
    return offsets


@numba.njit(cache=True, nogil=True)
def _scatter(keys: Any, counts: Any, rows: Any, data: Any) -> Any:
    """Stable counting sort of the columns of ``rows`` and of ``data`` by ``keys``."""
    offsets = _starts(counts)
    out_rows = np.empty_like(rows)
    out_data = np.empty_like(data)
    for i in range(len(keys)):
        j = offsets[keys[i]]
        for r in range(rows.shape[0]):
            out_rows[r, j] = rows[r, i]
        out_data[j] = data[i]
        offsets[keys[i]] = j + 1
    return out_rows, out_data


@numba.njit(cache=True, nogil=True)
def _bucket(bounds: Any, position: Any) -> Any:
    """The partition ``b`` with ``bounds[b] <= position < bounds[b + 1]``: a binary search."""
    lo, hi = 0, len(bounds) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if bounds[mid] <= position:
            lo = mid
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True)
def _split(positions: Any, indices: Any, data: Any, bounds: Any, pairs: Any, out: Any) -> Any:
    counts = np.zeros(len(bounds) - 1, dtype=np.int64)
    ordered = True
    for i in range(len(positions)):
        position = positions[i]
        if position < bounds[0] or position >= bounds[-1]:
            return counts, False
        if i and position < positions[i - 1]:
            ordered = False
        counts[_bucket(bounds, position)] += 1
    if ordered:  # already in partition order: narrowed in place, no scatter
        for i in range(len(positions)):
            pairs[0, i] = positions[i]
            pairs[1, i] = indices[i]
            out[i] = data[i]
        return counts, True
    offsets = _starts(counts)
    for i in range(len(positions)):
        b = _bucket(bounds, positions[i])
        j = offsets[b]
        pairs[0, j] = positions[i]
        pairs[1, j] = indices[i]
        out[j] = data[i]
        offsets[b] = j + 1
    return counts, True


def split_by_bounds(
    positions: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    data: npt.NDArray[Any],
    bounds: npt.NDArray[np.int64],
    width: npt.DTypeLike,
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[np.int64]] | None:
    """Values stably sorted by the partition of ``bounds`` their position falls in, positions
    and indices narrowed to ``width``, and each partition's count; None for a dtype numba lacks.

    One pass counts, one writes: the only memory is the output (12 bytes a float32 value at
    int32), where a ``searchsorted`` and a scatter would add an int64 key per value and a copy.
    """
    pairs = np.empty((2, positions.shape[0]), dtype=width)
    out = np.empty_like(data)
    try:
        counts, inside = _split(positions, indices, data, bounds, pairs, out)
    except (numba.core.errors.TypingError, NotImplementedError):  # a dtype numba lacks: float16
        return None
    if not inside:
        raise LayoutError(
            f"A position lies outside {int(bounds[0])}..{int(bounds[-1]) - 1}, the positions "
            "the count pass planned; the input gave other coordinates the second time it was "
            "read. Make the input deterministic (seed its generator, or persist it)."
        )
    return pairs, out, counts


@numba.njit(cache=True, nogil=True)
def count_positions(counts: Any, positions: Any, start: Any) -> Any:
    """Add the values at each position ``start + k`` to ``counts[k]``; how many lie outside."""
    outside = 0
    for i in range(len(positions)):
        k = positions[i] - start
        if k < 0 or k >= len(counts):
            outside += 1
        else:
            counts[k] += 1
    return outside


@numba.njit(cache=True, nogil=True)
def deal_positions(
    offsets: Any, positions: Any, indices: Any, data: Any, start: Any, to: Any, out: Any
) -> None:
    """Put each value of one part in the next free slot of its position's run (``offsets``,
    advanced): called part after part, a stable counting sort of their values into place."""
    for i in range(len(positions)):
        k = positions[i] - start
        j = offsets[k]
        to[j] = indices[i]
        out[j] = data[i]
        offsets[k] = j + 1


@numba.njit(cache=True, nogil=True)
def check_runs(counts: Any, indices: Any, data: Any, maxima: Any) -> Any:
    """Each run's largest absolute value into ``maxima`` (NaN wins, as in ``np.maximum``), and
    whether some run is not ascending, and how many indices repeat their predecessor's.

    ``maxima`` is in :func:`~sporadik_dask.format.spec.maxima_dtype`: for signed integers ``abs`` of
    the minimum wraps to itself, a negative that is the largest magnitude there is, so it wins
    and is kept (like NaN), and stored in the unsigned ``maxima`` it is its magnitude.
    """
    unsorted = False
    repeated = 0
    at = 0
    for run in range(len(counts)):
        n = counts[run]
        if n == 0:
            continue
        largest = abs(data[at])
        for i in range(at + 1, at + n):
            if indices[i] < indices[i - 1]:
                unsorted = True
            elif indices[i] == indices[i - 1]:
                repeated += 1
            value = abs(data[i])
            if largest >= 0 and (value < 0 or value > largest or value != value):
                largest = value
        maxima[run] = largest
        at += n
    return unsorted, repeated


def sort_by_key(
    keys: npt.NDArray[Any], counts: npt.NDArray[Any], rows: npt.NDArray[Any], data: npt.NDArray[Any]
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """``rows`` (columns) and ``data`` stably sorted by ``keys`` in ``[0, len(counts))``.

    Returned as they are when ``keys`` is already non-decreasing, which the common inputs are.
    """
    if keys.size < 2 or bool(np.all(keys[1:] >= keys[:-1])):
        return rows, data
    try:
        scattered: tuple[npt.NDArray[Any], npt.NDArray[Any]] = _scatter(keys, counts, rows, data)
        return scattered
    except (numba.core.errors.TypingError, NotImplementedError):  # a dtype numba lacks: float16
        order = np.argsort(keys, kind="stable")
        return rows[:, order], data[order]


@numba.njit(cache=True, nogil=True)
def _rows_of_runs(
    starts: Any, lengths: Any, indices: Any, data: Any, slots: Any, reverse: bool
) -> Any:
    kept = np.zeros(len(starts), dtype=np.int64)
    every = True  # every value kept, the runs in order, each once: values permuted in place
    read = 0
    for run in range(len(starts)):
        last = -1
        for i in range(starts[run], starts[run] + lengths[run]):
            key = indices[i]
            if key <= last:  # a run not strictly ascending: the caller sorts it the long way
                return np.empty((2, 0), dtype=np.int64), data[:0], False
            last = key
            if slots[key] >= 0:
                kept[run] += 1
        every = every and kept[run] == lengths[run] and starts[run] == read
        read += lengths[run]
    total = kept.sum()
    coords = np.empty((2, total), dtype=np.int64)
    if every and total == len(data):
        for run in range(len(starts)):
            start, stop = starts[run], starts[run] + lengths[run]
            coords[0, start:stop] = run
            for i in range(start, stop):
                coords[1, i] = slots[indices[stop - 1 - (i - start) if reverse else i]]
            if reverse:
                for i in range(lengths[run] // 2):
                    data[start + i], data[stop - 1 - i] = data[stop - 1 - i], data[start + i]
        return coords, data, True
    out = np.empty(total, dtype=data.dtype)
    first = 0
    for run in range(len(starts)):
        j, step = (first + kept[run] - 1, -1) if reverse else (first, 1)
        for i in range(starts[run], starts[run] + lengths[run]):
            slot = slots[indices[i]]
            if slot >= 0:
                coords[0, j] = run
                coords[1, j] = slot
                out[j] = data[i]
                j += step
        first += kept[run]
    return coords, out, True


def rows_of_runs(
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    indices: npt.NDArray[Any],
    data: npt.NDArray[Any],
    slots: npt.NDArray[np.int64],
    *,
    reverse: bool,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]] | None:
    """Runs of a rank-2 layout read along: coordinates ``(run, slot)`` and values in C order.

    Output row ``r`` is the run of ``lengths[r]`` values at ``starts[r]`` of ``indices`` and
    ``data``; a value at index ``k`` goes to column ``slots[k]`` (-1: left out). ``slots``
    increase with ``k`` (``reverse``: decrease), so a run ascending by index is ascending by
    column read forwards (backwards). Two passes, each value read twice and written once into
    outputs of their final size: no coordinate row is built, gathered or sorted on the way.
    When every value of ``data`` is kept, runs in order, the values are ``data`` itself,
    reversed run by run in place if need be: ``data`` is the caller's to give.
    None when a run is not strictly ascending or a dtype numba cannot hold (``data`` untouched):
    the caller then sorts the general way.
    """
    try:
        coords, out, ordered = _rows_of_runs(starts, lengths, indices, data, slots, reverse)
    except (numba.core.errors.TypingError, NotImplementedError):  # a dtype numba lacks
        return None
    return (coords, out) if ordered else None


@numba.njit(cache=True, nogil=True)
def _columns_of_runs(
    starts: Any, lengths: Any, indices: Any, data: Any, slots: Any, extent: int
) -> Any:
    offsets = np.zeros(extent + 1, dtype=np.int64)
    for run in range(len(starts)):
        for i in range(starts[run], starts[run] + lengths[run]):
            slot = slots[indices[i]]
            if slot >= 0:
                offsets[slot + 1] += 1
    for row in range(extent):
        offsets[row + 1] += offsets[row]
    coords = np.empty((2, offsets[extent]), dtype=np.int64)
    out = np.empty(offsets[extent], dtype=data.dtype)
    for row in range(extent):  # the row of every value, laid down in order
        coords[0, offsets[row] : offsets[row + 1]] = row
    for run in range(len(starts)):
        for i in range(starts[run], starts[run] + lengths[run]):
            slot = slots[indices[i]]
            if slot >= 0:
                j = offsets[slot]
                coords[1, j] = run
                out[j] = data[i]
                offsets[slot] = j + 1
    return coords, out


def columns_of_runs(
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    indices: npt.NDArray[Any],
    data: npt.NDArray[Any],
    slots: npt.NDArray[np.int64],
    extent: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]] | None:
    """Runs of a rank-2 layout read across: coordinates ``(slot, run)`` and values in C order.

    Output column ``c`` is the run of ``lengths[c]`` values at ``starts[c]`` of ``indices`` and
    ``data``; a value at index ``k`` goes to row ``slots[k]`` in ``[0, extent)`` (-1: left out).
    A counting sort by row: the runs are taken in column order, so each row's values arrive by
    column whatever the order within a run; only the column and the value are written at random
    places, the row laid down in order afterwards. None when a dtype numba cannot hold.
    """
    try:
        result: tuple[npt.NDArray[np.int64], npt.NDArray[Any]]
        result = _columns_of_runs(starts, lengths, indices, data, slots, extent)
        return result
    except (numba.core.errors.TypingError, NotImplementedError):  # a dtype numba lacks
        return None


@numba.njit(cache=True, nogil=True)
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
    except (numba.core.errors.TypingError, NotImplementedError):
        return None


@numba.njit(cache=True, nogil=True)
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
    groups = np.empty(values.size, dtype=_code_dtype(acc.size))
    positions = np.empty(values.size, dtype=_code_dtype(last))
    sums = np.empty(values.size, dtype=dtype)
    try:
        m, bad = _group_runs(lengths, where, codes, values, skipna, acc, mark, groups, positions,
                             sums, first)  # fmt: skip
    except (numba.core.errors.TypingError, NotImplementedError):
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


@numba.njit(cache=True, nogil=True)
def _add_runs(
    bases: Any,
    lengths: Any,
    indices: Any,
    extent: int,
    lookup: Any,
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
                index = lookup[index]
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
    first (a position to its group, -1: nowhere), so the index is the grouped axis's position.

    Values add in the order they come, in the accumulators' dtype, so the sums equal a
    ``bincount`` of the same values. ``indices`` may be of any signed integer dtype, as stored:
    each is checked against ``extent`` as it is used. False when numba cannot hold a dtype
    (nothing added then). Raises :class:`LayoutError` for a stored index past its axis (a
    damaged store).
    """
    try:
        bad = _add_runs(
            bases, lengths, indices, extent, lookup, stride, values, skipna, total, *moments, nans
        )
    except (numba.core.errors.TypingError, NotImplementedError):
        return False
    if bad >= 0:
        raise LayoutError(
            f"stored index {int(indices[bad])} lies past its axis: the layout is damaged, and "
            "a sum over it would add values into other cells. Validate the store "
            "(`sporadik-dask validate`) and rewrite it."
        )
    return True


@numba.njit(cache=True, nogil=True)
def _low_pass(
    keys: Any, ids: Any, data: Any, out_keys: Any, out_ids: Any, out_data: Any, shift: int
) -> None:
    mask = (1 << shift) - 1
    counts = np.zeros(mask + 2, dtype=np.int64)
    for i in range(len(keys)):
        counts[(keys[i] & mask) + 1] += 1
    for d in range(mask + 1):
        counts[d + 1] += counts[d]
    for i in range(len(keys)):
        digit = keys[i] & mask
        j = counts[digit]
        counts[digit] = j + 1
        out_keys[j] = keys[i]
        out_ids[j] = ids[i]
        out_data[j] = data[i]


@numba.njit(cache=True, nogil=True)
def _high_pass(
    keys: Any, ids: Any, data: Any, out_ids: Any, out_data: Any, shift: int, digits: int
) -> None:
    counts = np.zeros(digits + 1, dtype=np.int64)
    for i in range(len(keys)):
        counts[(keys[i] >> shift) + 1] += 1
    for d in range(digits):
        counts[d + 1] += counts[d]
    for i in range(len(keys)):
        digit = keys[i] >> shift
        j = counts[digit]
        counts[digit] = j + 1
        out_ids[j] = ids[i]
        out_data[j] = data[i]


def sort_by_lead(
    ids: npt.NDArray[np.int64], data: npt.NDArray[Any], span: int, leads: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    """``ids`` and ``data`` stably sorted by ``ids // span`` (in ``[0, leads)``), in place."""
    if ids.size < 2 or leads < 2:
        return ids, data
    return sort_by_code((ids // span).astype(_code_dtype(leads)), ids, data, leads)


def _code_dtype(leads: int) -> type[np.signedinteger[Any]]:
    return np.int32 if leads < 2**31 else np.int64


def sort_by_code(
    codes: npt.NDArray[Any], ids: npt.NDArray[Any], data: npt.NDArray[Any], leads: int
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """``ids`` and ``data`` stably sorted by ``codes`` (in ``[0, leads)``), in place; ``codes``
    is spent (it holds the low pass's order afterwards).

    Two stable counting passes over the low and high bits of the key, about ``sqrt(leads)``
    buckets each: a single pass over tens of thousands of keys writes to as many places at once,
    a cache miss per value (86 M values into 50,000 keys: 6.9 s); a few hundred stay in cache.
    """
    if ids.size < 2 or leads < 2:
        return ids, data
    shift = max(1, (int(leads - 1).bit_length() + 1) // 2)
    spare_keys, spare_ids = np.empty_like(codes), np.empty_like(ids)
    spare_data = np.empty_like(data)
    _low_pass(codes, ids, data, spare_keys, spare_ids, spare_data, shift)
    digits = ((leads - 1) >> shift) + 1
    _high_pass(spare_keys, spare_ids, spare_data, ids, data, shift, digits)
    return ids, data


@numba.njit(cache=True, nogil=True)
def _unravel_into(coords: Any, stride: int, at: int, cell: int, shape: Any) -> None:
    """Cell ``cell`` (raveled over ``shape``) as column ``at`` of flat coordinates whose rows
    are ``stride`` apart."""
    for r in range(len(shape) - 1, -1, -1):
        coords[r * stride + at] = cell % shape[r]
        cell //= shape[r]


@numba.njit(cache=True, nogil=True)
def _place(counts: Any, offsets: Any, data: Any, span: int, shape: Any, split: bool, fill: Any,
           ends: Any, coords: Any, out: Any) -> int:  # fmt: skip
    capacity = out.size
    j = 0
    for lead in range(len(counts)):
        n = counts[lead]
        k = fill[lead]
        if k + n > ends[lead]:
            return lead  # more cells than the lead's room: the caller's bound was wrong
        fill[lead] = k + n
        for at in range(k, k + n):
            out[at] = data[j]
            if split:  # rank 2, one lead per row: row 0 (the lead) is laid down by _compact
                coords[capacity + at] = offsets[j]
            else:
                _unravel_into(coords, capacity, at, lead * span + offsets[j], shape)
            j += 1
    return -1


@numba.njit(cache=True, nogil=True)
def _place_codes(codes: Any, offsets: Any, data: Any, fill: Any, ends: Any, coords: Any,
                 out: Any) -> int:  # fmt: skip
    capacity = out.size
    for i in range(len(codes)):
        lead = codes[i]
        k = fill[lead]
        if k >= ends[lead]:
            return int(lead)  # more cells than the lead's room: the caller's bound was wrong
        fill[lead] = k + 1
        coords[capacity + k] = offsets[i]  # row 0, the lead, is laid down by _compact
        out[k] = data[i]
    return -1


@numba.njit(cache=True, nogil=True)
def _compact(coords: Any, out: Any, starts: Any, fill: Any, rows: int, split: bool) -> int:
    capacity = out.size
    n = 0
    for lead in range(len(starts)):
        n += fill[lead] - starts[lead]
    for r in range(rows):  # every move is to the left, so no unread cell is overwritten
        at = r * n
        for lead in range(len(starts)):
            if split and r == 0:  # rank 2, one lead per row: the row is the lead
                coords[at : at + fill[lead] - starts[lead]] = lead
                at += fill[lead] - starts[lead]
                continue
            for k in range(starts[lead], fill[lead]):
                coords[at] = coords[r * capacity + k]
                at += 1
    at = 0
    for lead in range(len(starts)):
        for k in range(starts[lead], fill[lead]):
            out[at] = out[k]
            at += 1
    return n


@numba.njit(cache=True, nogil=True)
def _deal(codes: Any, offsets: Any, data: Any, fill: Any, out_offsets: Any, out_data: Any) -> None:
    for i in range(len(codes)):
        k = fill[codes[i]]
        fill[codes[i]] = k + 1
        out_offsets[k] = offsets[i]
        out_data[k] = data[i]


def deal_by_lead(
    parts: Sequence[tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]],
    leads: int,
    offset_dtype: Any,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any], npt.NDArray[Any]]:
    """Cells given part by part as each one's lead, offset and value, each lead's in C order,
    stably sorted by lead in one counting pass over the parts as they are (none joined first):
    how many cells each lead holds, and their offsets (in ``offset_dtype``) and values. Meant
    for the cells of one span of a reduction, a few million: the leads' write positions then
    stay in cache, where a whole result's would not (:func:`sort_by_code`)."""
    counts = np.zeros(leads, dtype=np.int64)
    for codes, _, _ in parts:
        counts += np.bincount(codes, minlength=leads)
    n = int(counts.sum())
    dtype = parts[0][2].dtype if parts else np.dtype(np.float64)
    out_offsets, out_data = np.empty(n, dtype=offset_dtype), np.empty(n, dtype=dtype)
    fill = np.cumsum(counts) - counts
    for codes, offsets, data in parts:
        _deal(codes, offsets, data, fill, out_offsets, out_data)
    return counts, out_offsets, out_data


@numba.njit(cache=True, nogil=True)
def _gather_leads(counts: Any, starts: Any, offsets: Any, data: Any, span: int, shape: Any,
                  split: bool, coords: Any, out: Any) -> None:  # fmt: skip
    n = out.size
    at = 0
    for lead in range(counts.shape[1]):
        for part in range(counts.shape[0]):
            k = starts[part, lead]
            for i in range(k, k + counts[part, lead]):
                out[at] = data[i]
                if split:  # rank 2, one lead per row: the lead and the offset
                    coords[at] = lead
                    coords[n + at] = offsets[i]
                else:
                    _unravel_into(coords, n, at, lead * span + offsets[i], shape)
                at += 1


def gather_leads(
    shape: tuple[int, ...],
    span: int,
    parts: Sequence[tuple[npt.NDArray[np.int64], npt.NDArray[Any], npt.NDArray[Any]]],
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Coordinates ``(ndim, n)`` and values in C order of parts that each hold, lead by lead,
    ``counts[l]`` cells of lead ``l`` at ``offsets`` among its ``span`` cells, with ``data``;
    within a lead, every cell of one part comes before every cell of the next.

    The result is written in order, lead after lead, each part read where it left off: a few
    read streams and one write stream, where laying each part into regions of the result in
    turn writes to every lead's region at once (a cache miss per stretch, a stretch per part
    and lead)."""
    counts = np.stack([np.asarray(p[0], dtype=np.int64) for p in parts])
    sizes = counts.sum(axis=1)
    starts = np.cumsum(counts, axis=1) - counts + (np.cumsum(sizes) - sizes)[:, None]
    n = int(sizes.sum())
    offsets = np.concatenate([p[1] for p in parts])  # one array each: numba's lists compile
    data = np.concatenate([p[2] for p in parts])  # in every process, about 0.8 s
    coords = np.empty(len(shape) * n, dtype=_code_dtype(max(shape, default=0)))
    out = np.empty(n, dtype=data.dtype)
    split = len(shape) == 2 and span == shape[1]
    _gather_leads(counts, starts, offsets, data, span, np.asarray(shape, dtype=np.int64), split,
                  coords, out)  # fmt: skip
    return coords.reshape(len(shape), n), out


class Regions:
    """A ``sparse.COO``'s coordinates and values laid down in C order while its cells arrive
    in another: one region per *lead* cell (the output cells raveled over the leading axes,
    ``span`` cells each), sized by a bound on the cells the lead can receive. Cells arrive in C
    order within each lead; at rank 2 they go straight to their lead's region in any
    interleaving of leads (:meth:`place_codes`), otherwise a batch sorted by lead appends a
    stretch to each region in turn (:meth:`place_leads`). :meth:`result` closes the gaps in
    place and gives the unused tail back. Memory: the bound's worth of coordinates and values,
    never a second copy of either.
    """

    def __init__(
        self, shape: tuple[int, ...], span: int, bound: npt.NDArray[np.int64], dtype: Any
    ) -> None:
        self.shape, self.span = shape, span
        self._shape = np.asarray(shape, dtype=np.int64)
        self._split = len(shape) == 2 and span == shape[1]
        self.ends = np.cumsum(bound, dtype=np.int64)
        self.starts = self.ends - bound
        self.fill = self.starts.copy()
        capacity = int(self.ends[-1]) if self.ends.size else 0
        # int32 coordinates when every axis fits: sparse keeps them, and they take half
        self.coords = np.empty(len(shape) * capacity, dtype=_code_dtype(max(shape, default=0)))
        self.values = np.empty(capacity, dtype=dtype)

    def place(self, ids: npt.NDArray[np.int64], data: npt.NDArray[Any]) -> None:
        """Append cells ``ids`` (raveled, each lead's in C order) holding ``data``."""
        self.place_cells(ids // self.span, ids % self.span, data)

    def place_cells(
        self, codes: npt.NDArray[Any], offsets: npt.NDArray[Any], data: npt.NDArray[Any]
    ) -> None:
        """Append cells given as each one's lead (``codes``, spent) and offset among the lead's
        cells, each lead's in C order: :meth:`place_codes` at rank 2, else sorted by lead and
        :meth:`place_leads`."""
        if self._split:
            self.place_codes(codes, offsets, data)
            return
        leads = np.bincount(codes, minlength=self.ends.size)
        self.place_leads(leads, *sort_by_code(codes, offsets, data, self.ends.size))

    def place_leads(
        self, leads: npt.NDArray[Any], offsets: npt.NDArray[Any], data: npt.NDArray[Any]
    ) -> None:
        """Append ``leads[l]`` cells to each lead ``l`` in turn: cells at ``offsets`` (among
        the lead's ``span``) holding ``data``. No division per cell at rank 2."""
        bad = _place(
            leads, offsets, data, self.span, self._shape, self._split, self.fill, self.ends,
            self.coords, self.values,
        )  # fmt: skip
        if bad >= 0:
            self._refuse(bad, int(leads[bad]))

    def place_codes(
        self, codes: npt.NDArray[Any], offsets: npt.NDArray[Any], data: npt.NDArray[Any]
    ) -> None:
        """Append cells to their leads, given as each cell's lead (``codes``) and offset, in C
        order within each lead, at rank 2 with one lead per row: each cell straight into its
        region, in the order they come. A counting pass by lead first was slower (68 M cells
        into 50,000 regions: 1.42 s against 0.95 s): the regions' pages are huge ones, so the
        TLB holds them all, and the last line written of each region stays in cache."""
        if not self._split:
            raise ValueError("place_codes lays down rank-2 regions of one row each")
        bad = _place_codes(codes, offsets, data, self.fill, self.ends, self.coords, self.values)
        if bad >= 0:
            self._refuse(bad, int(np.count_nonzero(codes == bad)))

    def prefault(self) -> None:
        """Touch the pages of the lead row, which :meth:`place_codes` leaves for
        :meth:`result` to lay down: on a thread of its own, first-touch page faults (the dearest
        part of writing fresh memory, on a virtual machine above all) overlap the pass instead
        of lengthening its end."""
        if self._split:
            self.coords[: self.values.size] = 0

    def _refuse(self, lead: int, more: int) -> None:
        raise LayoutError(
            f"output lead {lead} receives {int(self.fill[lead] - self.starts[lead])} + "
            f"{more} cells, more than its bound of {int(self.ends[lead] - self.starts[lead])} "
            "allows: the store's layouts disagree on how many values it holds, and the result "
            "would overwrite other cells. Validate the store (`sporadik-dask validate`) and "
            "rewrite it."
        )

    def result(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
        """Coordinates ``(ndim, n)`` and values of every cell placed, in C order; the buffers
        are shrunk in place (they are this object's no longer)."""
        rows = len(self.shape)
        n = _compact(self.coords, self.values, self.starts, self.fill, rows, self._split)
        coords, values = self.coords, self.values
        self.coords, self.values = np.empty(0, np.int64), np.empty(0, values.dtype)
        coords.resize(rows * n, refcheck=False)  # realloc: the tail's pages go back
        values.resize(n, refcheck=False)
        return coords.reshape(rows, n), values
