"""The count pass's tasks: values per position along each counted axis, over a piece, added up;
when a write stores its values in a dtype picked from them, their range; and where each piece
read was kept for the write (:mod:`~sporadik_dask.write.kept`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from sporadik_dask.kernels.sort import stable_order
from sporadik_dask.planning.dtypes import ValueRange, merge_ranges
from sporadik_dask.planning.plan import PositionCounts
from sporadik_dask.write.kept import KeptPiece, keep_piece
from sporadik_dask.write.pieces import Piece
from sporadik_dask.write.spill import SpillTo

__all__ = [
    "Counted",
    "Tally",
    "add_counts",
    "count_piece",
    "tally",
]


class Counted(NamedTuple):
    """Values per position along each counted axis, over one piece or a run of pieces."""

    #: One count per counted axis: the positions holding values and how many each holds.
    counts: tuple[PositionCounts, ...]
    #: ``spans[i, k]`` is the first and last position piece ``i`` holds along counted axis ``k``
    #: (``(length, -1)`` for an empty piece), shape ``(pieces, axes, 2)``.
    spans: npt.NDArray[np.int64]
    #: The range of the values, when asked for.
    values: ValueRange | None = None
    #: Where each piece was kept, in piece order (None: not kept, the write reads it again).
    kept: tuple[KeptPiece | None, ...] = ()


class Tally(NamedTuple):
    """What the count pass finds: values per position along each counted axis, and repeats."""

    #: One count per counted axis, in the order the axes were given.
    counts: tuple[PositionCounts, ...]
    #: How many values named a cell another value already named (merged coordinate columns).
    repeats: int
    #: The positions each piece spans along each counted axis, as :attr:`Counted.spans`: a
    #: partition gathers parts from the pieces whose span meets it, and no others.
    spans: npt.NDArray[np.int64]
    #: The range of every value (:mod:`~sporadik_dask.planning.dtypes`), when asked for.
    values: ValueRange | None = None
    #: Where each piece was kept, as :attr:`Counted.kept`.
    kept: tuple[KeptPiece | None, ...] = ()


def count_piece(
    piece: Piece,
    extents: Sequence[tuple[int, int]],
    ranged: bool = False,
    keep_to: SpillTo | None = None,
) -> Counted:
    """Values per position along each ``(axis, length)``, the positions the piece spans, with
    ``ranged`` the range of its values, and with ``keep_to`` where the piece was kept."""
    spans = np.empty((1, len(extents), 2), dtype=np.int64)
    for k, (axis, length) in enumerate(extents):
        column = piece.coords[axis]
        spans[0, k] = (column.min(), column.max()) if column.size else (length, -1)
    counts = tuple(_counted(piece.coords[axis], length) for axis, length in extents)
    values = ValueRange.of(piece.data) if ranged else None
    return Counted(counts, spans, values, (keep_piece(piece, keep_to),))


def _counted(positions: npt.NDArray[np.int64], length: int) -> PositionCounts:
    """Values at each position holding any: a bincount when the axis is no longer than the
    values, else a sort of the positions, so the cost follows whichever is smaller."""
    if length <= positions.shape[0]:
        return PositionCounts.of_dense(np.bincount(positions, minlength=length))
    ordered = np.sort(positions).astype(np.int64, copy=False)
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))[: ordered.size]
    counts = np.diff(np.append(starts, ordered.shape[0]))
    return PositionCounts(ordered[starts], counts.astype(np.int64), length)


def add_counts(*counted: Counted) -> Counted:
    """Counts added together, axis by axis; spans joined in piece order; ranges merged."""
    columns = zip(*(c.counts for c in counted), strict=True)
    counts = tuple(_added(column) for column in columns)
    ranges = [c.values for c in counted if c.values is not None]
    values = merge_ranges(*ranges) if ranges else None
    kept = tuple(k for c in counted for k in c.kept)
    return Counted(counts, np.concatenate([c.spans for c in counted]), values, kept)


def _added(counts: Sequence[PositionCounts]) -> PositionCounts:
    """The sum of counts along one axis: into a dense count when the axis is no longer than the
    entries, else by merging the held positions."""
    length = counts[0].length
    positions = np.concatenate([c.positions for c in counts])
    values = np.concatenate([c.counts for c in counts])
    if length <= positions.shape[0]:
        dense = np.zeros(length, dtype=np.int64)
        for c in counts:
            dense[c.positions] += c.counts  # each count names a position once
        return PositionCounts.of_dense(dense)
    positions, order = stable_order(positions, length)
    values = values[order]
    starts = np.flatnonzero(np.concatenate(([True], positions[1:] != positions[:-1])))
    starts = starts[: positions.size]
    return PositionCounts(positions[starts], np.add.reduceat(values, starts), length)


def tally(counted: Counted, repeats: int) -> Tally:
    """The count pass's result."""
    return Tally(counted.counts, repeats, counted.spans, counted.values, counted.kept)
