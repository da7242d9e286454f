"""The task functions of a write: small, pure, picklable, idempotent functions over arrays.

A *piece* holds the nonzeros of a set of cells no other piece holds; a *part* is one piece's values
bound for one partition of one layout; *runs* are one partition sorted and ready to write. Each is
a named tuple, so a task reads ``part.pairs`` rather than an index into a tuple. Arrays are named
by :class:`ArrayRef` (store, path, metadata digest) and opened inside the task, never carried open.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import zarr
from zarr.storage import StorePath

from sporadik_dask.format.errors import FetchError, LayoutError, SporadikError
from sporadik_dask.format.spec import MAXIMA, check_indices, magnitudes, maxima_dtype
from sporadik_dask.kernels.compiled import LACKS_DTYPE
from sporadik_dask.kernels.sort import (
    check_runs,
    count_positions,
    deal_positions,
    sort_by_key,
    split_by_bounds,
)
from sporadik_dask.planning.budgets import DENSE_POSITIONS
from sporadik_dask.planning.plan import PositionCounts
from sporadik_dask.store.chunks import write_chunks, write_constant
from sporadik_dask.store.storage import root_document
from sporadik_dask.write.spill import PartReader, SpilledPart, SpillTo, write_parts

#: Dtype of the counts a table without a value column gets: one per row, summed per cell.
COUNT_DTYPE = np.dtype(np.int32)
#: Arrays one process keeps open: a write touches at most 4 per layout.
OPEN_ARRAYS = 64

__all__ = [
    "ArrayRef",
    "Counted",
    "Edges",
    "Merged",
    "OwnRegion",
    "Part",
    "Piece",
    "Runs",
    "Tally",
    "add_counts",
    "after",
    "checked_columns",
    "count_piece",
    "edge",
    "frame_names",
    "frame_piece",
    "merge_pieces",
    "piece_of_block",
    "piece_of_layout",
    "runs_constant",
    "runs_slice",
    "sort_partition",
    "split_by_cell",
    "split_piece",
    "tally",
    "unite_names",
    "unite_names_of",
    "write_array",
    "write_partition",
    "write_region",
    "wrote",
]


class Piece(NamedTuple):
    """Nonzeros of cells no other piece holds."""

    #: Global coordinates, shape ``(rank, n)``.
    coords: npt.NDArray[np.int64]
    #: The value at each coordinate.
    data: npt.NDArray[Any]


class Part(NamedTuple):
    """One piece's values bound for one partition of one layout."""

    #: Each value's position along the indexed axis (row 0) and raveled index (row 1).
    pairs: npt.NDArray[Any]
    data: npt.NDArray[Any]


class Runs(NamedTuple):
    """One partition's values sorted by (position, index): the slices of a layout's arrays."""

    indices: npt.NDArray[Any]
    data: npt.NDArray[Any]
    #: Each position's largest absolute value.
    maxima: npt.NDArray[Any]
    #: Where each position's run starts in the layout, and where the partition's last run ends.
    indptr: npt.NDArray[Any]
    #: None when ``maxima`` and ``indptr`` cover every position of the partition; else the
    #: positions (from the partition's first) they are for, one each, and ``indptr`` one more
    #: (see :func:`runs_slice`).
    held: npt.NDArray[np.int64] | None = None


class Counted(NamedTuple):
    """Values per position along each counted axis, over one piece or a run of pieces."""

    #: One count per counted axis: the positions holding values and how many each holds.
    counts: tuple[PositionCounts, ...]
    #: ``spans[i, k]`` is the first and last position piece ``i`` holds along counted axis ``k``
    #: (``(length, -1)`` for an empty piece), shape ``(pieces, axes, 2)``.
    spans: npt.NDArray[np.int64]


class Tally(NamedTuple):
    """What the count pass finds: values per position along each counted axis, and repeats."""

    #: One count per counted axis, in the order the axes were given.
    counts: tuple[PositionCounts, ...]
    #: How many values named a cell another value already named (merged coordinate columns).
    repeats: int
    #: The positions each piece spans along each counted axis, as :attr:`Counted.spans`: a
    #: partition gathers parts from the pieces whose span meets it, and no others.
    spans: npt.NDArray[np.int64]


