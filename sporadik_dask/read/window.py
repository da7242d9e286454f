"""Selections of a dask array read from a store, as new reads of a *window* of the store.

dask fuses a slice into the read of each block, but a list or a mask becomes a ``take`` over
whole blocks: every block is read in full and then fancy-indexed by ``sparse``, which scans each
block's coordinates once per position asked for, and a stepped slice becomes per-block slices
that ``sparse`` 0.19 reads wrongly for some negative steps. An outer selection of a dask array
that is still a plain read of a store (its graph is the read and nothing else) is therefore
read afresh: blocks cut from the selected positions, each block one call to the reader with the
positions it holds. The result is a plain read again, of a window of the store, so a chain of
selections is one read of the positions it resolves to (ranges for slices, exact under any
step). :class:`SporadikArray` (what ``from_sporadik`` returns) routes its own ``__getitem__``
here; the xarray backend routes its dask indexing adapter here
(:mod:`sporadik_dask.backend.dask_selection`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import dask.array as da
import numpy as np

import sporadik_dask.read.dask_model as dask_model
from sporadik_dask.read.blocks import (
    READ_PREFIX,
    StoreWindow,
    beneath,
    layout_axes,
    read_blocks,
    reader_of,
    store_axes,
)
from sporadik_dask.read.reductions import numpy_reduced, pushed_down
from sporadik_dask.read.selection import Axis, pointwise, take

__all__ = [
    "SporadikArray",
    "select",
    "select_points",
]


class SporadikArray(da.Array):
    """A dask array that is a read of a store, whose selections are reads too.

    dask cuts a stepped slice into per-block slices, and ``sparse`` 0.19 reads some of those
    wrongly (``COO[slice(4, -1, -2)]`` of a 5-long block gives 3 values where numpy gives none);
    a list or a mask becomes a ``take`` over whole blocks. So a key of integers, slices and one
    list, integer array or 1-D mask at most is a new read of the positions it selects
    (:func:`select`), in numpy's shape, and a chain of them one read of the positions the chain
    resolves to; every other key is dask's. Arrays that dask operations make of this one are
    plain dask arrays.
    """

    __slots__ = ()

    def __getitem__(self, index: Any) -> Any:
        routed = _numpy_key(index, self.ndim)
        selected = None if routed is None else select(self, routed.key)
        if routed is None or selected is None:
            return super().__getitem__(index)  # type: ignore[no-untyped-call]
        if routed.expand is not None:
            selected = selected[routed.expand]
        if routed.front is None:
            return selected
        axes = list(range(selected.ndim))  # numpy's move of the array's axis to the front
        return selected.transpose([routed.front, *axes[: routed.front], *axes[routed.front + 1 :]])

    # dask's own, but along some axes of a plain read: one pass over a layout's runs
    sum = pushed_down("sum")
    mean = pushed_down("mean")
    max = pushed_down("max")
    min = pushed_down("min")
    var = pushed_down("var")
    std = pushed_down("std")

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        """numpy's reductions of this read, with and without NaNs, as
        :func:`~sporadik_dask.read.reductions.reduced` computes them; every other function is
        dask's."""
        pushed = numpy_reduced(self, func, args, kwargs)
        if pushed is not None:
            return pushed
        return super().__array_function__(func, types, args, kwargs)  # type: ignore[no-untyped-call]

    @property
    def vindex(self) -> Any:
        """``x.vindex[key]``: integer arrays (and slices), one per axis, are a read of those cells
        (:func:`select_points`); every other key is dask's (the expression model has none)."""
        from dask.utils import IndexCallable

        return IndexCallable(self._vindex)

    def _vindex(self, key: Any) -> Any:
        points = select_points(self, key if isinstance(key, tuple) else (key,))
        if points is not None:
            return points
        own = getattr(super(), "_vindex", None)
        if own is None:
            raise NotImplementedError(
                f"vindex[{key!r}]: dask's expression model (array.query-planning) has no "
                "pointwise indexing of its own, and only integer arrays and slices, one per "
                "axis, are read as points here. Pass such a key, or compute the array first."
            )
        return own(key)

    def __reduce__(self) -> Any:
        return (_read_again, (dask_model.source_of(self), self.chunks, self._meta, self.name))


def _read_again(source: Any, chunks: Any, meta: Any, name: str) -> SporadikArray:
    """An unpickled :class:`SporadikArray`: the same read, registered in this process, with a
    meta made afresh (an unpickled ``sparse`` array tokenizes otherwise, and the expression
    model names a read by its meta too)."""
    import sparse

    fresh = sparse.COO.from_numpy(np.zeros(meta.shape, dtype=meta.dtype))
    if meta.format != "coo":
        fresh = fresh.asformat(meta.format, compressed_axes=meta.compressed_axes)
    return as_sporadik_array(read_blocks(source, chunks, fresh, name=name))


def as_sporadik_array(x: da.Array) -> SporadikArray:
    """``x``, a plain read of a store, as a :class:`SporadikArray` (the same graph and name)."""
    return dask_model.rewrap(SporadikArray, x)


