"""Normalising a caller's key into positions per axis, resolved here and nowhere else.

A read fetches each axis's *sorted distinct* positions once and produces the caller's order
(unsorted, repeated) while it assembles the result, so a key is kept both ways: the positions as
asked, the sorted distinct ones, and the map from one to the other. Every indexer is checked
here, so nothing downstream wraps a negative position or truncates a float.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

__all__ = [
    "Axis",
    "Positions",
    "Selection",
    "as_array",
    "as_slice",
    "distinct",
    "nondecreasing",
    "normalize_key",
    "normalize_points",
    "places",
    "pointwise",
    "ranks",
    "take",
]

Positions = npt.NDArray[np.int64]
#: Positions along one axis: a ``range`` for what slices picked (exact under further slices, and
#: no array as long as the axis), an array for what lists and masks picked.
Axis: TypeAlias = range | Positions


def as_array(positions: Axis) -> Positions:
    """Positions as an int64 array: a ``range`` made by ``np.arange`` (not element by element).

    For what needs the positions one by one; an axis selected whole stays a ``range`` elsewhere.
    """
    if isinstance(positions, range):
        return np.arange(positions.start, positions.stop, positions.step, dtype=np.int64)
    return positions


def ranks(column: Positions, unique: range) -> Positions:
    """Each coordinate's index among the ascending ``unique``, or -1 if absent: arithmetic on
    the range's start and step, so an axis selected whole costs nothing beside the column."""
    spot = column.astype(np.int64)  # a copy: ranked in place, no other array as long
    spot -= unique.start
    on_step = None if unique.step == 1 else spot % unique.step == 0
    if on_step is not None:
        spot //= unique.step
    outside = (spot < 0) | (spot >= len(unique))
    if on_step is not None:
        outside |= ~on_step
    spot[outside] = -1
    return spot


#: Values whose binary-search places are checked at once: a batch's gather (8 MB), not one as
#: long as the values read (10,000 positions among 11 M values: 429 MB traced at peak before, 340
#: after).
RANK_BATCH = 1 << 20


def places(column: Positions, positions: Axis) -> Positions:
    """Each coordinate's place among ``positions`` (a ``range`` of any step, in its order, or
    sorted distinct positions), or -1 if absent: arithmetic on a range, a binary search of an
    array, so no array as long as the axis is made."""
    if isinstance(positions, range):
        if positions.step > 0:
            return ranks(column, positions)
        rank = ranks(column, positions[::-1])
        return np.where(rank >= 0, len(positions) - 1 - rank, -1)
    if positions.size == 0:
        return np.full(column.shape, -1, dtype=np.int64)
    # ranked in place: one array of the column's length, checked a batch at a time
    spot = np.searchsorted(positions, column).astype(np.int64, copy=False)
    np.minimum(spot, positions.size - 1, out=spot)
    for start in range(0, spot.size, RANK_BATCH):
        part, asked = spot[start : start + RANK_BATCH], column[start : start + RANK_BATCH]
        part[positions[part] != asked] = -1
    return spot


def nondecreasing(positions: Axis) -> bool:
    """Whether the positions never decrease (repeats allowed)."""
    if isinstance(positions, range):
        return positions.step > 0 or len(positions) < 2
    return bool(np.all(positions[1:] >= positions[:-1]))


def distinct(positions: Positions) -> Positions:
    """Sorted distinct positions; O(n) when they already are (numpy 2's ``np.unique`` hashes)."""
    if positions.size < 2 or bool(np.all(positions[1:] > positions[:-1])):
        return positions
    ordered = np.sort(positions)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def _unique(positions: Axis) -> Axis:
    """Sorted distinct positions: ``positions`` itself when known (a slice of positive step) or
    found ascending, a slice of negative step reversed (a ``range`` still)."""
    if isinstance(positions, range):
        return positions if positions.step > 0 else positions[::-1]
    return distinct(positions)


