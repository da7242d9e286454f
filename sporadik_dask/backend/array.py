"""The lazy array under an opened variable: every selection goes to the store's reader."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt
from xarray.backends import BackendArray
from xarray.core import indexing

from sporadik_dask.marks import mark_read

if TYPE_CHECKING:
    from sporadik_dask.read import StoreReader

__all__ = [
    "BoundedLazyArray",
    "Outer",
    "SporadikBackendArray",
    "Underlying",
    "backend_under",
    "outer_of",
    "outer_selection",
    "read_not_kept",
]


class SporadikBackendArray(BackendArray):
    """A lazy view of the store; indexing returns ``sparse.COO`` read through the best layout.

    It holds the reader, which pickles as a location, so a variable travels to dask workers.
    """

    __slots__ = ("dtype", "reader", "shape")

    def __init__(self, reader: StoreReader) -> None:
        self.reader = reader
        self.shape = reader.shape
        self.dtype = reader.dtype

    def __getitem__(self, key: indexing.ExplicitIndexer) -> Any:
        """Outer keys go to the reader as xarray gives them (unsorted, repeated, negative), so
        it builds the caller's order while assembling; pointwise keys of arrays go to
        :meth:`~sporadik_dask.read.StoreReader.read_points`. What it gives is marked as read
        (:func:`mark_read`)."""
        return mark_read(self._read(key))

    def _read(self, key: indexing.ExplicitIndexer) -> Any:
        if not isinstance(key, indexing.VectorizedIndexer):
            return self.reader.read(key.tuple)  # slices of any step, arrays in any order
        outer = outer_of(key, self.ndim)
        if outer is not None:  # a transposed view (``.T``, a Dataset's transpose)
            positions, order = outer
            return self.reader.read(positions).transpose(order)
        if all(isinstance(part, np.ndarray) for part in key.tuple):
            return self.reader.read_points(key.tuple)
        return indexing.explicit_indexing_adapter(  # arrays mixed with slices: xarray's path
            key, self.shape, indexing.IndexingSupport.OUTER, self.reader.read
        )


class BoundedLazyArray(indexing.LazilyIndexedArray):
    """xarray's lazy view of a store, composing a chain of selections as numpy does.

    xarray's own composes keys through ``normalize_slice``, which spells a backward slice that
    starts before position 0 as ``slice(-1, None, -1)``: ``v.isel(gene=slice(-9001, None, -1))``
    of 8,000 genes, empty to numpy, would read every gene reversed. And it composes a negative
    integer by adding the axis length, with no bounds check, so ``v.isel(gene=-8001)`` would read
    gene 7,999 where numpy raises ``IndexError``. This view resolves each axis's chain to its
    positions (:func:`~sporadik_dask.read.selection.take`): a range for slices, spelled as a
    slice with a non-negative start, an array for lists and masks.
    """

    __slots__ = ()

    def _updated_key(self, new_key: indexing.ExplicitIndexer) -> Any:
        from sporadik_dask.read.selection import as_slice, take

        parts = iter(indexing.expanded_indexer(new_key.tuple, self.ndim))
        key: list[Any] = []
        for axis, (old, size) in enumerate(zip(self.key.tuple, self.array.shape, strict=True)):
            if isinstance(old, (int, np.integer)):
                key.append(old)
                continue
            positions = range(size)[old] if isinstance(old, slice) else old
            got = take(positions, next(parts), axis)
            key.append(as_slice(got) if isinstance(got, range) else got)
        if all(isinstance(part, (int, np.integer, slice)) for part in key):
            return indexing.BasicIndexer(tuple(key))
        return indexing.OuterIndexer(tuple(key))

    def _vindex_get(self, indexer: indexing.VectorizedIndexer) -> Any:
        """Points of this view as points of the store: each array taken from its axis's
        positions (:func:`~sporadik_dask.read.selection.take`). xarray's own spells every
        slice of the view as ``np.arange`` over its axis first: 23 GiB for an axis of 3.1e9
        genome positions, to look up 1,000 points. A key with slices among its arrays is
        xarray's."""
        from sporadik_dask.read.selection import take

        parts = indexer.tuple
        if len(parts) != self.ndim or not all(isinstance(p, np.ndarray) for p in parts):
            return super()._vindex_get(indexer)
        new = iter(np.broadcast_arrays(*parts))
        points: list[Any] = []
        for axis, (old, size) in enumerate(zip(self.key.tuple, self.array.shape, strict=True)):
            if isinstance(old, (int, np.integer)):
                points.append(np.int64(old))
                continue
            positions = range(size)[old] if isinstance(old, slice) else old
            points.append(np.asarray(take(positions, next(new), axis), dtype=np.int64))
        shape = np.broadcast_shapes(*(np.shape(p) for p in points))
        key = indexing.VectorizedIndexer(tuple(np.broadcast_to(p, shape) for p in points))
        return indexing.LazilyVectorizedIndexedArray(self.array, key)


