"""The group codes a pass's kernel looks each value's position up in, batch by batch: a table of
the axis's positions, or, for a selection held as it names its positions, a window of that
table over the positions a batch reaches, so the kernel's one-pass path serves an axis of any
length in memory sized by the window."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.reduce.target import Grouping, Picked, group_table_bytes

__all__ = ["CodeWindows"]


class CodeWindows:
    """The codes of ``grouping`` as :func:`kernels.add_runs` looks them up: a table, and the
    position it starts at.

    A grouping whose codes are a table of the axis is that table, for every batch. One held as a
    selection names its positions (:class:`Picked`) is a window of the table it would be:

    1. A batch's window must hold the picked positions between its least and greatest index.
    2. The window of the batch before is kept when it holds them (runs spanning the axis, as a
       gene's runs of cells, reach the same positions batch after batch).
    3. Otherwise a new window holds every picked position, if
       :func:`~sporadik_dask.reduce.target.group_table_bytes` of codes hold them all (made once
       for the pass); else it starts at the batch's first and reaches as far as they allow.
    4. A batch whose positions span more than that has no window: :meth:`covering` is None.
    """

    def __init__(self, grouping: Grouping) -> None:
        self.grouping = grouping
        self.dtype: np.dtype[Any] = np.min_scalar_type(-max(grouping.size, 1))
        table = grouping.lookup
        self._picked = grouping.codes if isinstance(grouping.codes, Picked) else None
        self._window: tuple[npt.NDArray[Any], int] | None = None
        if table is not None:  # narrow, for the cache
            self._window = table.astype(self.dtype), 0
        #: The first and last position picked (None: none is).
        self._span = None if self._picked is None else self._picked.within(0, 2**62)
        #: Positions a window holds at most.
        self.most = max(group_table_bytes() // self.dtype.itemsize, 1)

    def covering(self, indices: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], int] | None:
        """A table of the groups of the positions from ``offset`` on, and ``offset``, holding
        every picked position among ``indices`` (a position outside it is in none); None when
        they span more than a window holds."""
        if self._picked is None:
            return self._window
        reached = None
        if indices.size:
            reached = self._picked.within(int(indices.min()), int(indices.max()))
        if reached is None:
            return np.full(1, -1, dtype=self.dtype), 0  # each in no group
        lo, hi = reached
        if self._window is not None:
            table, offset = self._window
            if offset <= lo and hi < offset + table.size:
                return self._window
        if hi - lo >= self.most:
            return None
        first, last = self._span or reached
        start = first if last - first < self.most else lo  # all picked, when a window holds them
        self._window = (
            self._picked.window(start, min(start + self.most - 1, last), self.dtype),
            start,
        )
        return self._window

    def groups(self, positions: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """The group of each of ``positions`` (-1: none), looked up in the window holding them,
        else each found on its own (by arithmetic or a binary search)."""
        window = self.covering(positions)
        if window is None:
            return self.grouping.groups(positions)
        table, offset = window
        spot = positions.astype(np.int64) - offset
        found = table.take(spot, mode="clip").astype(np.int64)
        found[(spot < 0) | (spot >= table.size)] = -1
        return found

    def in_groups(
        self,
        lengths: npt.NDArray[np.int64],
        positions: npt.NDArray[Any],
        values: npt.NDArray[Any],
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[Any]]:
        """The values of runs of ``lengths`` at ``positions`` of the grouped axis that fall in a
        group: each run's count of them, their groups and themselves, for a batch no window
        holds (each position's group found on its own, by arithmetic or a binary search)."""
        codes = self.grouping.groups(positions)
        kept = codes >= 0
        if kept.all():
            return lengths, codes, values
        before = np.concatenate([[0], np.cumsum(kept, dtype=np.int64)])
        ends = np.cumsum(lengths)
        return before[ends] - before[ends - lengths], codes[kept], values[kept]