def _inverse(positions: Axis, unique: Axis) -> Positions:
    """For each position asked, its rank among the sorted distinct ones."""
    if positions is unique:
        return np.arange(len(positions), dtype=np.int64)
    if isinstance(positions, range):  # a slice of negative step: ``unique`` reversed
        return np.arange(len(positions) - 1, -1, -1, dtype=np.int64)
    return np.searchsorted(as_array(unique), positions).astype(np.int64, copy=False)


class _Inverses:
    """Per axis, each asked position's rank among the sorted distinct ones, made when first
    asked for: most reads need none, and an axis selected whole (a slice of 10^8 positions, a
    graph's every node) would otherwise hold an array as long as the axis for nothing."""

    __slots__ = ("_made", "_positions", "_unique")

    def __init__(self, positions: tuple[Axis, ...], unique: tuple[Axis, ...]) -> None:
        self._positions, self._unique = positions, unique
        self._made: dict[int, Positions] = {}

    def __getitem__(self, axis: int) -> Positions:
        if axis not in self._made:
            self._made[axis] = _inverse(self._positions[axis], self._unique[axis])
        return self._made[axis]

    def __len__(self) -> int:
        return len(self._positions)


@dataclass(frozen=True, slots=True, eq=False)
class Selection:
    """A key resolved against a shape: what each axis selects, in the caller's order and sorted.

    ``positions[a] == unique[a][inverse[a]]`` on every axis ``a``.
    """

    #: The array's shape the key was resolved against.
    shape: tuple[int, ...]
    #: Per axis, the positions selected in the caller's order (non-negative, repeats kept): a
    #: ``range`` for a slice, so an axis selected whole holds no array as long as the axis.
    positions: tuple[Axis, ...]
    #: Per axis, the sorted distinct positions: what is read (a ``range`` for a slice).
    unique: tuple[Axis, ...]
    #: Per axis, for each caller position its index in ``unique``.
    inverse: _Inverses
    #: Axes an integer selected, which the result drops.
    dropped: tuple[int, ...]

    @classmethod
    def from_key(cls, key: Any, shape: Sequence[int]) -> Selection:
        """Resolve ``key`` against ``shape``; see :func:`normalize_key` for what is accepted."""
        positions, dropped = normalize_key(key, shape)
        unique = tuple(map(_unique, positions))
        return cls(
            shape=tuple(int(size) for size in shape),
            positions=tuple(positions),
            unique=unique,
            inverse=_Inverses(tuple(positions), unique),
            dropped=dropped,
        )

    @property
    def out_shape(self) -> tuple[int, ...]:
        """The result's shape on every axis, the dropped ones included (as length 1)."""
        return tuple(len(chosen) for chosen in self.positions)

    @property
    def result_shape(self) -> tuple[int, ...]:
        """The result's shape, the dropped axes left out."""
        return tuple(n for axis, n in enumerate(self.out_shape) if axis not in self.dropped)

    @property
    def empty(self) -> bool:
        """Whether some axis selects nothing, so the result holds no value and nothing is read."""
        return any(len(chosen) == 0 for chosen in self.positions)

    def ordered(self, axis: int) -> bool:
        """Whether ``axis``'s positions are strictly increasing: its caller order is the read's."""
        positions, unique = self.positions[axis], self.unique[axis]
        if positions is unique:
            return True
        if isinstance(positions, range) or isinstance(unique, range):  # a reversed range
            return len(positions) < 2
        return positions.size == unique.size and bool(np.array_equal(positions, unique))

    def whole(self, axis: int) -> bool:
        """Whether ``axis`` selects every position, once each, in order."""
        return self.ordered(axis) and len(self.positions[axis]) == self.shape[axis]

    def narrow(self, axis: int) -> bool:
        """Whether ``axis`` leaves some position out, so a layout along it reads less."""
        return len(self.unique[axis]) < self.shape[axis]