class Merged(NamedTuple):
    """A piece merged from pieces that may name a cell twice, and how many repeats it added."""

    piece: Piece
    repeats: int


@dataclass(frozen=True, slots=True)
class ArrayRef:
    """A zarr array named by its store and path: what a task holds instead of an open array.

    A task opens the array itself (once per process, see :meth:`open`), so a graph pickles no
    open handle and a retried task opens the same array. ``location`` and ``metadata`` make two
    references equal only when they name the same array with the same chunking, dtype and codecs,
    which is also what a write's token needs from its target.
    """

    #: The zarr store object; not compared, as stores are not hashable: ``location`` names it.
    store: Any = field(compare=False)
    #: ``str(store)``: its URL, or a ``memory://`` address unique to one in-memory store.
    location: str
    #: Path of the array inside the store.
    path: str
    #: SHA-1 of the array's ``zarr.json`` as it was when the reference was made.
    metadata: str
    #: For an array a write puts in place: the path of its store's root group and the root
    #: attributes (a JSON object) that say the store is still the one the write is for: the
    #: write's token until it commits, or the block and write ``add_axis`` extends (see
    #: :meth:`check_still_laid_out`).
    owner: tuple[str, str] | None = None

    @classmethod
    def of(cls, array: zarr.Array[Any]) -> ArrayRef:
        """A reference to an open array, as it stands now."""
        return cls.at(array.store, array.path, array, None)

    @classmethod
    def at(
        cls,
        store: Any,
        path: str,
        array: zarr.Array[Any],
        owner: tuple[str, Mapping[str, Any]] | None,
    ) -> ArrayRef:
        """A reference to the array at ``path`` in ``store`` that ``array``'s ``zarr.json``
        (made elsewhere, e.g. in memory) describes there, written only while the root group
        ``owner`` names holds its attributes (``(root, attributes)``)."""
        named = None if owner is None else (owner[0], json.dumps(owner[1], sort_keys=True))
        return cls(store, str(store), path, _digest(array), named)

    def check_still_laid_out(self) -> None:
        """Refuse to write when the root no longer names the write this array belongs to.

        A write cancelled on a cluster (``client.cancel``, a failed ``wait``, a closed client)
        leaves its running tasks running, and the same location may meanwhile be overwritten and
        committed by another write of the same documents: a chunk written then would land in
        that store, or stand where it writes no chunk (one of zeros), and read as its value.
        One small read of the root's document per region written.
        """
        if self.owner is None:
            return
        from sporadik_dask.store.storage import run

        root, owned = self.owner
        attributes = (run(root_document(StorePath(self.store, root))) or {}).get("attributes")
        if not isinstance(attributes, dict) or any(
            attributes.get(key) != value for key, value in json.loads(owned).items()
        ):
            raise SporadikError(
                f"{self.location}: the write this task belongs to no longer owns the store (its "
                "root is gone, or names another write or a finished store); its chunks would "
                "land in that store, or make a removed one again. Nothing was written by this "
                "task; the write it belongs to was cancelled or replaced."
            )

    def open(self) -> zarr.Array[Any]:
        """The array, opened in this process once and kept, refused if it changed since."""
        return _open(self)

    def __dask_tokenize__(self) -> tuple[str, str, str]:
        return (self.location, self.path, self.metadata)


def _digest(array: zarr.Array[Any]) -> str:
    from sporadik_dask.store.zarr_adapter import metadata_document

    return hashlib.sha1(metadata_document(array)).hexdigest()


@functools.lru_cache(maxsize=OPEN_ARRAYS)
def _open(ref: ArrayRef) -> zarr.Array[Any]:
    array = zarr.open_array(store=ref.store, path=ref.path, mode="r+", zarr_format=3)
    if _digest(array) != ref.metadata:
        raise SporadikError(
            f"The array {ref.path!r} in {ref.location} changed after this write was planned (its "
            "zarr.json differs); writing into it would mix two layouts' chunks. Build the write "
            "again, and give each pending write its own store."
        )
    return array


