"""Quantiles, medians and the positions of extremes of a store's lines: from a layout's runs,
from a ``sparse.COO``, or from a dask array's blocks, never a dense line.

A line is every cell with the same positions along the kept axes. In the layout indexed by a
kept axis, each run holds whole lines; with that axis the only one kept, a run is one line. So
a batch of runs is answered alone, and a store's quantile is one pass over that layout in
bounded batches (a task per span of its runs under dask), holding a batch and the result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sporadik_dask.reduce.order import (
    extreme_positions,
    line_medians,
    line_quantiles,
    lines_of,
    median_dtype,
)
from sporadik_dask.reduce.prefetch import Fetch, ahead, batch_bounds

__all__ = [
    "Ordered",
    "Position",
    "Statistic",
    "order_blocks",
    "order_coo",
    "order_store",
    "order_store_dask",
    "store_layout",
]


class Statistic(NamedTuple):
    """An order statistic of each line: quantiles ``q`` (numpy's linear method) or, ``q`` None,
    the median."""

    q: tuple[float, ...] | None
    skipna: bool

    @property
    def needs_index(self) -> bool:
        """Whether the stored values' positions along the line are needed: not here."""
        return False

    def dtype(self, dtype: np.dtype[Any]) -> np.dtype[Any]:
        """The result's dtype, numpy's."""
        return median_dtype(dtype) if self.q is None else np.dtype(np.float64)

    def lead(self) -> tuple[int, ...]:
        """The result's leading axis: one per quantile; none for the median."""
        return () if self.q is None else (len(self.q),)

    def of(
        self,
        lines: npt.NDArray[np.int64],
        index: npt.NDArray[np.int64] | None,
        values: npt.NDArray[Any],
        count: int,
        extent: int,
        fill: Any = 0,
    ) -> npt.NDArray[Any]:
        """Each of ``count`` lines' statistic, shape ``(*lead, count)``, from the stored
        ``values`` on ``lines`` (their positions ``index`` are not needed)."""
        found = lines_of(lines, values, count, extent, fill)
        if self.q is None:
            return line_medians(found, skipna=self.skipna)  # type: ignore[no-any-return]
        q = np.asarray(self.q, np.float64)
        return line_quantiles(found, q, skipna=self.skipna)  # type: ignore[no-any-return]


class Position(NamedTuple):
    """The first position of each line's largest (``largest``) or smallest value along the
    one axis a line lies along: numpy's ``argmax`` and ``argmin``, or their ``nan`` forms."""

    largest: bool
    skipna: bool

    @property
    def needs_index(self) -> bool:
        """Whether the stored values' positions along the line are needed: they are."""
        return True

    def dtype(self, dtype: np.dtype[Any]) -> np.dtype[Any]:
        """numpy's: ``intp``."""
        return np.dtype(np.intp)

    def lead(self) -> tuple[int, ...]:
        return ()

    def of(
        self,
        lines: npt.NDArray[np.int64],
        index: npt.NDArray[np.int64] | None,
        values: npt.NDArray[Any],
        count: int,
        extent: int,
        fill: Any = 0,
    ) -> npt.NDArray[Any]:
        """Each of ``count`` lines' position, from the stored ``values`` at ``index``."""
        assert index is not None, "a position is of values whose positions were read"
        return extreme_positions(
            lines, index, values, count, extent, fill, largest=self.largest, skipna=self.skipna
        )


#: What a pass over lines answers.
Ordered = Statistic | Position


def order_coo(coo: Any, kept: Sequence[int], statistic: Ordered) -> npt.NDArray[Any]:
    """``statistic`` of each line of a ``sparse.COO`` along its axes ``kept``, shape
    ``(*lead, *kept shape)``; its absent cells hold its fill value. A :class:`Position` is
    along the reduced axes raveled in C order (numpy's flat position over every axis)."""
    shape = tuple(coo.shape)
    kept_shape = tuple(shape[a] for a in kept)
    extent = math.prod(s for a, s in enumerate(shape) if a not in kept)
    count = math.prod(kept_shape)
    if kept:
        columns = tuple(np.asarray(coo.coords[a], np.int64) for a in kept)
        lines = np.ravel_multi_index(columns, kept_shape).astype(np.int64)
    else:
        lines = np.zeros(coo.nnz, np.int64)
    index = None
    if statistic.needs_index:  # along the reduced axes raveled, as numpy's flat positions
        along = [a for a in range(len(shape)) if a not in kept]
        columns = tuple(np.asarray(coo.coords[a], np.int64) for a in along)
        index = np.ravel_multi_index(columns, tuple(shape[a] for a in along)).astype(np.int64)
    found = statistic.of(lines, index, np.asarray(coo.data), count, extent, coo.fill_value)
    return found.reshape((*statistic.lead(), *kept_shape))


def store_layout(reader: Any, kept: Sequence[int], statistic: Ordered) -> Any:
    """The layout whose runs are the lines of ``kept``: indexed by the one kept axis (any
    layout when none is kept, every run then part of the one line); None for several kept
    axes, or one without a layout, and for a :class:`Position` but along one other axis."""
    layouts = reader.description.layouts
    if statistic.needs_index and len(reader.shape) - len(kept) != 1:
        return None
    if not kept:
        return layouts[min(layouts)]
    if len(kept) == 1 and kept[0] in layouts:
        return layouts[kept[0]]
    return None


def order_store(
    reader: Any, kept: Sequence[int], statistic: Ordered, span: tuple[int, int] | None = None
) -> npt.NDArray[Any]:
    """``statistic`` of each line of a store along ``kept`` (one axis with a layout, or none),
    over the runs of positions ``span`` (default all) of :func:`store_layout`, in bounded
    batches, the next read while this one is answered.

    1. Kept an axis: each batch of runs is a batch of lines, answered alone into its stretch of
       the result.
    2. Kept none: the one line's stored values are gathered (the store's values, never its
       dense cells), then answered.
    """
    layout = store_layout(reader, kept, statistic)
    if span is None:
        layout.check_whole_read(reader.location)
    first, last = span or (0, layout.positions)
    ((lo, hi),) = reader.brackets([(layout, range(first, last))])
    index = statistic.needs_index
    fetch = Fetch(reader, layout, lo, hi, runs_only=not index)
    batches = batch_bounds(lo, hi, int(reader.dtype.itemsize) + 8 * index)
    dtype = statistic.dtype(reader.dtype)
    if not kept:
        values = [v for _, _, (_, v) in ahead(fetch, batches)]
        joined = np.concatenate([np.zeros(0, reader.dtype), *values])
        lines = np.zeros(joined.size, np.int64)
        found = statistic.of(lines, None, joined, 1, math.prod(reader.shape))
        return found.reshape(statistic.lead()).astype(dtype, copy=False)
    result = np.empty((*statistic.lead(), last - first), dtype)
    for a, b, (indices, values) in ahead(fetch, batches):
        lengths = hi[a:b] - lo[a:b]
        of_run = np.repeat(np.arange(b - a, dtype=np.int64), lengths)
        result[..., a:b] = statistic.of(of_run, indices, values, b - a, layout.extent)
    return result


def _joined(*spans: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Consecutive spans' results, along their last axis (a 0-d result: the one span's)."""
    return spans[0] if spans[0].ndim == 0 else np.concatenate(spans, axis=-1)


def order_store_dask(reader: Any, kept: Sequence[int], statistic: Ordered, spans: int) -> Any:
    """:func:`order_store` as a one-block dask array: one task per span of the layout's
    positions (about equal in values), each reading its own runs; the spans' results joined.
    Kept no axis, one span."""
    from sporadik_dask.planning.plan import partition_bounds
    from sporadik_dask.reduce.graph import store_reduction

    layout = store_layout(reader, kept, statistic)
    layout.check_whole_read(reader.location)
    ((lo, hi),) = reader.brackets([(layout, range(layout.positions))])
    indptr = np.concatenate(([0], np.cumsum(hi - lo)))
    bounds = partition_bounds(indptr, max(1, -(-int(indptr[-1]) // max(spans, 1))))
    if not kept or bounds.size < 2:
        bounds = np.array([0, layout.positions], dtype=np.int64)
    dtype = statistic.dtype(reader.dtype)
    shape = (*statistic.lead(), *(reader.shape[a] for a in kept))
    return store_reduction(
        reader,
        bounds,
        label=f"sporadik-{type(statistic).__name__.lower()}",
        fields=(order_store, reader, tuple(kept), statistic),
        merge=None,
        finish=(_joined,),
        shape=shape,
        meta=np.empty((0,) * len(shape), dtype),
    )


def _block_order(block: Any, kept: tuple[int, ...], statistic: Ordered) -> npt.NDArray[Any]:
    return order_coo(block, kept, statistic)


def order_blocks(x: Any, kept: Sequence[int], statistic: Ordered) -> Any:
    """``statistic`` of each line of a dask array of ``sparse.COO`` blocks along ``kept``: its
    blocks joined along the other axes first, so a block holds whole lines (a block then holds
    its lines' stored values), then answered block by block."""
    import dask.array as da

    kept = tuple(kept)
    reduced = [a for a in range(x.ndim) if a not in kept]
    whole = x.rechunk({a: -1 for a in reduced}) if reduced else x
    lead = statistic.lead()
    chunks = (*((n,) for n in lead), *(whole.chunks[a] for a in kept))
    dtype = statistic.dtype(x.dtype)
    return da.map_blocks(
        _block_order,
        whole,
        kept,
        statistic,
        drop_axis=reduced,
        new_axis=list(range(len(lead))),
        chunks=chunks,
        dtype=dtype,
        meta=np.empty((0,) * len(chunks), dtype),
    )