class _Routed(NamedTuple):
    """A numpy key as an outer key :func:`select` reads, and how to give numpy's shape."""

    #: One part per axis: integers, slices and one integer array at most.
    key: tuple[Any, ...]
    #: A key adding numpy's new axes to the read (``None`` where the caller wrote one), if any.
    expand: tuple[slice | None, ...] | None
    #: Where the array's axis lands in the read, if numpy moves it first.
    front: int | None


def _numpy_key(index: Any, ndim: int) -> _Routed | None:
    """``index`` as an outer key that reads numpy's values, or None to leave it to dask.

    Taken: keys of integers, slices, ``None`` and one ``Ellipsis``, with one list, integer array
    or 1-D boolean mask at most, that select less than the whole array; with one array, numpy's
    indexing is outer indexing, except that an array and integers apart from each other put the
    array's axis first.

    1. Lists become arrays (an empty one integer), ``Ellipsis`` the slices it stands for.
    2. Leave the key to dask if it holds anything else, two arrays, or selects everything.
    3. The outer key is the key without ``None``; the new axes and numpy's move of the array's
       axis are applied to the read afterwards.
    """
    parts: list[Any] = []
    for part in index if isinstance(index, tuple) else (index,):
        if isinstance(part, list):
            part = np.asarray(part) if part else np.zeros(0, dtype=np.int64)
        if isinstance(part, np.ndarray) and (part.ndim != 1 or part.dtype.kind not in "iub"):
            return None
        known = part is None or part is Ellipsis or isinstance(part, (slice, np.ndarray))
        if not (known or _integer(part)):
            return None
        parts.append(part)
    taking = sum(part is not None and part is not Ellipsis for part in parts)
    ellipses = [i for i, part in enumerate(parts) if part is Ellipsis]
    if len(ellipses) > 1 or taking > ndim:
        return None
    # numpy's "apart" is in the key as written: an Ellipsis standing for no axis still parts
    advanced = [i for i, part in enumerate(parts) if isinstance(part, np.ndarray) or _integer(part)]
    apart = bool(advanced) and advanced[-1] - advanced[0] + 1 != len(advanced)
    at = ellipses[0] if ellipses else len(parts)
    parts[at : at + 1] = [slice(None)] * (ndim - taking)
    arrays = [i for i, part in enumerate(parts) if isinstance(part, np.ndarray)]
    if len(arrays) > 1 or all(_whole(part) for part in parts if part is not None):
        return None
    kept = [part for part in parts if not _integer(part)]
    added = any(part is None for part in kept)
    expand = tuple(None if p is None else slice(None) for p in kept) if added else None
    front = None
    if arrays and apart:  # numpy puts the array's axis first
        front = sum(not _integer(part) for part in parts[: arrays[0]])
    return _Routed(tuple(part for part in parts if part is not None), expand, front)


def _integer(part: Any) -> bool:
    """An integer position (``True`` and ``False`` are numpy's new axes, not positions)."""
    return isinstance(part, (int, np.integer)) and not isinstance(part, bool)