def piece_of_block(block: Any, offsets: Sequence[int]) -> Piece:
    """The nonzeros of one dask block (``sparse``, ``scipy.sparse`` or numpy), placed by offset.

    A scipy block is read through its own index arrays, never densified: a CSR or CSC block's
    ``indices`` become one coordinate row as they are, and its ``indptr`` is expanded into the
    other.
    """
    import scipy.sparse
    import sparse

    if isinstance(block, sparse.SparseArray):
        fill = np.asarray(block.fill_value).item()
        if fill != 0:
            raise LayoutError(
                f"A sparse block has fill_value {fill!r}; the format stores values "
                "that differ from zero, so every unstored cell would silently become 0. Convert "
                "with x - fill_value, or densify, first."
            )
        coo = block if isinstance(block, sparse.COO) else block.asformat("coo")
        coords, data = np.asarray(coo.coords, dtype=np.int64), np.asarray(coo.data)
    elif scipy.sparse.issparse(block):
        coords, data = _scipy_coords(block)
    else:
        dense = np.asarray(block)
        found = np.nonzero(dense)
        coords = np.array(found, dtype=np.int64).reshape(dense.ndim, -1)
        data = dense[found]
    if any(offsets):
        coords = coords + np.asarray(offsets, dtype=np.int64)[:, None]
    return Piece(coords, data)


def _scipy_coords(matrix: Any) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    """Coordinates and values of a scipy sparse matrix or array, each cell once.

    1. A format other than CSR, CSC or COO is converted to CSR (scipy's compiled conversion).
    2. A matrix with repeated cells or unsorted indices is summed and sorted on a copy, as scipy
       itself would on any arithmetic: the caller's chunk is never changed.
    3. CSR gives rows from ``indptr`` and columns from ``indices``; CSC the other way round; COO
       its own ``row`` and ``col``. Stored zeros stay, as they do for an in-memory scipy input.
    """
    if matrix.format not in ("csr", "csc", "coo"):
        matrix = matrix.tocsr()
    if not matrix.has_canonical_format:
        matrix = matrix.copy()
        matrix.sum_duplicates()
    coords = np.empty((2, matrix.nnz), dtype=np.int64)
    if matrix.format == "coo":
        coords[0], coords[1] = matrix.row, matrix.col
    else:
        compressed, other = (0, 1) if matrix.format == "csr" else (1, 0)
        runs = np.diff(matrix.indptr)
        coords[compressed] = np.repeat(np.arange(runs.shape[0], dtype=np.int64), runs)
        coords[other] = matrix.indices
    return coords, np.asarray(matrix.data)


def checked_columns(
    shape: Sequence[int], data: npt.NDArray[Any], *columns: npt.NDArray[Any]
) -> Piece:
    """A piece from one chunk of parallel coordinate columns, refusing a cell outside ``shape``."""
    coords = np.stack([np.asarray(c, dtype=np.int64) for c in columns])
    for axis, size in enumerate(shape):
        column = coords[axis]
        if column.size and (int(column.min()) < 0 or int(column.max()) >= size):
            bad = int(column.min()) if int(column.min()) < 0 else int(column.max())
            raise LayoutError(
                f"A coordinate along axis {axis} is {bad}, outside an axis of length {size}; it "
                "would be counted at a position that does not exist and shift every run after "
                "it. Fix the coordinates, or pass the shape they were made for."
            )
    return Piece(coords, np.asarray(data))


def piece_of_layout(
    indices: ArrayRef,
    data: ArrayRef,
    indptr: npt.NDArray[np.int64],
    start: int,
    indexed_axis: int,
    index_order: Sequence[int],
    shape: Sequence[int],
) -> Piece:
    """The values of positions ``start:start + len(indptr) - 1`` of a stored layout, as a piece.

    Every index is checked against the raveled extent as it is read, so a corrupt layout is
    refused rather than copied into a new one.
    """
    lo, hi = int(indptr[0]), int(indptr[-1])
    raveled = _elements(indices, lo, hi).astype(np.int64, copy=False)
    index_shape = tuple(int(shape[axis]) for axis in index_order)
    check_indices(raveled, math.prod(index_shape), f"indices {lo}:{hi} of {indices.path}")
    coords = np.empty((len(shape), hi - lo), dtype=np.int64)
    coords[indexed_axis] = np.repeat(np.arange(start, start + len(indptr) - 1), np.diff(indptr))
    for axis, column in zip(index_order, np.unravel_index(raveled, index_shape), strict=True):
        coords[axis] = column
    return Piece(coords, _elements(data, lo, hi))


