"""Reading selections of a store as ``sparse.COO``, each routed to the layout that answers it.

Any selection costs two read waves: the ``indptr`` brackets of the positions asked for, then every
run they name, together (every zarr chunk they touch fetched once, in one batch). The
layout is the one whose runs hold the fewest values for the selection, which the brackets tell
before any value is read; a selection no present layout compresses is a scan, with a warning.
"""

from __future__ import annotations

import asyncio
import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr

from sporadik_dask.chunks import read_chunks
from sporadik_dask.describe import LayoutDescription, StoreDescription, describe_group_async
from sporadik_dask.errors import LayoutError, ScanWarning, SporadikError
from sporadik_dask.kernels import sort_by_key, transpose_runs
from sporadik_dask.spec import ARRAY_NAMES, MAXIMA, check_indices
from sporadik_dask.storage import StoreLike, location_of, open_group_async, run

__all__ = ["StoreReader", "from_sporadik", "normalize_key"]

Selection = list[npt.NDArray[np.int64]]


def normalize_key(key: Any, shape: Sequence[int]) -> tuple[Selection, tuple[int, ...]]:
    """Per axis the positions selected, in the caller's order, and the axes an integer drops.

    Accepts ints (negative counted from the end), slices with any step, and integer arrays.
    """
    if not isinstance(key, tuple):
        key = (key,)
    if len(key) > len(shape):
        raise IndexError(f"{len(key)} indices for an array of rank {len(shape)}")
    key = key + (slice(None),) * (len(shape) - len(key))
    selections, dropped = [], []
    for axis, (part, size) in enumerate(zip(key, shape, strict=True)):
        if isinstance(part, slice):
            chosen = np.arange(*part.indices(size), dtype=np.int64)
        elif np.ndim(part) == 0:
            position = int(part)
            if not -size <= position < size:
                raise IndexError(f"index {position} is out of bounds for axis {axis} of {size}")
            chosen = np.array([position % size], dtype=np.int64)
            dropped.append(axis)
        else:
            chosen = np.asarray(part).astype(np.int64, copy=False).ravel()
            if chosen.size and (chosen.min() < -size or chosen.max() >= size):
                raise IndexError(f"an index is out of bounds for axis {axis} of {size}")
            chosen = np.where(chosen < 0, chosen + size, chosen)
        selections.append(chosen)
    return selections, tuple(dropped)


