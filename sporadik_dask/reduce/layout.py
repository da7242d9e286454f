"""Which layout of a store a reduction reads, and how each value's output cell follows from
its run and index."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sporadik_dask.reduce.fields import Op
from sporadik_dask.reduce.target import Target

__all__ = [
    "LOOKUP_GROUPS",
    "Affine",
    "affine",
    "index_coords",
    "layout_for",
]


#: Groups up to which a dense grouped reduction reads a layout indexed by the grouped axis
#: (each run adds into a column of one cell per group) rather than the grouped axis's own (each
#: run scatters over a row). Sums of cell groups of the 89.6 M-value store, CPU s, gene layout
#: against cell layout: 50 groups 1.19 vs 1.59, 1,000 groups 1.60 vs 2.27, 5,000 groups 4.10 vs
#: 4.87 but slower in wall time (4.31 s vs 4.02 s).
LOOKUP_GROUPS = 1024


def layout_for(reader: Any, target: Target, dense: bool = True) -> Any:
    """The layout a reduction reads: one whose indexed axis is kept (its runs then land in
    consecutive output cells), else any. A sparse result prefers a kept axis that is not grouped:
    each batch of its runs then fills output cells no other batch reaches (:class:`Disjoint`).
    A dense result of few groups prefers a layout indexed by the grouped axis alone: a run then
    adds into one column of :data:`LOOKUP_GROUPS` cells at most, where a run of the grouped axis
    scatters over a whole row. A layout whose ``indptr`` is too long to read whole (past
    ``sporadik.max-positions``: a genome's positions) is read only when no other is."""
    from sporadik_dask.store.describe import max_positions

    limit = max_positions()
    layouts = reader.description.layouts
    readable = {a: layout for a, layout in layouts.items() if layout.positions <= limit}
    layouts = readable or layouts
    kept = [a for a in sorted(layouts) if a in target.kept]
    grouping = target.grouping
    if not dense and grouping is not None:
        kept = [a for a in kept if a != grouping.axis] or kept
    if dense and grouping is not None and grouping.size <= LOOKUP_GROUPS:
        by_group = [a for a in kept if tuple(layouts[a].index_order) == (grouping.axis,)]
        kept = by_group + [a for a in kept if a not in by_group]
    return layouts[kept[0] if kept else min(layouts)]


class Affine(NamedTuple):
    """Each value's dense output cell: its run's coordinate (position, or group code) times
    ``run_stride``, plus its raveled index (or, ``grouped``, the group of the position it is)
    times ``index_stride``."""

    run_stride: int
    index_stride: int
    grouped: bool = False


def affine(op: Op, target: Target, layout: Any, dtype: np.dtype[Any]) -> Affine | None:
    """How each value's dense output cell follows from its run and index, when it is affine
    in them: the case :func:`kernels.add_runs` adds in one pass, with no per-value coordinates
    built (a grouped index's positions looked up in a table of their groups, or in a window of
    it: :class:`~sporadik_dask.reduce.codes.CodeWindows`). None otherwise (another axis
    reduced, an index over several axes one of which is grouped, a ravel order the output's
    does not share), and for dtypes or ops the kernel does not take."""
    if (
        dtype.kind not in "biuf"
        or op in ("max", "min")
        or (op == "mean" and dtype.kind in "iu" and dtype.itemsize == 8)  # see widened
    ):
        return None
    if 0 in target.shape:  # no value at all, and strides of 0 that say nothing
        return None
    out = target.out_shape
    stride = {a: math.prod(out[p + 1 :]) for p, a in enumerate(target.kept)}
    if target.kept in ((), (layout.indexed_axis,)):  # the run alone says where a value lands
        return Affine(stride.get(layout.indexed_axis, 0), 0)
    grouped = target.grouping.axis if target.grouping is not None else None
    if tuple(layout.index_order) == (grouped,) and grouped in stride:
        return Affine(stride.get(layout.indexed_axis, 0), stride[grouped], grouped=True)
    index_strides = [math.prod(layout.index_shape[p + 1 :]) for p in range(len(layout.index_order))]
    others = [
        (o, s)
        for o, s in zip(layout.index_order, index_strides, strict=True)
        if target.shape[o] > 1 or o == grouped  # a lone position may still be relabeled
    ]
    if any(o not in stride or o == grouped for o, _ in others):
        return None
    step = stride[others[-1][0]] // others[-1][1] if others else 0
    if any(stride[o] != step * s for o, s in others):
        return None
    return Affine(stride.get(layout.indexed_axis, 0), step)


def index_coords(ndim: int, layout: Any, indices: npt.NDArray[Any] | None) -> list[Any]:
    """Coordinates of a batch of runs' values along each axis their ``indices`` ravel (None on
    the others, and everywhere when no index was read); an index over one axis is that axis's
    position itself, taken as it is."""
    coords: list[Any] = [None] * ndim
    if indices is None:
        return coords
    one = len(layout.index_shape) == 1
    columns = (indices,) if one else np.unravel_index(indices, layout.index_shape)
    for other, column in zip(layout.index_order, columns, strict=True):
        coords[other] = column
    return coords
