"""Quantiles and medians of lines from their stored values alone, as numpy gives them on the
dense lines (pure).

A line's quantile is an order statistic of its values: its stored values and, between those
below the absent cells' value and the rest, that value once per absent cell. So the stored
values sorted, and a count per line of those below, find any order statistic without the dense
line; numpy's interpolation is then taken step for step (``numpy.lib._function_base_impl``'s
``_get_indexes``, ``_get_gamma`` and ``_lerp`` for ``quantile``, the mean of the middle pair for
``median``), so the result is numpy's to the last bit.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = [
    "Lines",
    "extreme_positions",
    "line_medians",
    "line_quantiles",
    "lines_of",
    "median_dtype",
]


class Lines(NamedTuple):
    """Each line's values in order, as a sorted array of its stored values and counts."""

    #: Every line's stored values that are not NaN, sorted, line after line.
    ordered: npt.NDArray[Any]
    #: Where each line's values start in ``ordered``.
    starts: npt.NDArray[np.int64]
    #: How many of each line's stored values are not NaN.
    stored: npt.NDArray[np.int64]
    #: How many of each line's stored values sort before the absent cells' value.
    below: npt.NDArray[np.int64]
    #: How many cells of each line hold the absent cells' value (none if it is NaN).
    implicit: npt.NDArray[np.int64]
    #: How many cells of each line are NaN, stored or absent.
    nans: npt.NDArray[np.int64]
    #: The absent cells' value, in the values' dtype.
    fill: Any

    def at(self, rank: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """The value of rank ``rank`` (from 0, among the line's values that are not NaN) of
        each line, ``rank`` of any shape ending in the lines' (a rank past a line's end, kept
        in bounds by the caller, gives any value)."""
        implicit = self.implicit
        stored = np.where(rank < self.below, rank, rank - implicit)
        if self.ordered.size == 0:
            taken = np.full(rank.shape, self.fill, self.ordered.dtype)
        else:
            where = np.clip(self.starts + np.clip(stored, 0, None), 0, self.ordered.size - 1)
            taken = self.ordered[where]
        absent = (rank >= self.below) & (rank < self.below + implicit)
        result: npt.NDArray[Any] = np.where(absent, self.fill, taken).astype(self.ordered.dtype)
        return result


def lines_of(
    lines: npt.NDArray[np.int64], values: npt.NDArray[Any], count: int, extent: int, fill: Any = 0
) -> Lines:
    """The :class:`Lines` of ``count`` lines of ``extent`` cells each, the stored values
    ``values`` lying on lines ``lines`` (in any order), the other cells holding ``fill``.

    1. Sort the values by line, then value (``lexsort``: NaN last in each line).
    2. Count each line's stored values, its NaN, and those below ``fill``.
    3. The absent cells are ``extent`` less the stored ones: values ``fill``, or NaN.
    """
    dtype = values.dtype
    fill = np.asarray(fill).astype(dtype, copy=False)[()] if dtype.kind in "biuf" else fill
    nan = np.isnan(values) if dtype.kind in "fc" else np.zeros(values.shape, bool)
    stored = np.bincount(lines, minlength=count).astype(np.int64)
    nans = np.bincount(lines[nan], minlength=count).astype(np.int64)
    kept = lines[~nan], values[~nan]
    order = np.lexsort((kept[1], kept[0]))
    ordered = kept[1][order]
    numbers = stored - nans
    starts = np.concatenate(([0], np.cumsum(numbers)[:-1])).astype(np.int64)
    below = np.bincount(kept[0][kept[1] < fill], minlength=count).astype(np.int64)
    absent = extent - stored
    if dtype.kind in "fc" and np.isnan(fill):
        nans, absent = nans + absent, np.zeros(count, np.int64)
    return Lines(ordered, starts, numbers, below, absent, nans, fill)


def line_quantiles(lines: Lines, q: npt.NDArray[np.float64], *, skipna: bool) -> Any:
    """Each line's quantiles ``q`` by numpy's default (linear) method, shape ``(q, lines)``,
    float64: numpy's ``nanquantile`` with ``skipna`` (NaN left out, a line of none NaN), else
    its ``quantile`` (a line holding NaN is NaN).

    1. A line of ``n`` values has virtual index ``(n - 1) q``; its neighbours are the values of
       ranks ``floor`` and ``floor + 1``, both the last past ``n - 1`` and the first below 0.
    2. ``gamma`` is the virtual index less numpy's lower index (``-1`` for the last), and the
       result ``a + (b - a) gamma``, or ``b - (b - a)(1 - gamma)`` from ``gamma`` 0.5 up.
    """
    n = lines.implicit + lines.stored
    q = np.asarray(q, np.float64).reshape(-1, 1)
    virtual = (n - 1) * q
    previous = np.floor(virtual)
    following = previous + 1
    above = virtual >= n - 1
    previous[above], following[above] = -1, -1
    below = virtual < 0
    previous[below], following[below] = 0, 0
    last = np.broadcast_to(n - 1, virtual.shape)
    a = lines.at(np.where(previous < 0, last, previous).astype(np.int64))
    b = lines.at(np.where(following < 0, last, following).astype(np.int64))
    gamma = virtual - previous
    with np.errstate(invalid="ignore", over="ignore"):
        difference = b - a
        result = np.add(a, difference * gamma)
        np.subtract(b, difference * (1 - gamma), out=result, where=gamma >= 0.5, casting="unsafe")
    missing = (n == 0) if skipna else (lines.nans > 0) | (n == 0)
    result[:, missing] = np.nan
    return result


def median_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """numpy's median's dtype: float64 for integers and booleans, else the values'."""
    return np.dtype(np.float64) if dtype.kind in "biu" else np.dtype(dtype)


def line_medians(lines: Lines, *, skipna: bool) -> Any:
    """Each line's median as numpy's ``nanmedian`` (``skipna``) or ``median`` gives it: the
    middle value, or the mean of the middle two (their sum, halved, in numpy's accumulator:
    float64 for integers, float32 for float16), NaN for a line of no value."""
    n = lines.implicit + lines.stored
    dtype = median_dtype(lines.ordered.dtype)
    accumulator = np.dtype(np.float32) if dtype == np.float16 else dtype
    high = lines.at(np.maximum(n // 2, 0)).astype(accumulator)
    low = lines.at(np.maximum((n - 1) // 2, 0)).astype(accumulator)
    with np.errstate(invalid="ignore", over="ignore"):
        middle = np.where(n % 2 == 1, high, (low + high) / accumulator.type(2))
    result = middle.astype(dtype)
    missing = (n == 0) if skipna else (lines.nans > 0) | (n == 0)
    result[missing] = np.nan
    return result


def extreme_positions(
    lines: npt.NDArray[np.int64],
    index: npt.NDArray[np.int64],
    values: npt.NDArray[Any],
    count: int,
    extent: int,
    fill: Any = 0,
    *,
    largest: bool,
    skipna: bool,
) -> npt.NDArray[np.int64]:
    """Each line's first position of its largest (``largest``) or smallest value, as numpy's
    ``nanargmax``/``nanargmin`` (``skipna``) or ``argmax``/``argmin`` give it on the dense
    lines of ``extent`` cells whose stored values ``values`` lie at ``index`` on ``lines``,
    every other cell ``fill``.

    1. The values put in order of line, then position (no sort when they come so, as a
       layout's runs do).
    2. Each line's best stored value that is not NaN (a segment's maximum or minimum), and the
       first position holding it.
    3. Each line's first absent cell: the first position its stored positions skip.
    4. The absent value wins where it beats the best stored value, and where it ties it, if it
       comes first. Not ``skipna``, a line's first NaN wins; ``skipna``, a line of only NaN is
       refused as numpy refuses it.
    """
    if values.size and not _in_order(lines, index):
        order = np.lexsort((index, lines))
        lines, index, values = lines[order], index[order], values[order]
    nan = np.isnan(values) if values.dtype.kind == "f" else np.zeros(values.shape, bool)
    stored = np.bincount(lines, minlength=count)
    numbers = stored - np.bincount(lines[nan], minlength=count)
    nan_fill = values.dtype.kind == "f" and bool(np.isnan(fill))
    if skipna and np.any((numbers == 0) & ((stored == extent) | nan_fill)):
        raise ValueError("All-NaN slice encountered")  # numpy's words
    starts = np.concatenate(([0], np.cumsum(stored)[:-1])).astype(np.int64)
    some = stored > 0
    segments = starts[some]  # each line holding a stored value: its values' segment

    def per_line(ufunc: Any, column: npt.NDArray[Any], empty: Any) -> npt.NDArray[Any]:
        found = np.full(count, empty, column.dtype)
        found[some] = ufunc.reduceat(column, segments) if column.size else found[some]
        return found

    has = numbers > 0
    reach = _reach(values.dtype, largest)  # NaN never best
    best = per_line(np.maximum if largest else np.minimum, np.where(nan, reach, values), 0)
    holds = (values == np.repeat(best, stored)) & ~nan
    at = np.where(has, per_line(np.minimum, np.where(holds, index, extent), extent), extent)
    # each line's first absent cell: the first rank at which its positions skip ahead
    rank = np.arange(values.size) - np.repeat(starts, stored)
    skipped = np.where(index != rank, rank, np.repeat(stored, stored)).astype(np.int64)
    absent = per_line(np.minimum, skipped, 0)
    zero = values.dtype.type(fill)  # NaN: beats and ties nothing
    beats = (~has & ~nan_fill) | ((zero > best) if largest else (zero < best))
    wins = (absent < extent) & (beats | ((zero == best) & (absent < at)))
    result = np.where(wins, absent, at).astype(np.int64)
    if not skipna and (np.any(nan) or nan_fill):
        first_nan = np.where(nan_fill, absent, extent).astype(np.int64)
        nan_at = per_line(np.minimum, np.where(nan, index, extent).astype(np.int64), extent)
        first_nan = np.minimum(first_nan, nan_at)
        result = np.where(first_nan < extent, first_nan, result)
    return result


def _in_order(lines: npt.NDArray[np.int64], index: npt.NDArray[np.int64]) -> bool:
    """Whether values come line by line, each line's positions ascending."""
    line_steps = np.diff(lines)
    return bool(np.all((line_steps > 0) | ((line_steps == 0) & (np.diff(index) > 0))))


def _reach(dtype: np.dtype[Any], largest: bool) -> Any:
    """A value no stored value is beaten by: the dtype's least for a maximum, greatest for a
    minimum (infinities for floats, which a stored infinity ties; a tie picks by NaN-free
    positions)."""
    if dtype.kind == "f":
        return dtype.type(-np.inf if largest else np.inf)
    if dtype.kind == "b":
        return dtype.type(not largest)
    info = np.iinfo(dtype)
    return dtype.type(info.min if largest else info.max)