def outer_of(
    key: indexing.VectorizedIndexer, ndim: int
) -> tuple[tuple[np.ndarray, ...], tuple[int, ...]] | None:
    """The positions along each axis and the axis at each dimension of the result, when ``key`` is
    an outer selection with its axes permuted, as xarray spells a transposed lazy view: each
    axis's positions broadcast along a dimension of its own. None for a pointwise key.

    Read as points, ``v.T`` of 200,000 x 20,000 would ask for 4e9 of them.
    """
    parts = key.tuple
    if len(parts) != ndim or not all(isinstance(p, np.ndarray) for p in parts):
        return None
    if len({p.ndim for p in parts}) != 1 or parts[0].ndim != ndim:
        return None
    placed: dict[int, int] = {}  # result dimension -> axis
    single = []  # axes of one position, each on a length-1 dimension of its own
    for axis, part in enumerate(parts):
        long = [d for d, n in enumerate(part.shape) if n != 1]
        if len(long) > 1 or (long and long[0] in placed):
            return None
        if long:
            placed[long[0]] = axis
        else:
            single.append(axis)
    free = [d for d in range(ndim) if d not in placed]
    placed.update(zip(free, single, strict=True))
    return tuple(part.ravel() for part in parts), tuple(placed[d] for d in range(ndim))


@dataclass(frozen=True, slots=True)
class Underlying:
    """What lies under a lazily opened variable's wrappers."""

    #: The sporadik backend array, or None (another array, or values xarray holds in memory).
    backend: SporadikBackendArray | None
    #: Whether the wrappers select the whole of it.
    whole: bool
    #: For each of the variable's axes, the store axis it is (a transposed view's permutation).
    axes: tuple[int, ...]


def backend_under(data: Any) -> Underlying:
    """The sporadik backend array beneath xarray's lazy wrappers, whether they select the whole
    of it, and in which order they put its axes."""
    whole, axes = True, tuple(range(getattr(data, "ndim", 0)))
    while data is not None:
        if isinstance(data, SporadikBackendArray):
            return Underlying(data, whole, axes)
        if isinstance(data, indexing.LazilyVectorizedIndexedArray):
            outer = outer_of(data.key, data.array.ndim)
            if outer is None:
                return Underlying(None, False, axes)
            positions, axes = outer
            whole = whole and all(  # sizes first: no array of a genome's positions for a few
                len(p) == n and np.array_equal(p, np.arange(n))
                for p, n in zip(positions, data.array.shape, strict=True)
            )
        elif isinstance(data, indexing.LazilyIndexedArray) and not all(
            isinstance(k, slice) and k == slice(None) for k in data.key.tuple
        ):
            whole = False
        data = getattr(data, "array", None)
    return Underlying(None, False, axes)


class Outer(NamedTuple):
    """A lazily opened variable as an outer selection of its store."""

    backend: SporadikBackendArray
    #: The positions selected along each store axis: a ``range`` for a slice or the whole axis
    #: (an array of a genome's positions would be 8 bytes a position), else an int64 array.
    positions: tuple[range | npt.NDArray[np.int64], ...]
    #: For each of the variable's axes, the store axis it is.
    axes: tuple[int, ...]

    def whole(self, axis: int) -> bool:
        """Whether every position along store ``axis`` is selected once, in order."""
        size = self.backend.shape[axis]
        got = self.positions[axis]
        if isinstance(got, range):
            return got == range(size)
        return got.size == size and bool(np.all(got == np.arange(size)))


def outer_selection(data: Any) -> Outer | None:
    """The store and the positions along each of its axes a lazily opened variable selects, when
    one view over the store selects them (a slice, list or mask per axis, a transposed view);
    None for values in memory or chunked, points, or an integer (a dropped axis)."""
    while data is not None and not isinstance(
        data,
        (SporadikBackendArray, indexing.LazilyIndexedArray, indexing.LazilyVectorizedIndexedArray),
    ):
        data = getattr(data, "array", None)
    if isinstance(data, SporadikBackendArray):
        return Outer(data, tuple(range(size) for size in data.shape), tuple(range(data.ndim)))
    if data is None or not isinstance(data.array, SporadikBackendArray):
        return None
    backend, key = data.array, data.key
    if isinstance(key, indexing.VectorizedIndexer):
        found = outer_of(key, backend.ndim)
        if found is None:
            return None
        parts, axes = found
        return Outer(backend, tuple(np.asarray(p, dtype=np.int64) for p in parts), axes)
    if any(isinstance(part, (int, np.integer)) for part in key.tuple):
        return None
    positions = tuple(
        range(size)[part] if isinstance(part, slice) else np.asarray(part, dtype=np.int64)
        for part, size in zip(key.tuple, backend.shape, strict=True)
    )
    return Outer(backend, positions, tuple(range(backend.ndim)))


def read_not_kept(held: Any) -> Any:
    """The values of a lazily opened variable's wrappers, read without filling xarray's
    in-memory cache (``MemoryCachedArray`` keeps what it reads)."""
    from xarray.core.indexing import MemoryCachedArray

    inner = held.array if isinstance(held, MemoryCachedArray) else held
    return inner.get_duck_array()