def _elements(array: ArrayRef, lo: int, hi: int) -> npt.NDArray[Any]:
    """Elements ``lo:hi`` of a stored array; one that cannot be fetched raises
    :class:`~sporadik_dask.format.errors.FetchError`, as a read does, on threads and workers
    alike."""
    try:
        return np.asarray(array.open()[lo:hi])
    except OSError as failed:
        if isinstance(failed, SporadikError):
            raise
        raise FetchError(
            f"Could not fetch elements {lo}:{hi} of {array.location}/{array.path} "
            f"({type(failed).__name__}: {failed}); nothing is built from values that could not "
            "be read. Retry, or raise the store's retry settings (storage_options)."
        ) from failed


def frame_names(frame: Any, columns: Sequence[str]) -> dict[str, Any]:
    """Each of ``columns``' distinct names in one partition of a DataFrame, as Arrow strings.

    Read as Arrow, a column of pandas' Arrow strings or a categorical's codes makes no Python
    string per row; missing names are left out (they name no position).
    """
    return {name: unite_names_of([_arrow_names(frame[name])]) for name in columns}


def unite_names(*found: Mapping[str, Any]) -> dict[str, Any]:
    """The sorted distinct names of several :func:`frame_names` results, column by column."""
    return {name: unite_names_of([names[name] for names in found]) for name in found[0]}


def unite_names_of(arrays: Sequence[Any]) -> Any:
    """The sorted distinct names of several Arrow arrays of names, as one Arrow array, sorted by
    UTF-8 bytes, which is numpy's order of ``str`` by code point."""
    import pyarrow as pa
    import pyarrow.compute as pc

    unique = pa.chunked_array([a.cast(pa.string()) for a in arrays], pa.string()).unique()
    unique = unique.drop_null()
    return unique.take(pc.array_sort_indices(unique))


def _arrow_names(column: Any) -> Any:
    """A column of names as Arrow strings: a categorical's used categories, else every row."""
    import pandas as pd
    import pyarrow as pa

    if isinstance(column.dtype, pd.CategoricalDtype):
        column = column.cat.remove_unused_categories().cat.categories.to_series()
    names = pa.array(column, from_pandas=True)
    return names.cast(pa.string())


def _label_positions(column: Any, labels: Any) -> npt.NDArray[np.int64]:
    """Each row's position among an axis's sorted ``labels`` (Arrow strings), -1 where its name
    is missing or not among them; hashed by Arrow, once per categorical's category."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    def look_up(names: Any) -> npt.NDArray[np.int64]:
        found = pc.index_in(pa.array(names, from_pandas=True).cast(pa.string()), labels)
        return np.asarray(found.fill_null(-1).to_numpy(), dtype=np.int64)

    if isinstance(column.dtype, pd.CategoricalDtype):
        categories = look_up(column.cat.categories.to_series())
        found: npt.NDArray[np.int64] = np.append(categories, -1)[column.cat.codes.to_numpy()]
        return found
    return look_up(column)


def frame_piece(
    frame: Any,
    shape: Sequence[int],
    columns: Sequence[str],
    values: str | None,
    labels: Mapping[str, Any],
) -> Piece:
    """A piece from one partition of a DataFrame of coordinate columns and a value column.

    A labelled column holds names, turned here into positions among its sorted ``labels``;
    without a value column each row counts one.
    """
    coords = []
    for name in columns:
        column = frame[name]
        if name in labels:
            codes = _label_positions(column, labels[name])
            if codes.size and codes.min() < 0:
                raise LayoutError(
                    f"Column {name!r} holds a missing or unknown label; it names no position. "
                    f"Drop those rows first (frame.dropna(subset=[{name!r}]))."
                )
            coords.append(codes)
        else:
            coords.append(column.to_numpy())
    data = np.ones(len(frame), dtype=COUNT_DTYPE) if values is None else frame[values].to_numpy()
    return checked_columns(shape, data, *coords)


def count_piece(piece: Piece, extents: Sequence[tuple[int, int]]) -> Counted:
    """Values per position along each ``(axis, length)``, and the positions the piece spans."""
    spans = np.empty((1, len(extents), 2), dtype=np.int64)
    for k, (axis, length) in enumerate(extents):
        column = piece.coords[axis]
        spans[0, k] = (column.min(), column.max()) if column.size else (length, -1)
    counts = tuple(_counted(piece.coords[axis], length) for axis, length in extents)
    return Counted(counts, spans)


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
    """Counts added together, axis by axis; spans joined in piece order."""
    columns = zip(*(c.counts for c in counted), strict=True)
    counts = tuple(_added(column) for column in columns)
    return Counted(counts, np.concatenate([c.spans for c in counted]))


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
    order = np.argsort(positions, kind="stable")
    positions, values = positions[order], values[order]
    starts = np.flatnonzero(np.concatenate(([True], positions[1:] != positions[:-1])))
    starts = starts[: positions.size]
    return PositionCounts(positions[starts], np.add.reduceat(values, starts), length)


def tally(counted: Counted, repeats: int) -> Tally:
    """The count pass's result."""
    return Tally(counted.counts, repeats, counted.spans)