def _unique(positions: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Sorted distinct positions; O(n) when they already are (numpy 2's ``np.unique`` hashes)."""
    if positions.size < 2 or bool(np.all(positions[1:] > positions[:-1])):
        return positions
    ordered = np.sort(positions)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def _chunks_touched(
    first: npt.NDArray[np.int64], last: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """Every chunk id in any ``[first[i], last[i]]``, sorted and once each."""
    if first.size == 0:
        return np.zeros(0, dtype=np.int64)
    spans = last - first + 1
    ids = np.repeat(first, spans) + (
        np.arange(int(spans.sum())) - np.repeat(np.cumsum(spans) - spans, spans)
    )
    return _unique(ids)


def _elements(
    decoded: list[npt.NDArray[Any]],
    ids: npt.NDArray[np.int64],
    chunk: int,
    where: npt.NDArray[np.int64],
) -> npt.NDArray[Any]:
    """Elements ``where`` of an array, from its decoded whole chunks ``ids`` (sorted).

    Element ``e`` sits at (the rank of chunk ``e // chunk`` among ``ids``) * chunk + e % chunk.
    """
    table = np.concatenate(decoded) if decoded else np.zeros(0, dtype=np.int64)
    return table[np.searchsorted(ids, where // chunk) * chunk + where % chunk]


def _c_order(
    coords: npt.NDArray[np.int64],
    data: npt.NDArray[Any],
    shape: tuple[int, ...],
    read_order: Sequence[int],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    """Values in C order, as ``sparse.COO`` keeps them, by stable counting sorts: O(n) rather
    than sparse's argsort.

    A layout's runs arrive sorted by ``read_order`` (the indexed axis, then ``index_order``).
    A stable sort by the leading axes ``0..m-1`` alone then leaves ties in read order, which is
    C order when the other axes follow in ascending order: one pass for a CSC read, none for
    CSR. Anything else (runs not sorted, from a writer that did not sort them) gets every pass.
    """
    if data.size < 2:
        return coords, data
    rank = len(shape)
    lead = next(
        m for m in range(rank + 1) if [a for a in read_order if a >= m] == [*range(m, rank)]
    )
    for axis in reversed(range(lead)):
        counts = np.bincount(coords[axis], minlength=shape[axis])
        coords, data = sort_by_key(coords[axis], counts, coords, data)
    linear = np.ravel_multi_index(tuple(coords), shape)
    if bool(np.all(linear[1:] > linear[:-1])):
        return coords, data
    for axis in reversed(range(rank)):
        counts = np.bincount(coords[axis], minlength=shape[axis])
        coords, data = sort_by_key(coords[axis], counts, coords, data)
    return coords, data


#: Chunks of ``data`` :meth:`StoreReader.totals` decodes at a time (2 Mi values at 128 KB chunks).
TOTALS_BATCH = 64


def _accumulator(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The 64-bit type sums of ``dtype`` accumulate in."""
    kinds = {"f": np.float64, "c": np.complex128, "u": np.uint64}
    return np.dtype(kinds.get(dtype.kind, np.int64))


class StoreReader:
    """A store's description and lazily opened arrays; pickles as a location, never a handle."""

    def __init__(
        self,
        store: StoreLike,
        *,
        storage_options: dict[str, Any] | None = None,
        description: StoreDescription | None = None,
        axis: int | None = None,
        format: str = "coo",
    ) -> None:
        if format not in ("coo", "gcxs"):
            raise SporadikError(f"format={format!r}; choose 'coo' or 'gcxs'.")
        if isinstance(store, os.PathLike):
            store = os.fspath(store)
        self.store = store
        self.storage_options = storage_options
        #: The layout ``[]`` reads through; ``None`` routes each selection to the cheapest.
        self.axis = axis
        #: What ``[]`` returns: ``sparse.COO``, or ``sparse.GCXS`` compressed along ``axis``.
        self.format = format
        self._opened: dict[str, zarr.Array[Any]] | None = None
        if description is None:
            description, opened = run(self._describe())
            self.adopt(opened)
        self.description = description

    async def _describe(self) -> tuple[StoreDescription, dict[str, Any]]:
        """The description, and the arrays describing opened, kept so that no document is
        fetched twice (on an object store, each is a round trip)."""
        root = await open_group_async(self.store, mode="r", storage_options=self.storage_options)
        opened: dict[str, Any] = {}
        description = await describe_group_async(root, location_of(self.store), opened)
        return description, opened

    def adopt(self, opened: dict[str, Any]) -> None:
        """Use arrays a description already opened (async arrays by path), fetching nothing."""
        self._opened = {path: zarr.Array(array) for path, array in opened.items()}

    def __getstate__(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "storage_options": self.storage_options,
            "description": self.description,
            "axis": self.axis,
            "format": self.format,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["store"],
            storage_options=state["storage_options"],
            description=state["description"],
            axis=state["axis"],
            format=state["format"],
        )

    def __dask_tokenize__(self) -> Any:
        return (type(self).__name__, self.location, repr(self.description), self.axis, self.format)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The values' dtype."""
        return self.description.dtype

    @property
    def ndim(self) -> int:
        """The array's rank."""
        return len(self.shape)

    def __getitem__(self, key: Any) -> Any:
        """``key`` in :attr:`format`, so dask's own getter can read blocks (and fuse slices)."""
        if self.format == "gcxs" and self.axis is not None:
            return self.read_compressed(key, axis=self.axis)
        return self.read(key, axis=self.axis)

    def read_compressed(self, key: Any, *, axis: int) -> Any:
        """``key`` as a ``sparse.GCXS`` compressed along ``axis``.

        A contiguous range of positions along ``axis``, whole along every other axis of a layout
        raveled in ascending order, is the layout's own arrays (``indptr`` rebased): no
        coordinate is built and nothing is sorted, so reductions along the runs are cheap.
        Anything else is read as ``sparse.COO`` and converted.
        """
        import sparse

        layout = self.description.layouts[axis]
        selections, dropped = normalize_key(key, self.shape)
        positions = selections[axis]
        whole = all(
            np.array_equal(selections[a], np.arange(self.shape[a])) for a in layout.index_order
        )
        ranged = positions.size > 0 and np.array_equal(
            positions, np.arange(positions[0], positions[0] + positions.size)
        )
        if (
            whole
            and ranged
            and not dropped
            and list(layout.index_order) == sorted(layout.index_order)
        ):
            ((lo, hi),) = self.brackets([(layout, positions)])
            indices, data = self.runs(layout, lo, hi)
            indptr = np.concatenate(([0], np.cumsum(hi - lo)))
            shape = tuple(len(selected) for selected in selections)
            return sparse.GCXS((data, indices, indptr), shape=shape, compressed_axes=(axis,))
        result = self.read(key, axis=axis)
        if result.ndim == 0:
            return result
        return result.asformat("gcxs", compressed_axes=(min(axis, result.ndim - 1),))

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape."""
        return self.description.shape

    @property
    def location(self) -> str:
        """Where the store is, for messages."""
        return location_of(self.store)

    def _arrays(self, layout: LayoutDescription) -> dict[str, zarr.Array[Any]]:
        """The layout's arrays, opened once (metadata documents only) and kept until pickled."""
        if self._opened is None:
            self._opened = run(self._open())
        return {
            name: self._opened[f"{layout.path}/{name}"]
            for name in (*ARRAY_NAMES, MAXIMA)
            if f"{layout.path}/{name}" in self._opened
        }

    async def _open(self) -> dict[str, zarr.Array[Any]]:
        root = await open_group_async(self.store, mode="r", storage_options=self.storage_options)
        paths = [
            f"{layout.path}/{name}"
            for layout in self.description.layouts.values()
            for name in (*ARRAY_NAMES, MAXIMA)
            if name != MAXIMA or layout.has_maxima
        ]
        opened = await asyncio.gather(*(root.getitem(path) for path in paths))
        return {path: zarr.Array(array) for path, array in zip(paths, opened, strict=True)}  # type: ignore[arg-type]

    def brackets(
        self, requests: list[tuple[LayoutDescription, npt.NDArray[np.int64]]]
    ) -> list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]:
        """Wave one: where each position's run starts and stops, for one or more layouts at once.

        Only the ``indptr`` chunks holding the positions are read, in one batch.
        """
        fetches = []
        for layout, positions in requests:
            chunk = layout.chunks["indptr"]
            ids = _unique(np.concatenate([positions // chunk, (positions + 1) // chunk]))
            fetches.append((self._arrays(layout)["indptr"], ids))
        chunks = read_chunks(fetches)
        found = []
        for (layout, positions), (_, ids), decoded in zip(requests, fetches, chunks, strict=True):
            chunk = layout.chunks["indptr"]
            lo = _elements(decoded, ids, chunk, positions).astype(np.int64)
            hi = _elements(decoded, ids, chunk, positions + 1).astype(np.int64)
            if lo.size and (lo.min() < 0 or hi.max() > layout.nnz or np.any(hi < lo)):
                raise LayoutError(
                    f"Layout {layout.path!r} in {self.location}: indptr names runs outside its "
                    f"{layout.nnz} values or running backwards; the layout is corrupt, and "
                    "reading on would return values of other cells. Rewrite it (sporadik-dask "
                    "validate names the fault)."
                )
            found.append((lo, hi))
        return found

    def runs(
        self, layout: LayoutDescription, lo: npt.NDArray[np.int64], hi: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
        """Wave two: the indices and values of every run, concatenated in the order asked.

        Every zarr chunk the runs touch is fetched once, both arrays in one batch.
        """
        arrays = self._arrays(layout)
        counts = hi - lo
        total = int(counts.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=layout.dtype)
        live = counts > 0
        fetches = []
        for name in ("indices", "data"):
            chunk = layout.chunks[name]
            ids = _chunks_touched(lo[live] // chunk, (hi[live] - 1) // chunk)
            fetches.append((arrays[name], ids))
        contiguous = bool(np.all(lo[1:] == hi[:-1]))
        within = (
            None
            if contiguous
            else np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        )
        taken = []
        for (array, ids), decoded in zip(fetches, read_chunks(fetches), strict=True):
            chunk = int(array.chunks[0])
            table = np.concatenate(decoded)
            if within is None:  # one range of elements over consecutive chunks: a slice, no gather
                first = int(lo[0]) - int(ids[0]) * chunk
                taken.append(table[first : first + total])
                continue
            # A run's chunks are consecutive in ``ids`` (every chunk it touches was fetched), so
            # each run is one contiguous stretch of ``table``: locate runs, not values.
            start = np.searchsorted(ids, lo // chunk) * chunk + lo % chunk
            taken.append(table[np.repeat(start, counts) + within])
        indices = taken[0].astype(np.int64, copy=False)
        check_indices(indices, layout.extent, f"Layout {layout.path!r} in {self.location}")
        return indices, taken[1]

    def choose(self, selections: Selection) -> LayoutDescription:
        """The present layout reading the fewest values for ``selections``, counted from indptr."""
        return self._choose([_unique(selected) for selected in selections])

    def _choose(self, unique: Selection) -> LayoutDescription:
        """:meth:`choose`, given each axis's sorted distinct positions."""
        layouts = self.description.layouts
        candidates = [axis for axis in layouts if unique[axis].size < self.shape[axis]]
        if len(candidates) <= 1:
            chosen = candidates[0] if candidates else min(layouts)
            self._warn_if_scan(unique, chosen)
            return layouts[chosen]
        brackets = self.brackets([(layouts[axis], unique[axis]) for axis in candidates])
        read = {
            axis: int((hi - lo).sum()) for axis, (lo, hi) in zip(candidates, brackets, strict=True)
        }
        return layouts[min(read, key=lambda axis: (read[axis], axis))]

    def _warn_if_scan(self, unique: Selection, chosen: int) -> None:
        if unique[chosen].size < self.shape[chosen]:
            return
        narrow = [
            axis
            for axis, selected in enumerate(unique)
            if selected.size < self.shape[axis] and axis not in self.description.layouts
        ]
        if narrow:
            warnings.warn(
                f"Selecting along axis {narrow[0]} of {self.location} scans every value of layout "
                f"'layouts/axis{chosen}', since the store has no layout making axis {narrow[0]} "
                f"contiguous. sporadik_dask.add_axis(store, {narrow[0]}) writes it once, and then "
                "such selections read only their runs.",
                ScanWarning,
                stacklevel=4,
            )

    def read(self, key: Any, *, axis: int | None = None) -> Any:
        """``key`` of the array as a ``sparse.COO``: two read waves whatever the selection.

        1. Read the runs of the selected positions along the layout's axis (unique, sorted).
        2. Unravel each run's indices over ``index_order``; keep a value only if every other
           axis selects its coordinate, and map it to the output position.
        3. Repeats and caller order along any axis are applied last, by sparse indexing.
        """
        import sparse

        selections, dropped = normalize_key(key, self.shape)
        unique = [_unique(selected) for selected in selections]
        layout = self.description.layouts[axis] if axis is not None else self._choose(unique)
        axis = layout.indexed_axis
        ((lo, hi),) = self.brackets([(layout, unique[axis])])
        indices, data = self.runs(layout, lo, hi)
        out_shape = tuple(len(u) for u in unique)
        coords, data = self._in_c_order(layout, unique, hi - lo, indices, data)
        kept = [a for a in range(len(self.shape)) if a not in dropped]
        if not kept:  # one cell: a scalar, as sparse and numpy give
            return data[0] if data.size else np.zeros((), dtype=self.dtype)[()]
        if dropped:  # a single position each: their coordinates are all 0, C order holds
            coords, out_shape = coords[kept], tuple(out_shape[a] for a in kept)
        result = sparse.COO(coords, data, shape=out_shape, has_duplicates=False, sorted=True)
        for at, other in enumerate(kept):
            if not np.array_equal(selections[other], unique[other]):
                index: list[Any] = [slice(None)] * len(kept)
                index[at] = np.searchsorted(unique[other], selections[other])
                result = result[tuple(index)]
        return result

    def _in_c_order(
        self,
        layout: LayoutDescription,
        unique: Selection,
        lengths: npt.NDArray[np.int64],
        indices: npt.NDArray[np.int64],
        data: npt.NDArray[Any],
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
        """Output coordinates and values of the runs read, in C order; values on positions no
        selection asks for are dropped."""
        axis = layout.indexed_axis
        whole = [chosen.size == size for chosen, size in zip(unique, self.shape, strict=True)]
        if len(self.shape) == 2 and axis == 1 and whole[0]:  # a CSC read: one transpose
            transposed = transpose_runs(indices, lengths, data, self.shape[0])
            if transposed is not None:
                return transposed
        coords = np.empty((len(self.shape), data.size), dtype=np.int64)
        coords[axis] = np.repeat(np.arange(len(unique[axis])), lengths)
        keep: npt.NDArray[np.bool_] | None = None
        raveled = np.unravel_index(indices, layout.index_shape)
        for other, column in zip(layout.index_order, raveled, strict=True):
            chosen = unique[other]
            if whole[other]:
                coords[other] = column
                continue
            spot = np.searchsorted(chosen, column)
            inside = spot < chosen.size
            inside[inside] = chosen[spot[inside]] == column[inside]
            keep = inside if keep is None else keep & inside
            coords[other] = spot
        if keep is not None:
            coords, data = coords[:, keep], data[keep]
        out_shape = tuple(len(u) for u in unique)
        return _c_order(coords, data, out_shape, (axis, *layout.index_order))

    def counts(self, axis: int) -> npt.NDArray[np.int64]:
        """Values per position along ``axis``: ``diff(indptr)``, no value read."""
        layout = self._layout_for(axis)
        layout.check_whole_read(self.location)
        ((lo, hi),) = self.brackets([(layout, np.arange(layout.positions))])
        return hi - lo

    def totals(self, axis: int) -> npt.NDArray[Any]:
        """Sum of the values at each position along ``axis``, over every other axis.

        Read from the layout making ``axis`` contiguous: its ``data`` and ``indptr`` alone (no
        index is read, nothing is sorted), ``TOTALS_BATCH`` chunks at a time, so memory stays
        bounded whatever the store's size. Sums accumulate in 64 bits (float64, int64 or uint64).
        """
        layout = self._layout_for(axis)
        layout.check_whole_read(self.location)
        ((lo, hi),) = self.brackets([(layout, np.arange(layout.positions))])
        totals = np.zeros(layout.positions, dtype=_accumulator(layout.dtype))
        data, chunk = self._arrays(layout)["data"], layout.chunks["data"]
        end = int(hi[-1]) if hi.size else 0  # values past the last run belong to no position
        chunk_count = -(-end // chunk)
        for first in range(0, chunk_count, TOTALS_BATCH):
            ids = np.arange(first, min(first + TOTALS_BATCH, chunk_count), dtype=np.int64)
            (decoded,) = read_chunks([(data, ids)])
            start = first * chunk
            values = np.concatenate(decoded)[: end - start]
            stop = start + values.size
            # the positions whose runs meet [start, stop) (indptr is sorted, so a bisection finds
            # them and each batch costs its own runs, not every position), and each run's part
            first_p = int(np.searchsorted(hi, start, side="right"))
            last_p = int(np.searchsorted(lo, stop, side="left"))
            since = np.clip(lo[first_p:last_p], start, stop) - start
            until = np.clip(hi[first_p:last_p], start, stop) - start
            meet = np.flatnonzero(until > since)
            if meet.size:  # runs are consecutive, so each sum ends where the next begins
                totals[first_p + meet] += np.add.reduceat(values, since[meet], dtype=totals.dtype)
        return totals

    def maxima(self, axis: int) -> npt.NDArray[Any]:
        """Largest absolute value per position along ``axis``, as stored at write time."""
        layout = self._layout_for(axis)
        layout.check_whole_read(self.location)
        if not layout.has_maxima:
            raise LayoutError(
                f"Layout {layout.path!r} in {self.location} carries no maxima (an older writer); "
                "reducing over every value would be needed. Rewrite the layout to add them."
            )
        return np.asarray(self._arrays(layout)[MAXIMA][:])

    def _layout_for(self, axis: int) -> LayoutDescription:
        if axis not in self.description.layouts:
            raise LayoutError(
                f"{self.location} has no layout making axis {axis} contiguous, so its per-position "
                f"statistics are not stored. sporadik_dask.add_axis(store, {axis}) writes it."
            )
        return self.description.layouts[axis]

    def __repr__(self) -> str:
        axes = "+".join(f"axis{a}" for a in self.description.indexed_axes)
        return f"StoreReader({self.location!r}, shape={self.shape}, {axes})"


def from_sporadik(
    store: StoreLike,
    *,
    chunks: Any = "auto",
    axis: int | None = None,
    storage_options: dict[str, Any] | None = None,
    format: str = "coo",
) -> Any:
    """A dask array of ``sparse.COO`` chunks over the store, each task reading only its runs.

    Parameters
    ----------
    store
        A local path, a URL (with ``storage_options``), or a zarr store object.
    chunks
        ``"auto"`` cuts the layout's indexed axis into blocks of about dask's
        ``array.chunk-size`` worth of values (from ``indptr``), whole along the other axes;
        anything else is taken as dask's ``chunks=`` and reads no chunk to build the array.
    axis
        The layout to read from; default the lowest axis the store makes contiguous.
    format
        ``"coo"`` for ``sparse.COO`` chunks, or ``"gcxs"`` for ``sparse.GCXS`` chunks compressed
        along ``axis``: built from the layout's own arrays without sorting, so reductions along
        the layout's runs (``sum`` over the other axes) are several times cheaper.
    """
    import dask.array as da
    import sparse
    from dask.base import tokenize

    reader = StoreReader(store, storage_options=storage_options, format=format)
    layouts = reader.description.layouts
    chosen = min(layouts) if axis is None else int(axis)
    if chosen not in layouts:
        raise LayoutError(
            f"{reader.location} has no layout making axis {chosen} contiguous (it has "
            f"{sorted(layouts)}); reading along it would scan another. Pass one of those, or "
            f"write it with sporadik_dask.add_axis(store, {chosen})."
        )
    layout = layouts[chosen]
    if isinstance(chunks, str) and chunks == "auto":
        chunks = _balanced_chunks(reader, layout)
    reader.axis = chosen
    meta = sparse.COO.from_numpy(np.zeros((0,) * reader.ndim, dtype=reader.dtype))
    if format == "gcxs":
        meta = meta.asformat("gcxs", compressed_axes=(chosen,))
    name = f"from-sporadik-{tokenize(reader, chunks)}"
    return da.from_array(reader, chunks=chunks, meta=meta, asarray=False, name=name)


def _balanced_chunks(reader: StoreReader, layout: LayoutDescription) -> tuple[tuple[int, ...], ...]:
    """Blocks along the indexed axis holding about ``array.chunk-size`` of values each.

    The target is a whole number of zarr chunks of ``data``, so block edges fall within one run
    of a chunk edge and few chunks are read by two tasks.
    """
    import dask
    from dask.utils import parse_bytes

    from sporadik_dask.plan import partition_bounds

    budget = parse_bytes(dask.config.get("array.chunk-size"))
    per_value = layout.dtype.itemsize + 8 * len(reader.shape)
    chunk = layout.chunks["data"]
    target = max(budget // per_value // chunk, 1) * chunk
    indptr = np.concatenate(([0], np.cumsum(reader.counts(layout.indexed_axis))))
    bounds = partition_bounds(indptr, target)
    along = tuple(np.diff(bounds).tolist()) or (0,)
    return tuple(
        along if a == layout.indexed_axis else (size,) for a, size in enumerate(reader.shape)
    )
