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

import numpy as np
import numpy.typing as npt

from sporadik_dask.planning.budgets import BRACKET_POSITIONS
from sporadik_dask.read.selection import Selection, distinct
from sporadik_dask.store.describe import LayoutDescription, StoreDescription

__all__ = ["Brackets", "Route", "abutting", "candidates", "held", "route", "run_chunks"]

#: Where each selected position's run starts and stops in a layout (``lo``, ``hi``).
Brackets = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]


@dataclass(frozen=True, slots=True, eq=False)
class Route:
    """The layout a selection is read through, with its brackets and what its runs cost."""

    #: The layout chosen.
    layout: LayoutDescription
    #: The runs of the selection's sorted distinct positions along ``layout.indexed_axis``.
    brackets: Brackets
    #: Zarr chunks of ``indices`` and ``data`` the runs touch: the requests of the second wave.
    requests: int
    #: Values the runs hold.
    values: int


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
    ``offsets[1:]`` (:func:`~sporadik_dask.read.fetch.fetch_brackets`): ``hi`` one element past
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


def route(description: StoreDescription, brackets: Mapping[int, Brackets]) -> Route:
    """The layout, among those bracketed, whose runs touch the fewest zarr chunks.

    1. For each bracketed layout, count the chunks of ``indices`` and of ``data`` its runs span
       (the requests its second wave would make).
    2. Pick the fewest requests; break ties by fewer values, then by the lower axis.
    """
    costs = []
    for axis, (lo, hi) in brackets.items():
        layout = description.layouts[axis]
        requests = sum(run_chunks(lo, hi, layout.chunks[name]).size for name in ("indices", "data"))
        values = held(lo, hi)
        costs.append((requests, values, axis))
    requests, values, axis = min(costs)
    return Route(description.layouts[axis], brackets[axis], requests, values)