def split_piece(
    piece: Piece,
    axis: int,
    index_order: Sequence[int],
    index_shape: Sequence[int],
    bounds: npt.NDArray[np.int64],
    index_dtype: npt.DTypeLike,
    spill_to: SpillTo | None = None,
) -> list[Part] | list[SpilledPart]:
    """Split one piece's values by the partition their position along ``axis`` falls in.

    Positions and indices are narrowed to the layout's index width here, so every later copy
    moves half the bytes of int64 when the layout is int32. With ``spill_to``, the parts go to
    one file in its directory for where the task runs (if it has one), and what is returned
    says where.
    """
    coords, data = piece
    width = np.dtype(index_dtype) if int(bounds[-1]) < 2**31 else np.dtype(np.int64)
    width = np.result_type(index_dtype, width)
    positions = coords[axis]
    indices = (
        coords[index_order[0]]
        if len(index_order) == 1
        else _ravel(coords, index_order, index_shape)
    )
    split = split_by_bounds(positions, indices, data, bounds, width)
    if split is None:  # a dtype numba lacks: the same order from numpy
        pairs = np.empty((2, data.shape[0]), dtype=width)
        pairs[0], pairs[1] = positions, indices
        which = np.searchsorted(bounds, pairs[0], side="right") - 1
        counts = np.bincount(which, minlength=len(bounds) - 1)
        pairs, data = sort_by_key(which, counts, pairs, data)
    else:
        pairs, data, counts = split
    edges = np.concatenate(([0], np.cumsum(counts))).tolist()
    directory = None if spill_to is None else spill_to.here()
    if directory is not None:
        return write_parts(directory, pairs, data, edges)
    return [Part(pairs[:, lo:hi], data[lo:hi]) for lo, hi in itertools.pairwise(edges)]


def _ravel(
    coords: npt.NDArray[np.int64], order: Sequence[int], shape: Sequence[int]
) -> npt.NDArray[np.int64]:
    """Raveled index over the axes ``order`` of ``coords``, C order over ``shape``."""
    raveled = np.zeros(coords.shape[1], dtype=np.int64)
    for axis, size in zip(order, shape, strict=True):
        raveled *= size
        raveled += coords[axis]
    return raveled


