"""The dtype a write stores values in: the input's own, or an integer dtype that holds every
value exactly, when asked.

Counts are often kept as float32: stored as the smallest integer dtype that holds them (uint8 or
uint16 for most count matrices) they take a half or a quarter of the bytes before compression,
fewer after it, and decode faster (``benchmarks/codecs.py``). Which dtype fits is known only once
every value has been seen, so the count pass, which reads every value already, summarises each
piece's (:class:`ValueRange`), merges the summaries in its tree, and :func:`stored_dtype` picks
the dtype from the total before the store's arrays are made: a value that no integer holds
exactly is refused before anything is written.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sporadik_dask.format.errors import LayoutError

__all__ = [
    "SMALLEST_INTEGER",
    "ValueRange",
    "check_dtype_option",
    "merge_ranges",
    "stored_dtype",
]

#: The ``dtype=`` of a write that stores values as the smallest integer dtype holding them.
SMALLEST_INTEGER = "smallest-integer"
#: The integer dtypes :data:`SMALLEST_INTEGER` chooses from, narrowest first.
_UNSIGNED = tuple(np.dtype(f"u{width}") for width in (1, 2, 4, 8))
_SIGNED = tuple(np.dtype(f"i{width}") for width in (1, 2, 4, 8))
#: Values a piece's check looks at together: two float64 temporaries of 8 MiB at most.
_BLOCK = 1 << 20


class ValueRange(NamedTuple):
    """What the count pass finds of some values: how many, the least and greatest, and whether
    each is a finite whole number (and one that is not, to name in an error)."""

    size: int
    #: Python numbers, so an int64 or uint64 extreme stays exact.
    low: int | float
    high: int | float
    integral: bool
    #: A value that is no finite whole number (NaN, inf, 0.5), if any.
    stray: int | float | complex | None = None

    @classmethod
    def of(cls, data: npt.NDArray[Any]) -> ValueRange:
        """The range of ``data``, a block of values at a time."""
        values = np.asarray(data).ravel()
        if values.size == 0:
            return cls(0, 0, 0, True)
        if values.dtype.kind == "c":
            return cls(values.size, 0, 0, False, values[0].item())
        if values.dtype.kind == "b":
            values = values.view(np.uint8)
        low, high = values.min().item(), values.max().item()
        if values.dtype.kind in "iu":
            return cls(values.size, low, high, True)
        for start in range(0, values.size, _BLOCK):
            block = values[start : start + _BLOCK]
            whole = np.rint(block) == block  # False for NaN; inf shows in low or high
            if not whole.all():
                return cls(values.size, low, high, False, block[np.argmin(whole)].item())
        if not (np.isfinite(low) and np.isfinite(high)):
            return cls(values.size, low, high, False, low if not np.isfinite(low) else high)
        return cls(values.size, low, high, True)


def merge_ranges(*ranges: ValueRange) -> ValueRange:
    """The range of all the values of ``ranges`` together."""
    held = [found for found in ranges if found.size]
    if not held:
        return ValueRange(0, 0, 0, True)
    strays = [found.stray for found in held if not found.integral]
    return ValueRange(
        sum(found.size for found in held),
        min(found.low for found in held),
        max(found.high for found in held),
        not strays,
        strays[0] if strays else None,
    )


def check_dtype_option(dtype: npt.DTypeLike | None) -> np.dtype[Any] | str | None:
    """``dtype=`` of a write, checked before anything is read: None (the input's own),
    :data:`SMALLEST_INTEGER`, or an integer dtype."""
    if dtype is None:
        return None
    if isinstance(dtype, str) and dtype == SMALLEST_INTEGER:
        return SMALLEST_INTEGER
    chosen: np.dtype[Any] | None
    try:
        chosen = np.dtype(dtype)
    except TypeError:
        chosen = None
    if chosen is None or chosen.kind not in "iu":
        raise LayoutError(
            f"dtype={dtype!r} is neither {SMALLEST_INTEGER!r} (the narrowest integer dtype "
            "holding every value exactly) nor an integer dtype such as 'uint16', the dtypes a "
            "write checks every value against. To store floats of another width, cast the "
            "input first."
        )
    return chosen


def stored_dtype(
    option: npt.DTypeLike | None, given: np.dtype[Any], found: ValueRange | None
) -> np.dtype[Any]:
    """The dtype values of dtype ``given`` are stored in under ``dtype=option``, from the range
    ``found`` of every value (the count pass's; None when ``option`` is None).

    1. None keeps ``given``.
    2. Otherwise every value must be a finite whole number: casting 0.5 or NaN to an integer
       stores another number, silently.
    3. :data:`SMALLEST_INTEGER`: the narrowest unsigned dtype holding ``high``, or signed one
       holding ``low`` and ``high`` when a value is negative; an integer dtype: it must hold
       ``low`` and ``high``, since a cast wraps what it cannot hold.
    """
    chosen = check_dtype_option(option)
    if chosen is None:
        return given
    if found is None:  # pragma: no cover - the count pass always finds a range when asked
        raise LayoutError(f"dtype={option!r} needs the values' range, and none was found.")
    if not found.integral:
        raise LayoutError(
            f"dtype={option!r} stores every value as an integer, but the values (dtype {given}) "
            f"hold {found.stray!r}, which is no whole number: cast, it would be stored as "
            "another number without an error. Nothing was written; round the values first, or "
            "leave dtype unset to store them as they are."
        )
    if isinstance(chosen, str):  # SMALLEST_INTEGER
        widths = _SIGNED if found.low < 0 else _UNSIGNED
        fitting = [dtype for dtype in widths if _holds(dtype, found)]
        if not fitting:
            raise LayoutError(
                f"dtype={option!r}: no integer dtype holds every value (from {found.low!r} to "
                f"{found.high!r}); cast, they would wrap without an error. Nothing was written; "
                "leave dtype unset to store them as they are."
            )
        return fitting[0]
    if not _holds(chosen, found):
        info = np.iinfo(chosen)
        raise LayoutError(
            f"dtype={option!r} holds {info.min}..{info.max}, but the values run from "
            f"{found.low!r} to {found.high!r}: cast, they would wrap without an error. Nothing "
            f"was written; choose a wider dtype, or {SMALLEST_INTEGER!r}."
        )
    return chosen


def _holds(dtype: np.dtype[Any], found: ValueRange) -> bool:
    info = np.iinfo(dtype)
    return not found.size or (info.min <= found.low and found.high <= info.max)
