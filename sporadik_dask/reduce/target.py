"""Where each value lands: the output cell of a reduction, with an axis's positions gathered
into groups."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sporadik_dask.planning.budgets import GROUP_TABLE_BYTES
from sporadik_dask.read.selection import Axis, as_slice, nondecreasing, places

__all__ = [
    "Grouping",
    "Picked",
    "Target",
    "group_table_bytes",
]


def group_table_bytes() -> int:
    """Bytes of int64 up to which a selection's positions are a table of the axis's codes
    (``sporadik.group-table-bytes``), and of narrowed codes a window of it holds."""
    import dask.config

    return int(dask.config.get("sporadik.group-table-bytes", GROUP_TABLE_BYTES))


@dataclass(frozen=True)
class Picked:
    """The positions of an axis a selection picked, each with its group, held as the selection
    describes them: a slice's as a ``range`` (a position's place by arithmetic), a list's or a
    mask's as its sorted distinct positions (a place by binary search). An axis of a genome
    (3.1e9 positions) selected in part costs what the selection names, never an entry per
    position of the axis."""

    #: A ``range`` in the order selected (any step), or sorted distinct positions.
    positions: range | npt.NDArray[np.int64]
    #: Each position's group, in the order of ``positions`` (-1: none); an integer: the group of
    #: every one; None: its place among them (each a group of its own, in that order).
    codes: npt.NDArray[np.int64] | int | None = None

    @classmethod
    def of(cls, picked: Axis, codes: npt.NDArray[np.int64] | int | None = None) -> Picked:
        """Distinct positions ``picked`` in the order selected, ``codes`` in that order too."""
        if isinstance(picked, range) or nondecreasing(picked):
            return cls(picked, codes)
        order = np.argsort(picked, kind="stable")
        if codes is None:
            codes = order
        elif not isinstance(codes, int):
            codes = np.asarray(codes, dtype=np.int64)[order]
        return cls(picked[order], codes)

    def groups(self, column: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """The group of each position of ``column``, -1 for one not picked."""
        place = places(np.asarray(column), self.positions)
        if self.codes is None:
            return place
        if isinstance(self.codes, int):
            return np.where(place >= 0, self.codes, -1)
        hit = place >= 0
        found = np.full(place.shape, -1, dtype=np.int64)
        found[hit] = self.codes[place[hit]]
        return found

    def within(self, lo: int, hi: int) -> tuple[int, int] | None:
        """The first and last position picked from ``lo`` to ``hi``; None when none is."""
        first, last = self._places(lo, hi)
        if first >= last:
            return None
        ends = int(self.positions[first]), int(self.positions[last - 1])
        return min(ends), max(ends)

    def _places(self, lo: int, hi: int) -> tuple[int, int]:
        """The places ``first:last`` among ``positions`` of those from ``lo`` to ``hi``."""
        positions = self.positions
        if isinstance(positions, range):
            return _inside(positions, lo, hi)
        first, last = np.searchsorted(positions, [lo, hi + 1])
        return int(first), int(last)

    def window(self, lo: int, hi: int, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        """The group of each position ``lo`` to ``hi`` (-1: none), in ``dtype``: a window of a
        table of the axis, made from the picked positions inside it (found by arithmetic on a
        range, by two binary searches of sorted positions), so it costs what the window holds."""
        table = np.full(hi - lo + 1, -1, dtype=dtype)
        first, last = self._places(lo, hi)
        if first >= last:
            return table
        inside = self.positions[first:last]
        if isinstance(inside, range):
            at: Any = as_slice(range(inside.start - lo, inside.stop - lo, inside.step))
        else:
            at = inside - lo
        if self.codes is None:
            table[at] = np.arange(first, last)
        elif isinstance(self.codes, int):
            table[at] = self.codes
        else:
            table[at] = self.codes[first:last]
        return table


def _inside(positions: range, lo: int, hi: int) -> tuple[int, int]:
    """The places ``first:last`` of the positions of a range (any step) from ``lo`` to ``hi``."""
    start, step, count = positions.start, positions.step, len(positions)
    if step > 0:
        first = max(0, -((start - lo) // step)) if lo > start else 0
        last = min(count, (hi - start) // step + 1) if hi >= start else 0
    else:
        first = max(0, -((hi - start) // -step)) if hi < start else 0
        last = min(count, (start - lo) // -step + 1) if lo <= start else 0
    return first, max(first, last)


class Grouping(NamedTuple):
    """Positions along ``axis`` gathered into groups, as xarray's groupby encodes them, or as a
    selection picks them (:class:`Picked`)."""

    axis: int
    #: Each position's group, or -1 for a position in none: one code per position of the axis,
    #: or the positions a selection picked with theirs.
    codes: npt.NDArray[np.int64] | Picked
    #: How many groups.
    size: int

    @classmethod
    def picked(
        cls,
        axis: int,
        extent: int,
        picked: Axis,
        codes: npt.NDArray[np.int64] | int | None,
        size: int,
    ) -> Grouping:
        """Distinct positions ``picked`` of an axis of ``extent`` in ``size`` groups by ``codes``
        (as :class:`Picked` takes them), the rest in none: a table of every position's code, as
        a groupby's, up to :func:`group_table_bytes`; past it (a genome's positions) the
        positions as the selection names them."""
        held = Picked.of(picked, codes)
        if extent * 8 > group_table_bytes():
            return cls(axis, held, size)
        table = np.full(extent, -1, dtype=np.int64)
        at = as_slice(picked) if isinstance(picked, range) else held.positions
        table[at] = np.arange(len(picked)) if held.codes is None else held.codes
        return cls(axis, table, size)

    @property
    def lookup(self) -> npt.NDArray[np.int64] | None:
        """The group of each position of the axis as one array (a kernel's lookup table), or
        None when the positions are held as a selection picked them."""
        return None if isinstance(self.codes, Picked) else self.codes

    def groups(self, positions: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """The group of each of ``positions`` (-1: none)."""
        if isinstance(self.codes, Picked):
            return self.codes.groups(positions)
        found: npt.NDArray[np.int64] = self.codes[positions]
        return found

    def members(self, groups: npt.NDArray[Any] | None = None) -> npt.NDArray[np.int64]:
        """Positions in each group (in each of ``groups``, when given)."""
        table = self.codes
        if isinstance(table, Picked):
            if table.codes is None:  # one position a group
                return np.ones(self.size if groups is None else len(groups), dtype=np.int64)
            if isinstance(table.codes, int):
                counts = np.zeros(self.size, dtype=np.int64)
                counts[table.codes] = len(table.positions)
                return counts if groups is None else counts[groups]
            table = table.codes
        counts = np.bincount(table[table >= 0], minlength=self.size)
        return counts if groups is None else counts[groups]

    def gathered(self, per_position: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """``per_position`` (an integer per position of the axis) added up over each group."""
        codes = self.codes
        if isinstance(codes, Picked):
            spots = codes.positions
            each = per_position[as_slice(spots) if isinstance(spots, range) else spots]
            if codes.codes is None:
                return each.astype(np.int64)
            if isinstance(codes.codes, int):
                counts = np.zeros(self.size, dtype=np.int64)
                counts[codes.codes] = each.sum()
                return counts
            table = codes.codes
        else:
            table, each = codes, per_position
        member = table >= 0
        # float64 sums of int64 counts: exact below 2**53
        return np.bincount(table[member], each[member], minlength=self.size).astype(np.int64)


@dataclass(frozen=True)
class Target:
    """Where each value of an array of ``shape`` lands when ``axes`` are reduced: its output
    cell, raveled over the kept axes. A grouped axis is kept, each position relabeled by its
    group, so an output cell there covers every member of the group."""

    shape: tuple[int, ...]
    axes: tuple[int, ...]
    grouping: Grouping | None = None

    @property
    def kept(self) -> tuple[int, ...]:
        return tuple(a for a in range(len(self.shape)) if a not in self.axes)

    @property
    def out_shape(self) -> tuple[int, ...]:
        grouped = self.grouping.axis if self.grouping else None
        return tuple(
            self.grouping.size if a == grouped and self.grouping else self.shape[a]
            for a in self.kept
        )

    @property
    def size(self) -> int:
        return math.prod(self.out_shape)

    def cells(self) -> int | npt.NDArray[np.int64]:
        """Input cells each output cell covers (per raveled output cell, when grouped)."""
        reduced = math.prod(self.shape[a] for a in self.axes)
        if self.grouping is None:
            return reduced
        spot = [1] * len(self.kept)
        spot[self.kept.index(self.grouping.axis)] = self.grouping.size
        members = self.grouping.members().reshape(spot)
        return reduced * np.broadcast_to(members, self.out_shape).ravel()

    def locate(
        self,
        coords: Sequence[npt.NDArray[Any]],
        values: npt.NDArray[Any],
        *,
        grouped: bool = False,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
        """Each value's output cell, and the values that land in one.

        ``grouped`` says the grouped axis's coordinates are group codes already (mapped once per
        run rather than once per value).
        """
        if not self.kept:
            return np.zeros(values.size, dtype=np.int64), values
        columns = [np.asarray(coords[a]) for a in self.kept]
        if self.grouping is not None:
            at = self.kept.index(self.grouping.axis)
            if not grouped:
                columns[at] = self.grouping.groups(columns[at])
            member = columns[at] >= 0
            if not member.all():
                columns = [column[member] for column in columns]
                values = values[member]
        # raveled by hand: every coordinate is in range, so ravel_multi_index's checks are waste
        where = columns[0].astype(np.int64, copy=True)
        for column, size in zip(columns[1:], self.out_shape[1:], strict=True):
            where *= size
            where += column
        return where, values