def sort_partition(
    start: int,
    stop: int,
    extent: int,
    index_dtype: npt.DTypeLike,
    values: tuple[int, int],
    *parts: Part | SpilledPart,
) -> Runs:
    """One partition's runs: its values sorted by (position, index), their maxima and offsets.

    ``values`` is where the plan put the partition's values in the layout, ``(first, last)``;
    the partition's slice of ``indptr`` is made here from its own counts, so the client never
    sends ``indptr`` (4 bytes a position) in the graph.

    1. Refuse a partition holding other than the planned number of values: the count pass read
       another input than this pass, and every later offset would be wrong.
    2. Count the values at each position, part after part, then counting-sort each part's
       values straight into their runs: O(n), and stable, so pieces that arrive in C order
       leave each run already sorted by index. Nothing but the runs is made as large as the
       partition; a spilled part is read into one buffer that every part reuses.
    3. Only if some run is not sorted, sort by the combined key ``position * extent + index``.
    4. Refuse a cell named twice: the counts that fixed ``indptr`` assumed every cell once.
    5. Take each position's largest absolute value and offset.

    A partition spanning more positions than it holds values and than
    :data:`~sporadik_dask.planning.budgets.DENSE_POSITIONS` (a stretch of a genome) counts only
    the positions holding values (:func:`_sort_held`).
    """
    first, last = values
    reader = PartReader(parts)
    if reader.total != last - first:
        raise LayoutError(
            f"Positions {start}..{stop - 1} hold {reader.total} values, and the count pass "
            f"found {last - first}: the input gave other values the second time it was read, "
            "so the offsets written would point into the wrong runs. Make the input "
            "deterministic (seed its generator, or persist it) and write again."
        )
    if stop - start > max(reader.total, DENSE_POSITIONS):
        return _sort_held(start, stop, extent, index_dtype, values, reader, parts)
    counts = np.zeros(stop - start, dtype=np.int64)
    for part in parts:
        if count_positions(counts, reader.positions(part), start):
            raise _outside(start, stop)
    indices = np.empty(reader.total, dtype=reader.index_dtype)
    data = np.empty(reader.total, dtype=reader.data_dtype)
    offsets = np.cumsum(counts) - counts
    maxima = np.zeros(stop - start, dtype=maxima_dtype(reader.data_dtype))
    try:
        for part in parts:
            pairs, part_data = reader.whole(part)
            deal_positions(offsets, pairs[0], pairs[1], part_data, start, indices, data)
        unsorted, repeated = check_runs(counts, indices, data, maxima)
        if unsorted:
            indices, data = _sorted_within_runs(counts, extent, indices, data)
            unsorted, repeated = check_runs(counts, indices, data, maxima)
    except LACKS_DTYPE:
        indices, data, repeated = _sorted_by_numpy(reader, parts, start, counts, extent, maxima)
    if repeated:
        raise LayoutError(
            f"{repeated} cells are named twice among positions {start}..{stop - 1}, "
            "though the input said each cell is named once (a sparse.COO built with "
            "has_duplicates=False?). A reader would return one of the values at random. Pass "
            "the input as coordinate columns, which are merged, or fix its construction."
        )
    indptr = np.empty(stop - start + 1, dtype=index_dtype)
    indptr[0] = first
    np.cumsum(counts, out=indptr[1:])
    indptr[1:] += first
    return Runs(indices.astype(index_dtype, copy=False), data, maxima, indptr)


def _outside(start: int, stop: int) -> LayoutError:
    return LayoutError(
        f"A value of positions {start}..{stop - 1} lies outside them: the input gave "
        "other coordinates the second time it was read. Make the input deterministic "
        "(seed its generator, or persist it) and write again."
    )


def _sort_held(
    start: int,
    stop: int,
    extent: int,
    index_dtype: npt.DTypeLike,
    values: tuple[int, int],
    reader: PartReader,
    parts: Sequence[Part | SpilledPart],
) -> Runs:
    """:func:`sort_partition` of a partition spanning many more positions than it holds values.

    1. Join the parts and find the distinct positions holding values (a sort of the positions).
    2. Replace each position by its rank among them, and sort as a partition of those positions
       alone: ``maxima`` and ``indptr`` come out one per held position, not per position.
    3. Return them with the held positions; :func:`runs_slice` makes any stretch of the
       partition's ``maxima`` and ``indptr`` from them, so none is as long as the span.
    """
    pairs, data = reader.joined(parts)
    positions = pairs[0].astype(np.int64) - start
    if positions.size and (int(positions.min()) < 0 or int(positions.max()) >= stop - start):
        raise _outside(start, stop)
    ordered = np.sort(positions)
    held = ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))[: ordered.size]]
    pairs[0] = np.searchsorted(held, positions)
    runs = sort_partition(0, held.shape[0], extent, index_dtype, values, Part(pairs, data))
    return runs._replace(held=held)


