"""Routing a selection to a layout: pure, from the store's description and ``indptr`` brackets.

A read costs requests far more than values: on an object store each zarr chunk is a round trip,
and locally each is a file opened and decoded. So a layout is chosen by the zarr chunks of
``indices`` and ``data`` its runs would touch, which the brackets tell before any value is read;
ties go to the layout holding fewer values, then to the lower axis. A layout holding fewer values
can still span many more chunks, and read slower (docs/benchmarks.md, "Numbers behind the code's
choices").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.planning.budgets import BRACKET_POSITIONS
from sporadik_dask.read.selection import Selection, distinct
from sporadik_dask.store.describe import LayoutDescription, StoreDescription

__all__ = [
    "Brackets",
    "Route",
    "Runs",
    "Stretch",
    "abutting",
    "candidates",
    "chunks_of",
    "held",
    "held_by",
    "route",
    "run_chunks",
]

#: Where each selected position's run starts and stops in a layout (``lo``, ``hi``).
Brackets = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]


@dataclass(frozen=True, slots=True, eq=False)
class Stretch:
    """The runs of a stretch of positions, end to end: its ``indptr`` offsets as stored.

    Widened to int64, with the runs' lengths beside them, they were three arrays of 8 bytes a
    position made afresh by each read of a region (24 MB for 1e6 positions, where page faults
    took a third of its time). Kept in the stored dtype (int32 wherever the layout's values fit
    it), nothing computes with them as arrays, where an int32 product (an offset times an item
    size, a chunk id times a chunk's length) would pass 2**31 unseen: the ends are Python ints,
    chunk ids int64, each offset is read into an int64 by the kernel that walks the runs
    (:func:`~sporadik_dask.kernels.runs.columns_of_runs`), and :attr:`brackets` widens them for
    anything else. A stretch stays inside a read: the reader's public methods give
    :data:`Brackets`; its offsets may sit in a buffer its thread fills again at its next read
    (:func:`~sporadik_dask.read.fetch.fetch_offsets`).
    """

    #: ``indptr`` at the stretch's positions and one past its last, in its stored dtype.
    offsets: npt.NDArray[np.integer[Any]]

    @classmethod
    def of_lengths(cls, lengths: npt.NDArray[np.int64]) -> Stretch:
        """Runs of ``lengths`` values laid end to end from 0."""
        offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(offsets)

    @property
    def start(self) -> int:
        """Where the first run starts."""
        return int(self.offsets[0])

    @property
    def stop(self) -> int:
        """Where the last run stops."""
        return int(self.offsets[-1])

    @property
    def brackets(self) -> Brackets:
        """The runs as int64 brackets: one array of offsets seen twice (:func:`abutting`)."""
        wide = self.offsets.astype(np.int64)
        return wide[:-1], wide[1:]

    def chunks(self, chunk: int) -> npt.NDArray[np.int64]:
        """The ids of the zarr chunks (of ``chunk`` elements) the runs touch, int64: an id
        times the chunk's length passes 2**31 from 2**31 values on."""
        if self.stop == self.start:
            return np.zeros(0, dtype=np.int64)
        return np.arange(self.start // chunk, (self.stop - 1) // chunk + 1, dtype=np.int64)


#: A selection's runs in a layout: their brackets, or a stretch's offsets as stored.
Runs = Brackets | Stretch


@dataclass(frozen=True, slots=True, eq=False)
class Route:
    """The layout a selection is read through, with its runs and what they cost."""

    #: The layout chosen.
    layout: LayoutDescription
    #: The runs of the selection's sorted distinct positions along ``layout.indexed_axis``.
    runs: Runs
    #: Zarr chunks of ``indices`` and ``data`` the runs touch: the requests of the second wave.
    requests: int
    #: Values the runs hold.
    values: int

    @property
    def brackets(self) -> Brackets:
        """The runs as int64 brackets."""
        return self.runs.brackets if isinstance(self.runs, Stretch) else self.runs

    def widened(self) -> Route:
        """This route with its runs as int64 brackets, for callers outside a read."""
        return Route(self.layout, self.brackets, self.requests, self.values)


def run_chunks(
    lo: npt.NDArray[np.int64], hi: npt.NDArray[np.int64], chunk: int
) -> npt.NDArray[np.int64]:
    """Every zarr chunk id (of ``chunk`` elements) some non-empty run ``[lo, hi)`` touches, sorted
    and once each.

    Runs laid end to end (a region's, a whole layout's) cover ``[lo[0], hi[-1])``: its chunks are
    one range, with no id per run spanned (4.7 ms for a region of 1e6 positions, each read asking
    twice for its routing and twice for its fetch).
    """
    if lo.size and abutting(lo, hi):
        if hi[-1] == lo[0]:
            return np.zeros(0, dtype=np.int64)
        return np.arange(lo[0] // chunk, (hi[-1] - 1) // chunk + 1, dtype=np.int64)
    live = hi > lo
    first, last = lo[live] // chunk, (hi[live] - 1) // chunk
    if first.size == 0:
        return np.zeros(0, dtype=np.int64)
    spans = last - first + 1
    ids = np.repeat(first, spans) + (
        np.arange(int(spans.sum())) - np.repeat(np.cumsum(spans) - spans, spans)
    )
    return distinct(ids)


def abutting(lo: npt.NDArray[np.int64], hi: npt.NDArray[np.int64]) -> bool:
    """Whether each run ``[lo, hi)`` starts where the one before it stops.

    A stretch's brackets are one array of offsets seen twice, ``offsets[:-1]`` and
    ``offsets[1:]`` (:class:`Stretch`): ``hi`` one element past
    ``lo`` in the same memory, so ``hi[i]`` is ``lo[i + 1]``, known with no pass over them.
    """
    if (
        lo.size > 1
        and lo.base is not None
        and lo.base is hi.base
        and lo.dtype == hi.dtype
        and lo.strides == hi.strides
        and hi.ctypes.data - lo.ctypes.data == lo.strides[0]
    ):
        return True
    return bool(np.array_equal(lo[1:], hi[:-1]))


def held(lo: npt.NDArray[np.int64], hi: npt.NDArray[np.int64]) -> int:
    """Values the runs ``[lo, hi)`` hold: ``hi[-1] - lo[0]`` when they lie end to end."""
    if lo.size and abutting(lo, hi):
        return int(hi[-1] - lo[0])
    return int((hi - lo).sum())


def held_by(runs: Runs) -> int:
    """Values ``runs`` hold (:func:`held`)."""
    return runs.stop - runs.start if isinstance(runs, Stretch) else held(*runs)


def chunks_of(runs: Runs, chunk: int) -> npt.NDArray[np.int64]:
    """The zarr chunks (of ``chunk`` elements) ``runs`` touch (:func:`run_chunks`)."""
    return runs.chunks(chunk) if isinstance(runs, Stretch) else run_chunks(*runs, chunk)


def candidates(description: StoreDescription, selection: Selection) -> tuple[int, ...]:
    """The layouts worth bracketing: those whose axis the selection narrows.

    A layout along an axis selected whole reads every value (a scan), so it competes only when
    no layout narrows: then the lowest axis is the one candidate. A narrowing layout with more
    than :data:`~sporadik_dask.planning.budgets.BRACKET_POSITIONS` positions to bracket gives
    way to the layout bracketing the fewest, when that one has at most as many: its brackets
    alone would be 16 bytes a position (32 GiB for a region of 2**31 positions of a genome),
    where a scan of the other costs what its values hold.
    """
    layouts = sorted(description.layouts)
    narrowing = [axis for axis in layouts if selection.narrow(axis)]
    if not narrowing:
        return (layouts[0],)
    short = [axis for axis in narrowing if len(selection.unique[axis]) <= BRACKET_POSITIONS]
    if short:
        return tuple(short)
    fewest = min(layouts, key=lambda axis: (len(selection.unique[axis]), axis))
    if len(selection.unique[fewest]) <= BRACKET_POSITIONS:
        return (fewest,)
    return tuple(narrowing)


def route(description: StoreDescription, brackets: Mapping[int, Runs]) -> Route:
    """The layout, among those bracketed, whose runs touch the fewest zarr chunks.

    1. For each bracketed layout, count the chunks of ``indices`` and of ``data`` its runs span
       (the requests its second wave would make).
    2. Pick the fewest requests; break ties by fewer values, then by the lower axis.
    """
    costs = []
    for axis, runs in brackets.items():
        layout = description.layouts[axis]
        requests = sum(chunks_of(runs, layout.chunks[name]).size for name in ("indices", "data"))
        costs.append((requests, held_by(runs), axis))
    requests, values, axis = min(costs)
    return Route(description.layouts[axis], brackets[axis], requests, values)
