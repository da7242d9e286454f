"""A window of a store, the dask blocks read from a reader or a window, and which of them a
dask array reads (:func:`reader_of`).

A window is positions along each axis of a store, read as one array: what a selection of a
store's dask read becomes (:mod:`sporadik_dask.read.window`). Its blocks are read as dask's
``from_array`` reads them, one call each, unless they cut an axis along which no layout runs:
then in *strips*, each stored run read once per compute (:func:`read_blocks`).
"""

from __future__ import annotations

import math
from typing import Any

import dask.array as da
import numpy as np

import sporadik_dask.read.dask_model as dask_model
from sporadik_dask.marks import mark_read
from sporadik_dask.read.selection import Axis, as_slice, take

__all__ = [
    "READ_PREFIX",
    "StoreWindow",
    "beneath",
    "layout_axes",
    "read_blocks",
    "reader_of",
    "store_axes",
    "store_part",
]

#: Names of dask arrays read from a store by xarray's dask manager, or from a window, begin so
#: (in dask's graph model; the expression model names an array by its expression).
READ_PREFIX = "sporadik-read-"


class StoreWindow:
    """Positions along each axis of a store, read as one array: ``window[key]`` reads the
    positions ``key`` picks of each axis's positions. Pickles as its reader (a location)."""

    __slots__ = ("__weakref__", "dropped", "dtype", "positions", "reader", "shape")

    def __init__(self, reader: Any, positions: tuple[Axis, ...], dropped: dict[int, int]) -> None:
        self.reader = reader
        #: Per kept axis, the store positions it reads, in order.
        self.positions = positions
        #: Axes of the store an integer dropped, and that integer.
        self.dropped = dropped
        self.shape = tuple(len(p) for p in positions)
        self.dtype = reader.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, key: Any) -> Any:
        """The positions ``key`` picks (dask's getter gives slices, and integers it fused),
        marked as read (:func:`~sporadik_dask.marks.mark_read`)."""
        key = key if isinstance(key, tuple) else (key,)
        key = key + (slice(None),) * (self.ndim - len(key))
        kept = iter(zip(self.positions, key, strict=True))
        store_key: list[Any] = []
        for axis in range(self.ndim + len(self.dropped)):
            if axis in self.dropped:
                store_key.append(self.dropped[axis])
                continue
            positions, part = next(kept)
            store_key.append(store_part(take(positions, part, axis)))
        return mark_read(self.reader.read(tuple(store_key)))

    def __dask_tokenize__(self) -> Any:
        return (type(self).__name__, self.reader, self.positions, sorted(self.dropped.items()))


def read_blocks(source: Any, chunks: Any, meta: Any, *, name: str, **kwargs: Any) -> da.Array:
    """A read of ``source`` (a reader or a window) in ``chunks``, registered as its read.

    Each block is one call to ``source`` (dask's ``from_array``), unless the blocks cut an axis
    along which no layout the reads go through runs: a block of positions 0:10**8 of a genome,
    read through the layout of samples, reads every sample's whole run and keeps a 31st of it,
    so 31 such blocks read every stored value 31 times; or blocks of samples of a window that
    narrows the positions alone, each of which would read the region's runs again. Then the
    blocks are read in *strips*:

    1. A strip is whole along every such axis, and cut as ``chunks`` cut the other axes.
    2. One task reads a strip (one call to ``source``) and splits its values by block.
    3. Each block takes its part of its strip: every stored run is read once per compute.

    ``kwargs`` go to ``from_array`` when the blocks are its own; ``sparse.GCXS`` reads are
    always dask's getter.
    """
    from dask.base import tokenize

    chunks = da.core.normalize_chunks(chunks, source.shape, dtype=source.dtype)
    scanned = _scanned(source, chunks)
    if not scanned or getattr(source, "format", "coo") != "coo":
        return dask_model.read_array(source, chunks, meta, name=name, **kwargs)
    import itertools

    strips = [(c if axis not in scanned else (sum(c),)) for axis, c in enumerate(chunks)]
    strip_name = f"sporadik-strip-{tokenize(name)}"
    edges = [np.cumsum((0, *chunks[axis])) for axis in scanned]
    graph: dict[Any, Any] = {}
    for at in itertools.product(*(range(len(c)) for c in strips)):
        key = tuple(
            slice(int(e[i]), int(e[i + 1]))
            for e, i in zip((np.cumsum((0, *c)) for c in strips), at, strict=True)
        )
        graph[(strip_name, *at)] = (_read_strip, source, key, scanned, edges)
    for at in itertools.product(*(range(len(c)) for c in chunks)):
        strip = tuple(0 if axis in scanned else i for axis, i in enumerate(at))
        part = int(np.ravel_multi_index([at[a] for a in scanned], [len(e) - 1 for e in edges]))
        graph[(name, *at)] = (_part, (strip_name, *strip), part)
    return dask_model.read_graph(source, graph, name, chunks, meta)