def runs_slice(runs: Runs, array: str, lo: int, hi: int) -> npt.NDArray[Any]:
    """Elements ``lo:hi`` of one of a partition's arrays, made from its held positions when
    ``maxima`` and ``indptr`` hold only those: zeros between them for ``maxima``, and for
    ``indptr`` each held position's offset repeated up to the next."""
    found: npt.NDArray[Any] = getattr(runs, array)
    if runs.held is None or array not in (MAXIMA, "indptr"):
        return found[lo:hi]
    held = runs.held
    if array == MAXIMA:
        out = np.zeros(hi - lo, dtype=found.dtype)
        k0, k1 = np.searchsorted(held, (lo, hi), side="left")
        out[held[k0:k1] - lo] = found[k0:k1]
        return out
    if hi <= lo:
        return found[:0]
    # indptr[j] is the offset of the first held position at or after j
    k0, k1 = np.searchsorted(held, (lo, hi - 1), side="left")
    ends = np.append(held[k0:k1] - lo + 1, hi - lo)
    return np.repeat(found[k0 : k1 + 1], np.diff(ends, prepend=0))


def runs_constant(runs: Runs, array: str, lo: int, hi: int) -> Any:
    """The one value elements ``lo:hi`` of a partition's ``maxima`` or ``indptr`` all hold, when
    no position holding values lies among them (a genome's empty stretch); else None."""
    held = runs.held
    if held is None or array not in (MAXIMA, "indptr") or hi <= lo:
        return None
    found: npt.NDArray[Any] = getattr(runs, array)
    last = hi if array == MAXIMA else hi - 1  # indptr[j] is the run of the first held at or past j
    k0, k1 = np.searchsorted(held, (lo, last), side="left")
    if k0 != k1:
        return None
    return found.dtype.type(0) if array == MAXIMA else found[k0]


def _sorted_by_numpy(
    reader: PartReader,
    parts: Sequence[Part | SpilledPart],
    start: int,
    counts: npt.NDArray[np.int64],
    extent: int,
    maxima: npt.NDArray[Any],
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], int]:
    """The partition's runs sorted with numpy, for a dtype numba lacks: its indices and
    values, each run's largest absolute value put in ``maxima``, and how many cells repeat."""
    pairs, data = reader.joined(parts)
    pairs[0] -= start
    pairs, data = sort_by_key(pairs[0], counts, pairs, data)
    positions, indices = pairs
    same_run = positions[1:] == positions[:-1]
    if np.any(same_run & (indices[1:] < indices[:-1])):
        indices, data = _sorted_within_runs(counts, extent, indices, data)
    repeated = int(np.count_nonzero(same_run & (indices[1:] == indices[:-1])))
    # reduceat over the non-empty runs alone: their starts strictly increase, so each reduces
    # exactly its own run (an empty run's start, clipped, would cut its neighbour short)
    starts = (np.cumsum(counts) - counts)[counts > 0]
    if data.size:
        maxima[counts > 0] = np.maximum.reduceat(magnitudes(np.abs(data)), starts)
    return indices, data, repeated