def _integers(part: Any, axis: int, size: int) -> Positions:
    """An array indexer along one axis as non-negative positions: a boolean mask or integers."""
    array = np.asarray(part)
    if array.ndim != 1:
        raise IndexError(
            f"Axis {axis}: an array indexer of shape {array.shape} in an outer selection; "
            "each axis takes a 1-D array of positions (or a boolean mask of the axis's length)."
        )
    if array.dtype == np.bool_:
        if array.size != size:
            raise IndexError(
                f"Axis {axis}: a boolean mask of length {array.size} for an axis of {size}; "
                "a mask must name every position of its axis."
            )
        return np.flatnonzero(array).astype(np.int64, copy=False)
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.issubdtype(array.dtype, np.integer):
        raise IndexError(
            f"Axis {axis}: positions of dtype {array.dtype} ({array[:3].tolist()!r}...); only "
            "integers and boolean masks select positions. Convert them to integers first."
        )
    chosen = array.astype(np.int64, copy=False)
    low, high = int(chosen.min()), int(chosen.max())
    if low < -size or high >= size:
        bad = low if low < -size else high
        raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {size}")
    return np.where(chosen < 0, chosen + size, chosen)


def _one(part: Any, axis: int, size: int) -> Positions:
    """An integer indexer as its one non-negative position."""
    if isinstance(part, (bool, np.bool_)) or getattr(part, "dtype", None) == np.bool_:
        raise IndexError(
            f"Axis {axis}: a single boolean {part!r}; a boolean selects as a mask of the "
            "axis's length, or pass an integer position."
        )
    try:
        position = operator.index(part)
    except TypeError:
        raise IndexError(
            f"Axis {axis}: {part!r} is not an integer position; only integers, slices, integer "
            "arrays and boolean masks select positions."
        ) from None
    if not -size <= position < size:
        raise IndexError(f"index {position} is out of bounds for axis {axis} with size {size}")
    return np.array([position % size], dtype=np.int64)