def _scanned(source: Any, chunks: tuple[tuple[int, ...], ...]) -> list[int]:
    """The axes of ``source`` cut into blocks that a read would not bracket: no layout the
    reads go through runs along them, or their blocks are too long to bracket
    (:data:`~sporadik_dask.planning.budgets.BRACKET_POSITIONS`) and another layout would be
    read instead (:func:`~sporadik_dask.read.routing.candidates`), or the window is whole along
    them and narrowed along the one axis whose runs its reads take (:func:`_runs_along`)."""
    from sporadik_dask.planning.budgets import BRACKET_POSITIONS

    layouts = layout_axes(source)
    along = _runs_along(source, chunks, layouts)
    return [
        axis
        for axis, store_axis in enumerate(store_axes(source))
        if len(chunks[axis]) > 1
        and (
            store_axis not in layouts
            or (len(layouts) > 1 and max(chunks[axis]) > BRACKET_POSITIONS)
            or (along is not None and axis != along and not _narrowed(source, axis))
        )
    ]


def _runs_along(source: Any, chunks: tuple[tuple[int, ...], ...], layouts: set[int]) -> int | None:
    """The one axis of a window that narrows the store along a layout, in blocks short enough to
    bracket, if there is one: a read of the window whole along every other axis goes through
    that layout's runs, and so does a block cut along another axis, each block reading every
    run again (a region of a genome in blocks of samples: as many reads of it as blocks)."""
    from sporadik_dask.planning.budgets import BRACKET_POSITIONS

    narrowing = [
        axis
        for axis, store_axis in enumerate(store_axes(source))
        if store_axis in layouts and _narrowed(source, axis)
    ]
    if len(narrowing) != 1 or max(chunks[narrowing[0]], default=0) > BRACKET_POSITIONS:
        return None
    return narrowing[0]


def _narrowed(source: Any, axis: int) -> bool:
    """Whether a window holds fewer positions along ``axis`` than its store axis has."""
    if not isinstance(source, StoreWindow):
        return False
    reader, _ = beneath(source)
    return bool(len(source.positions[axis]) < reader.shape[store_axes(source)[axis]])


def store_axes(source: Any) -> list[int]:
    """The store axis each axis of ``source`` (a reader or a window) reads."""
    reader, dropped = beneath(source)
    return [axis for axis in range(len(reader.shape)) if axis not in dropped]


def layout_axes(source: Any) -> set[int]:
    """The store axes of the layouts ``source``'s reads may go through: the reader's fixed
    layout, or every layout of the store."""
    reader, _ = beneath(source)
    return set(reader.description.layouts) if reader.axis is None else {reader.axis}


def _read_strip(
    source: Any, key: tuple[slice, ...], axes: list[int], edges: list[Any]
) -> list[Any]:
    """``source[key]`` split into blocks cut along ``axes`` at ``edges`` (offsets in the strip),
    in C order of those blocks: each a ``sparse.COO`` in C order, marked as read."""
    import sparse

    strip = source[key]
    counts = [len(e) - 1 for e in edges]
    if axes == [0]:  # C order: each block a stretch of the strip's values, found by its edges
        (e,) = edges
        bounds = np.searchsorted(strip.coords[0], e)
        coords, data = strip.coords, strip.data  # the strip is not kept: shifted in place,
        for lo, hi, first in zip(bounds[:-1], bounds[1:], e[:-1], strict=True):  # block by block
            coords[0, lo:hi] -= first
    else:
        spots = [
            np.searchsorted(e, strip.coords[axis], side="right") - 1
            for axis, e in zip(axes, edges, strict=True)
        ]
        which = (
            np.ravel_multi_index(spots, counts) if spots[0].size else np.zeros(0, dtype=np.int64)
        )
        order = np.argsort(which, kind="stable")  # C order kept within each block
        bounds = np.searchsorted(which[order], np.arange(math.prod(counts) + 1))
        coords = strip.coords[:, order]
        for axis, e, spot in zip(axes, edges, spots, strict=True):
            coords[axis] -= e[spot[order]]
        data = strip.data[order]
    blocks = []
    for at in np.ndindex(*counts):
        shape = list(strip.shape)
        for axis, e, i in zip(axes, edges, at, strict=True):
            shape[axis] = int(e[i + 1] - e[i])
        part = int(np.ravel_multi_index(at, counts))
        lo, hi = bounds[part], bounds[part + 1]
        blocks.append(
            mark_read(
                sparse.COO(
                    coords[:, lo:hi],
                    data[lo:hi],
                    shape=tuple(shape),
                    has_duplicates=False,
                    sorted=True,
                )
            )
        )
    return blocks


def _part(parts: list[Any], at: int) -> Any:
    return parts[at]


def store_part(positions: int | Axis) -> Any:
    """Positions as the reader's key for one axis: a slice where they are a range (the reader's
    cheapest key), an integer or an array as they are."""
    if isinstance(positions, range):
        return as_slice(positions)
    if (
        isinstance(positions, np.ndarray)
        and positions.size
        and bool(np.all(np.diff(positions) == 1))
    ):
        return slice(int(positions[0]), int(positions[-1]) + 1)
    return positions


def beneath(source: Any) -> tuple[Any, dict[int, int]]:
    """The reader beneath ``source`` (a reader or a window) and the store axes it drops."""
    if isinstance(source, StoreWindow):
        return source.reader, dict(source.dropped)
    return source, {}


def reader_of(x: Any) -> Any:
    """The reader (or window) a dask array reads, if it is that read and nothing more."""
    from sporadik_dask.read.reader import StoreReader

    held = dask_model.source_of(x)
    return held if isinstance(held, (StoreReader, StoreWindow)) else None