def _sorted_within_runs(
    counts: npt.NDArray[np.int64], extent: int, indices: npt.NDArray[Any], data: npt.NDArray[Any]
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Each run sorted by index (the runs already in position order): the long way."""
    positions = np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts)
    if counts.shape[0] * extent < 2**62:
        order = np.argsort(positions * extent + indices, kind="stable")
    else:  # pragma: no cover - a combined key past int64: rank-4 arrays of ~10^19 cells
        order = np.lexsort((indices, positions))
    return indices[order], data[order]


#: A partition's slices that regions shared with its neighbours need, by ``(array, lo, hi)``.
Edges = dict[tuple[str, int, int], npt.NDArray[Any]]

#: A region a partition fills alone: ``(array's ref, start, stop, array, lo, hi)``, elements
#: ``lo:hi`` of the partition's ``array`` written as the array's ``[start, stop)``.
OwnRegion = tuple[ArrayRef, int, int, str, int, int]


def write_partition(
    own: Sequence[OwnRegion],
    edges: Sequence[tuple[str, int, int]],
    start: int,
    stop: int,
    extent: int,
    index_dtype: npt.DTypeLike,
    values: tuple[int, int],
    *parts: Part | SpilledPart,
) -> Edges:
    """Sort one partition (:func:`sort_partition`), write the regions it fills alone, and return
    copies of the slices the regions it shares with its neighbours need.

    Writing in the task that sorts means no partition's runs outlive their sort. Given the runs
    as a task's result, dask's order (threads and distributed alike) ran every sort of a layout
    before any of its writes, since the one chunk of ``maxima`` and of ``indptr`` that spans
    every partition made the sorts one path: a layout's whole values waited in memory, 8 bytes a
    value for float32 with int32 indices, and on a cluster were pickled to the worker writing
    them.
    """
    runs = sort_partition(start, stop, extent, index_dtype, values, *parts)
    kept = {(array, lo, hi): runs_slice(runs, array, lo, hi).copy() for array, lo, hi in edges}
    for ref, first, last, array, lo, hi in own:
        constant = runs_constant(runs, array, lo, hi)
        if constant is None:
            write_region(ref, first, last, runs_slice(runs, array, lo, hi))
        elif constant:  # a region of zeros is the fill value: no object to write
            ref.check_still_laid_out()
            write_constant(ref.open(), first, last, constant)
    return kept


def after(value: Any, done: Any) -> Any:
    """``value``, once ``done`` (another task's result) exists: an order, not a computation."""
    return value


def edge(kept: Edges, array: str, lo: int, hi: int) -> npt.NDArray[Any]:
    """Elements ``lo:hi`` of one partition's ``array``, which a shared region needs."""
    return kept[(array, lo, hi)]


def wrote(kept: Edges) -> None:
    """That a partition's sort and its own regions' writes returned: one small result, so the
    edges are never gathered by whoever waits for the write."""


def write_region(ref: ArrayRef, start: int, stop: int, *slices: npt.NDArray[Any]) -> None:
    """Write whole zarr chunks ``[start, stop)`` from the slices that fill them, in order."""
    values = slices[0] if len(slices) == 1 else np.concatenate(slices)
    if values.shape[0] != stop - start:
        raise LayoutError(  # pragma: no cover - a planning error, never user input
            f"region {start}:{stop} of {ref.path} got {values.shape[0]} values"
        )
    ref.check_still_laid_out()
    write_chunks(ref.open(), start, values)


def write_array(ref: ArrayRef, start: int, values: npt.NDArray[Any]) -> None:
    """Write ``values`` (known on the client, like ``indptr``) at ``start``."""
    ref.check_still_laid_out()
    write_chunks(ref.open(), start, values)


def merge_pieces(shape: Sequence[int], *pieces: Piece) -> Merged:
    """Sort pieces that may name a cell twice into one C-order piece, repeats added together.

    Returns the piece and how many repeats were added, so a caller that refuses repeats can do so
    before anything is written.
    """
    coords = np.concatenate([piece.coords for piece in pieces], axis=1)
    data = np.concatenate([piece.data for piece in pieces])
    keys = _ravel(coords, range(len(shape)), shape)
    order = np.argsort(keys, kind="stable")
    keys, data = keys[order], data[order]
    fresh = np.ones(keys.shape[0], dtype=bool)
    fresh[1:] = keys[1:] != keys[:-1]
    starts = np.flatnonzero(fresh)
    repeats = int(keys.shape[0] - starts.shape[0])
    if repeats:
        data, keys = np.add.reduceat(data, starts), keys[starts]
    coords = np.array(np.unravel_index(keys, tuple(shape)), dtype=np.int64)
    return Merged(Piece(coords, data), repeats)


def split_by_cell(piece: Piece, shape: Sequence[int], partitions: int) -> list[Piece]:
    """Split a piece by a hash of each cell, so every copy of a cell meets in one partition."""
    coords, data = piece
    keys = _ravel(coords, range(len(shape)), shape)
    mixed = (keys.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
    which = (mixed % np.uint64(partitions)).astype(np.int64)
    order = np.argsort(which, kind="stable")
    edges = np.searchsorted(which[order], np.arange(partitions + 1)).tolist()
    coords, data = coords[:, order], data[order]
    return [Piece(coords[:, lo:hi], data[lo:hi]) for lo, hi in itertools.pairwise(edges)]
