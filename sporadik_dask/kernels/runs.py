"""Runs of a layout straight to a rank-2 result, in the order the selection asked.

The fetch gives each selected position's run (a start and a length in ``indices``/``data``);
these kernels lay the runs down as the result's rows or columns in one pass, without the sort a
generic COO constructor would do.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.kernels.compiled import LACKS_DTYPE, kernel

__all__ = [
    "ascending",
    "columns_of_runs",
    "copy_pieces",
    "gather_runs",
    "kept_of_runs",
    "rows_of_runs",
]


@kernel
def _gather_runs(table: Any, starts: Any, lengths: Any, out: Any, at: Any) -> None:
    for run in range(len(starts)):
        start, length, to = starts[run], lengths[run], at[run]
        out[to : to + length] = table[start : start + length]


def gather_runs(
    table: npt.NDArray[Any],
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    out: npt.NDArray[Any],
    at: npt.NDArray[np.int64],
) -> None:
    """Copy each stretch ``table[starts[r] : starts[r] + lengths[r]]`` to ``out[at[r]:]``.

    numpy's gather, ``table[np.repeat(starts, lengths) + within]``, builds three int64 arrays
    of one element per value (24 bytes a value beside an 8-byte one): 0.5 GB of them for an
    84 % cell mask of 17.9 M values, four times the CSR it made.
    """
    try:
        _gather_runs(table, starts, lengths, out, at)
    except LACKS_DTYPE:  # float16: numpy's gather
        total = int(lengths.sum())
        within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        out[np.repeat(at, lengths) + within] = table[np.repeat(starts, lengths) + within]


@kernel
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
    except LACKS_DTYPE:
        return None
    return (coords, out) if ordered else None


@kernel
def _rows_counted(lo: Any, hi: Any, starts: Any, indices: Any, slots: Any, extent: int) -> Any:
    offsets = np.zeros(extent + 1, dtype=np.int64)
    if starts is None:  # the runs end to end: every value, once each
        for i in range(len(indices)):
            slot = slots[indices[i]]
            if slot >= 0:
                offsets[slot + 1] += 1
    else:
        for run in range(len(lo)):
            for i in range(starts[run], starts[run] + (np.int64(hi[run]) - np.int64(lo[run]))):
                slot = slots[indices[i]]
                if slot >= 0:
                    offsets[slot + 1] += 1
    for row in range(extent):
        offsets[row + 1] += offsets[row]
    return offsets


@kernel
def _columns_of_runs(
    lo: Any,
    hi: Any,
    starts: Any,
    indices: Any,
    data: Any,
    slots: Any,
    offsets: Any,
    coords: Any,
    out: Any,
) -> None:
    for row in range(len(offsets) - 1):  # the row of every value, laid down in order
        coords[0, offsets[row] : offsets[row + 1]] = row
    start = np.int64(0)
    for run in range(len(lo)):
        if starts is not None:
            start = starts[run]
        stop = start + (np.int64(hi[run]) - np.int64(lo[run]))
        for i in range(start, stop):
            slot = slots[indices[i]]
            if slot >= 0:
                j = offsets[slot]
                coords[1, j] = run
                out[j] = data[i]
                offsets[slot] = j + 1
        start = stop


def columns_of_runs(
    lo: npt.NDArray[np.integer[Any]],
    hi: npt.NDArray[np.integer[Any]],
    starts: npt.NDArray[np.int64] | None,
    indices: npt.NDArray[Any],
    data: npt.NDArray[Any],
    slots: npt.NDArray[np.int64],
    extent: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]] | None:
    """Runs of a rank-2 layout read across: coordinates ``(slot, run)`` and values in C order.

    Output column ``c`` is a run of ``hi[c] - lo[c]`` values of ``indices`` and ``data``, at
    ``starts[c]``, or (``starts`` None) right after the run before, the first at 0: the runs as
    read, in order, with no array of their starts or lengths made (1.9 ms against 5.9 ms with
    ``np.cumsum``'s for a region of 1e6 positions). ``lo`` and ``hi`` may be a stretch's
    offsets as ``indptr`` stores them (int32, say): each is read into an int64 before any
    arithmetic. A value at index ``k`` goes to row ``slots[k]`` in ``[0, extent)`` (-1: left
    out). A counting sort by row: the values counted by row (runs end to end: in one pass over
    them, not run by run, 0.16 ms against 0.97 ms for 1e6 runs of 292,253 values), then the runs
    taken in column order, so each row's values arrive by column whatever the order within a
    run. The outputs are numpy's, made between the two passes: numpy asks for huge pages for
    arrays of 4 MiB and more, numba's allocator does not, and a read's fresh memory is much of
    its time (a region of 1e6 positions: 405 to 917 page faults against 1,427). None when a
    dtype numba cannot hold.
    """
    offsets = _rows_counted(lo, hi, starts, indices, slots, extent)
    total = int(offsets[-1])
    coords = np.empty((2, total), dtype=np.int64)
    out = np.empty(total, dtype=data.dtype)
    try:
        _columns_of_runs(lo, hi, starts, indices, data, slots, offsets, coords, out)
    except LACKS_DTYPE:
        return None
    return coords, out


@kernel
def _decreases(offsets: Any) -> int:
    found = 0
    for i in range(1, len(offsets)):  # no early return: numba vectorizes it (0.15 ms, not 0.9)
        found += offsets[i] < offsets[i - 1]
    return found


def ascending(offsets: npt.NDArray[np.integer[Any]]) -> bool:
    """Whether ``offsets`` never decrease: one pass, no array of comparisons (1 MB for a
    region of 1e6 positions)."""
    return bool(_decreases(offsets) == 0)


@kernel
def _copy_pieces(
    values: Any, starts: Any, stops: Any, places: Any, out: Any
) -> None:  # pragma: no cover - compiled
    for piece in range(starts.size):
        at = places[piece]
        for i in range(starts[piece], stops[piece]):
            out[at] = values[i]
            at += 1


def copy_pieces(
    values: npt.NDArray[Any],
    starts: npt.NDArray[np.int64],
    stops: npt.NDArray[np.int64],
    places: npt.NDArray[np.int64],
    out: npt.NDArray[Any],
) -> None:
    """``out[places[p]:][:stops[p] - starts[p]] = values[starts[p]:stops[p]]`` for every piece
    ``p``: the runs one decoded chunk holds, laid into their places, without the GIL (a slice
    assignment each in Python held it for ~1 us a piece, while other threads decode)."""
    try:
        _copy_pieces(values, starts, stops, places, out)
    except LACKS_DTYPE:
        for start, stop, at in zip(starts.tolist(), stops.tolist(), places.tolist(), strict=True):
            out[at : at + stop - start] = values[start:stop]


@kernel
def _kept_of_runs(lengths: Any, indices: Any, columns: Any, indptr: Any, kept: Any, at: Any) -> Any:
    count, value = 0, 0
    for run in range(len(lengths)):
        for _ in range(lengths[run]):
            column = columns[indices[value]]
            if column >= 0:
                kept[count], at[count] = column, value
                count += 1
            value += 1
        indptr[run + 1] = count
    return count


def kept_of_runs(
    lengths: npt.NDArray[np.int64], indices: npt.NDArray[Any], columns: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.int64]]:
    """Runs (one a row, ``lengths`` values each, laid end to end) as CSR rows of the columns
    ``columns`` gives their indices (-1: not kept), in one pass: the rows' ``indptr``, the kept
    values' new columns, and where each kept value sits among the runs' values."""
    indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    kept = np.empty(len(indices), dtype=np.int32)
    at = np.empty(len(indices), dtype=np.int64)
    count = _kept_of_runs(np.asarray(lengths, dtype=np.int64), indices, columns, indptr, kept, at)
    return indptr, kept[:count].copy(), at[:count]  # the columns may be held: not the whole