def _expand(key: Any, rank: int) -> tuple[Any, ...]:
    """``key`` as one indexer per axis: a tuple, ``...`` expanded, missing axes whole."""
    if not isinstance(key, tuple):
        key = (key,)
    ellipses = [at for at, part in enumerate(key) if part is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if ellipses:
        at = ellipses[0]
        key = key[:at] + (slice(None),) * (rank - len(key) + 1) + key[at + 1 :]
    if len(key) > rank:
        raise IndexError(f"too many indices: {len(key)} for an array of rank {rank}")
    return (*key, *(slice(None),) * (rank - len(key)))


def normalize_key(key: Any, shape: Sequence[int]) -> tuple[list[Axis], tuple[int, ...]]:
    """Per axis the positions selected, in the caller's order, and the axes an integer drops.

    Accepts, per axis: an integer (negative counted from the end), a slice of any step, a 1-D
    array or list of integers (unsorted, repeated, negative), a boolean mask of the axis's
    length, and ``...``. Anything else (floats, strings, ``None``) raises ``IndexError``, as does
    a position outside the axis, negative ones included: wrapping or truncating would read
    another position's values without a word. A slice's positions are a ``range``: an axis of
    3e9 genome positions selected whole is three integers, not 24 GB.
    """
    selections: list[Axis] = []
    dropped: list[int] = []
    for axis, (part, size) in enumerate(zip(_expand(key, len(shape)), shape, strict=True)):
        chosen: Axis
        if isinstance(part, slice):
            try:
                chosen = range(*part.indices(size))
            except TypeError:
                raise IndexError(
                    f"Axis {axis}: slice {part!r} has bounds or a step that are not integers."
                ) from None
        elif np.ndim(part) == 0 and not isinstance(part, (list, tuple)):
            chosen = _one(part, axis, size)
            dropped.append(axis)
        else:
            chosen = _integers(part, axis, size)
        selections.append(chosen)
    return selections, tuple(dropped)


def take(positions: Axis, part: Any, axis: int = 0) -> int | Axis:
    """``positions[part]`` as numpy reads it, for one axis of a chain of selections.

    ``part`` is an integer (the one position it names), a slice (a ``range`` stays a ``range``:
    Python slices ranges as numpy slices arrays, negative steps and bounds past either end
    included), an integer array of any shape (unsorted, repeated, negative) or a 1-D boolean
    mask. A position outside ``positions`` raises ``IndexError``, as numpy does.
    """
    size = len(positions)
    if isinstance(part, slice):
        return positions[part]
    if np.ndim(part) == 0 and not isinstance(part, (list, tuple)):
        return int(positions[int(_one(part, axis, size)[0])])
    array = np.asarray(part)
    if array.dtype == np.bool_:
        chosen = _integers(array, axis, size)
    elif array.size == 0:
        chosen = np.zeros(array.shape, dtype=np.int64)
    else:
        chosen = _integers(array.ravel(), axis, size).reshape(array.shape)
    if isinstance(positions, range):
        return positions.start + positions.step * chosen
    return positions[chosen]


def as_slice(positions: range) -> slice:
    """A ``range`` as the slice naming it with a non-negative start, and a stop that is None
    rather than negative: ``slice(8, -1, -2)`` is empty to numpy, and ``sparse`` 0.19 reads a
    negative stop no smaller than the step as running past position 0."""
    if not positions:
        return slice(0, 0, 1)
    stop = positions.stop if positions.stop >= 0 else None
    return slice(positions.start, stop, positions.step)


def pointwise(key: tuple[Any, ...], shape: Sequence[int]) -> tuple[Any, ...]:
    """A pointwise key with slices among its arrays as one integer array per axis.

    Each slice's positions span an axis of their own after the arrays' broadcast axes, in the
    order of the key, as numpy's ``vindex`` (dask's and xarray's) reads slices beside arrays.
    """
    arrays = iter(np.broadcast_arrays(*(np.asarray(p) for p in key if not isinstance(p, slice))))
    sliced = [axis for axis, part in enumerate(key) if isinstance(part, slice)]
    parts: list[Any] = []
    for axis, part in enumerate(key):
        if isinstance(part, slice):  # its own axis among the trailing ones
            spans = [1] * len(sliced)
            spans[sliced.index(axis)] = -1
            parts.append(np.arange(*part.indices(shape[axis]), dtype=np.int64).reshape(spans))
        else:
            array = next(arrays)
            parts.append(array.reshape(array.shape + (1,) * len(sliced)))
    return tuple(parts)


def normalize_points(key: Any, shape: Sequence[int]) -> tuple[list[Positions], tuple[int, ...]]:
    """Pointwise (vectorized) indexing: one integer array per axis, broadcast together (a slice
    among them spans an axis of its own, see :func:`pointwise`).

    Returns the points' positions per axis (raveled, non-negative) and the broadcast shape the
    result takes. Point ``i`` is the cell ``(positions[0][i], positions[1][i], ...)``.
    """
    if not isinstance(key, tuple) or len(key) != len(shape):
        raise IndexError(
            f"Pointwise indexing takes one integer array per axis ({len(shape)}), got {key!r}."
        )
    try:
        if any(isinstance(part, slice) for part in key):
            key = pointwise(key, shape)
        arrays = np.broadcast_arrays(*(np.asarray(part) for part in key))
    except ValueError as mismatch:
        raise IndexError(f"Pointwise indexers do not broadcast together: {mismatch}") from None
    positions = []
    for axis, (array, size) in enumerate(zip(arrays, shape, strict=True)):
        if array.dtype == np.bool_:
            raise IndexError(f"Axis {axis}: pointwise indexing takes integer arrays, not masks.")
        positions.append(_integers(array.ravel(), axis, size))
    return positions, arrays[0].shape