def select(x: Any, key: tuple[Any, ...]) -> Any:
    """``x[key]`` (outer) as a new read of the selected positions, or None to leave it to dask.

    Every key but the whole array is taken, so a chain of selections stays one read of the
    positions it resolves to: dask would cut a stepped slice of a sliced read into per-block
    slices, which ``sparse`` 0.19 gets wrong for some negative steps (``[::-2]`` of an 11-long
    axis in blocks of 5 gives 6 values, not 4). Slices of step 1 keep the blocks dask would
    give; with a list or an array, the blocks split its positions (as many blocks as ``x``
    had) and are whole along every other axis, so each selected run is read by one task:
    blocks cut along another axis would each read every selected run again. Where no layout
    the reads go through runs along the list, the list is one block instead, cut as ``x`` was
    along the other axes: each block of the list would read every run. A read of
    ``sparse.GCXS`` blocks leaves slices of step 1 and integers to dask, fused into its reads
    in their format. The result is a :class:`SporadikArray` of ``sparse.COO`` blocks.
    """
    import sparse
    from dask.base import tokenize

    source = reader_of(x)
    if source is None or all(_whole(part) for part in key):
        return None
    if getattr(source, "format", "coo") != "coo" and not any(_not_fused(p) for p in key):
        return None
    key = key + (slice(None),) * (x.ndim - len(key))
    owned = source.positions if isinstance(source, StoreWindow) else tuple(map(range, x.shape))
    picked = [take(own, part, a) for a, (own, part) in enumerate(zip(owned, key, strict=True))]
    kept = [
        (part, got, axis)
        for axis, (part, got) in enumerate(zip(key, picked, strict=True))
        if not isinstance(got, int)
    ]
    chunks: list[tuple[int, ...]] = []
    for part, got, axis in kept:
        if _whole(part):
            chunks.append(x.chunks[axis])
        elif isinstance(part, slice) and part.step in (None, 1):
            chunks.append(_clipped(x.chunks[axis], range(x.shape[axis])[part]))
        else:
            chunks.append(_cut(len(got), max(x.chunks[axis], default=1)))
    listed = [at for at, (part, _, _) in enumerate(kept) if not isinstance(part, slice)]
    window = _window(source, picked)
    # as many blocks as x's blocks the selected share of its cells fills: blocks of a small
    # selection would each be held beside their join (50,000 x 2,000 scattered: 3.4x)
    share = math.prod(len(got) / max(x.shape[a], 1) for _, got, a in kept)
    blocks = max(1, math.ceil(share * math.prod(x.numblocks)))
    if listed and store_axes(window)[listed[0]] not in layout_axes(window):
        # no layout along the list: every block would read the runs of all it keeps of the
        # other axes, so the list is one block, and the other axes are cut as they were, into
        # no more blocks than the share fills
        chunks[listed[0]] = (len(kept[listed[0]][1]),)
        for at, (_, got, _) in enumerate(kept):
            if at != listed[0] and len(chunks[at]) > blocks:
                chunks[at] = _cut(len(got), -(-len(got) // blocks))
            blocks = max(1, blocks // len(chunks[at]))
    elif listed:  # blocks split the listed positions, whole along the rest: each run read once
        along = len(kept[listed[0]][1])
        chunks = [(len(got),) for _, got, _ in kept]
        chunks[listed[0]] = _cut(along, -(-along // min(blocks, max(along, 1))))
    meta = sparse.COO.from_numpy(np.zeros((0,) * window.ndim, dtype=x.dtype))
    name = f"{READ_PREFIX}{tokenize(window, chunks)}"
    return as_sporadik_array(read_blocks(window, tuple(chunks), meta, name=name))


def select_points(x: Any, key: tuple[Any, ...]) -> Any:
    """``x.vindex[key]`` (an integer array or slice per axis, the arrays broadcast together, axes
    past the key's whole) as one block read by
    :meth:`~sporadik_dask.read.StoreReader.read_points`, or None to leave it to dask.

    Taken for a plain read of a store or of a window of it: dask's own pointwise indexing of
    sparse blocks fails in ``sparse`` 0.19 (it assigns into a ``COO``, or overflows the small
    integer dtype of its position arrays), where the reader reads each point's runs once.
    """
    import dask
    import sparse
    from dask.base import tokenize

    source = reader_of(x)
    if source is None or len(key) > x.ndim or all(isinstance(p, slice) for p in key):
        return None
    key = key + (slice(None),) * (x.ndim - len(key))
    if not all(isinstance(p, slice) or np.asarray(p).dtype.kind in "iu" for p in key):
        return None
    parts = pointwise(tuple(key), x.shape)
    shape = np.broadcast_shapes(*(np.shape(part) for part in parts))
    owned = source.positions if isinstance(source, StoreWindow) else tuple(map(range, x.shape))
    picked = [take(own, part, a) for a, (own, part) in enumerate(zip(owned, parts, strict=True))]
    reader, dropped = beneath(source)
    chosen = iter(picked)
    points = tuple(
        np.asarray(dropped[axis] if axis in dropped else next(chosen))
        for axis in range(len(reader.shape))
    )
    meta = sparse.COO.from_numpy(np.zeros((0,) * len(shape), dtype=x.dtype))
    name = f"sporadik-points-{tokenize(reader, points)}"
    read = dask.delayed(reader.read_points, pure=True)(points, dask_key_name=name)
    return dask_model.from_delayed(read, shape, meta)


def _not_fused(part: Any) -> bool:
    if isinstance(part, slice):
        return part.step not in (None, 1)
    return isinstance(part, (list, np.ndarray))


def _whole(part: Any) -> bool:
    """Whether one axis's part of a key selects the whole axis as it is."""
    return (
        isinstance(part, slice)
        and part.start is None
        and part.stop is None
        and (part.step in (None, 1))
    )


def _window(source: Any, picked: list[Any]) -> StoreWindow:
    """A window of the store: what each axis of ``source`` picked (an integer where it drops the
    axis), beside the axes ``source`` dropped already if it is a window."""
    reader, dropped = beneath(source)
    chosen = iter(picked)
    positions: list[Axis] = []
    for axis in range(len(reader.shape)):
        if axis in dropped:
            continue
        got = next(chosen)
        if isinstance(got, int):
            dropped[axis] = got
        else:
            positions.append(got)
    return StoreWindow(reader, tuple(positions), dropped)


def _clipped(chunks: tuple[int, ...], positions: range) -> tuple[int, ...]:
    """The blocks ``chunks`` cut a step-1 range of positions into, as dask slices them."""
    if not positions:
        return (0,)
    low, high = positions.start, positions.stop
    edges = np.cumsum((0, *chunks))
    inside = edges[(edges > low) & (edges < high)]
    return tuple(int(n) for n in np.diff(np.concatenate(([low], inside, [high]))))


def _cut(length: int, block: int) -> tuple[int, ...]:
    """``length`` positions in blocks of at most ``block``."""
    if length == 0:
        return (0,)
    count = math.ceil(length / max(block, 1))
    base, extra = divmod(length, count)
    return tuple(base + (1 if i < extra else 0) for i in range(count))
