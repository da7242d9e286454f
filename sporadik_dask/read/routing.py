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

__all__ = ["Brackets", "Route", "candidates", "route", "run_chunks"]

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
    and once each."""
    live = hi > lo
    first, last = lo[live] // chunk, (hi[live] - 1) // chunk
    if first.size == 0:
        return np.zeros(0, dtype=np.int64)
    spans = last - first + 1
    ids = np.repeat(first, spans) + (
        np.arange(int(spans.sum())) - np.repeat(np.cumsum(spans) - spans, spans)
    )
    return distinct(ids)


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
        values = int((hi - lo).sum())
        costs.append((requests, values, axis))
    requests, values, axis = min(costs)
    return Route(description.layouts[axis], brackets[axis], requests, values)
