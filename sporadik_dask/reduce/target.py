"""Where each value lands: the output cell of a reduction, with an axis's positions gathered
into groups."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = [
    "Grouping",
    "Target",
]


class Grouping(NamedTuple):
    """Positions along ``axis`` gathered into groups, as xarray's groupby encodes them."""

    axis: int
    #: Each position's group, or -1 for a position in none.
    codes: npt.NDArray[np.int64]
    #: How many groups.
    size: int

    def members(self) -> npt.NDArray[np.int64]:
        """Positions in each group."""
        return np.bincount(self.codes[self.codes >= 0], minlength=self.size)


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
                columns[at] = self.grouping.codes[columns[at]]
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
