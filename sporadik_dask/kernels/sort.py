"""Stable counting sorts, the write's shuffle and the reader's reorderings.

Counts per key are always known before values move (from a bincount, or from ``indptr``), so a
stable counting sort puts every value straight into its place in one O(n) pass, where a
comparison sort would be O(n log n) and move each array once more.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.format.errors import LayoutError
from sporadik_dask.kernels.compiled import LACKS_DTYPE, kernel

__all__ = [
    "check_runs",
    "code_dtype",
    "count_positions",
    "deal_positions",
    "sort_by_code",
    "sort_by_key",
    "sort_by_lead",
    "split_by_bounds",
    "stable_order",
]


@kernel
def _starts(counts: Any) -> Any:
    """Where each key's values begin in the sorted output: the exclusive running sum of counts."""
    offsets = np.empty(len(counts), dtype=np.int64)
    running = 0
    for key in range(len(counts)):
        offsets[key] = running
        running += counts[key]
    return offsets


@kernel
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


@kernel
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


@kernel
def _split(
    positions: Any, indices: Any, data: Any, bounds: Any, pairs: Any, out: Any, relative: Any
) -> Any:
    counts = np.zeros(len(bounds) - 1, dtype=np.int64)
    ordered = True
    for i in range(len(positions)):
        position = positions[i]
        if position < bounds[0] or position >= bounds[-1]:
            return counts, False
        if i and position < positions[i - 1]:
            ordered = False
        b = _bucket(bounds, position)
        if relative and position - bounds[b] >= 2**31:  # past what the plan said it holds
            return counts, False
        counts[b] += 1
    if ordered:  # already in partition order: narrowed in place, no scatter
        for i in range(len(positions)):
            base = bounds[_bucket(bounds, positions[i])] if relative else 0
            pairs[0, i] = positions[i] - base
            pairs[1, i] = indices[i]
            out[i] = data[i]
        return counts, True
    offsets = _starts(counts)
    for i in range(len(positions)):
        b = _bucket(bounds, positions[i])
        j = offsets[b]
        pairs[0, j] = positions[i] - (bounds[b] if relative else 0)
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
    relative: bool = False,
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[np.int64]] | None:
    """Values stably sorted by the partition of ``bounds`` their position falls in, positions
    and indices narrowed to ``width``, and each partition's count; None for a dtype numba lacks.
    ``relative``: each position counted from its partition's first (``bounds[b]``), so
    positions past 2**31 fit an int32 ``width`` when every partition spans fewer.

    One pass counts, one writes: the only memory is the output (12 bytes a float32 value at
    int32), where a ``searchsorted`` and a scatter would add an int64 key per value and a copy.
    """
    pairs = np.empty((2, positions.shape[0]), dtype=width)
    out = np.empty_like(data)
    try:
        counts, inside = _split(positions, indices, data, bounds, pairs, out, relative)
    except LACKS_DTYPE:
        return None
    if not inside:
        raise LayoutError(
            f"A position lies outside {int(bounds[0])}..{int(bounds[-1]) - 1}, the positions "
            "the count pass planned; the input gave other coordinates the second time it was "
            "read. Make the input deterministic (seed its generator, or persist it)."
        )
    return pairs, out, counts


@kernel
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


@kernel
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


@kernel
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


#: Indices packed beside their keys at a time: 8 MiB of int64, where the whole index array would
#: add 8 bytes a key at the peak of a count pass's largest sort (50 MiB traced at 11 M values).
PACK_STEP = 2**20


def stable_order(
    keys: npt.NDArray[np.int64], bound: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``keys`` (in ``[0, bound)``) sorted, and the order ``np.argsort(keys, kind="stable")``
    gives.

    numpy sorts int64 stably by timsort, and unstably by a vectorized sort nearly ten times
    faster (1.4 M raveled cells: 0.14 s against 0.018 s, both results). Each key shifted up by
    the bits of its index, with the index beside it, is unique, so the fast sort of the pairs
    orders equal keys by index, as the stable sort does; keys too wide for their index beside
    them in an int64 take the stable sort.
    """
    shift = max(keys.shape[0] - 1, 0).bit_length()
    if bound > 2 ** (63 - shift):
        order = np.argsort(keys, kind="stable")
        return keys[order], order
    packed = np.left_shift(keys, shift, dtype=np.int64)  # new: the caller's keys stay as given
    for start in range(0, keys.shape[0], PACK_STEP):  # no index array as long as the keys
        stop = min(start + PACK_STEP, keys.shape[0])
        packed[start:stop] |= np.arange(start, stop, dtype=np.int64)
    packed.sort()
    order = packed & ((1 << shift) - 1)
    packed >>= shift  # the sorted keys, in place: one array fewer at the peak
    return packed, order


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
    except LACKS_DTYPE:
        order = np.argsort(keys, kind="stable")
        return rows[:, order], data[order]


@kernel
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


@kernel
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
    return sort_by_code((ids // span).astype(code_dtype(leads)), ids, data, leads)


def code_dtype(leads: int) -> type[np.signedinteger[Any]]:
    return np.int32 if leads < 2**31 else np.int64


def sort_by_code(
    codes: npt.NDArray[Any], ids: npt.NDArray[Any], data: npt.NDArray[Any], leads: int
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """``ids`` and ``data`` stably sorted by ``codes`` (in ``[0, leads)``), in place; ``codes``
    is spent (it holds the low pass's order afterwards).

    Two stable counting passes over the low and high bits of the key, about ``sqrt(leads)`` buckets
    each: a single pass over tens of thousands of keys writes to as many places at once, a cache
    miss per value (docs/benchmarks.md, "Numbers behind the code's choices"); a few hundred stay in
    cache.
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
