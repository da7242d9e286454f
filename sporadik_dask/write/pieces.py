"""Pieces, the nonzeros of cells no other piece holds: made from dask blocks, coordinate columns
or a stored layout, and merged and split by cell where columns may name a cell twice.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sporadik_dask.format.errors import FetchError, LayoutError, SporadikError
from sporadik_dask.format.spec import check_indices
from sporadik_dask.kernels.sort import sort_by_key, stable_order
from sporadik_dask.write.array_refs import ArrayRef

__all__ = [
    "CELL_SAMPLE",
    "Merged",
    "Piece",
    "cell_bounds",
    "cell_sample",
    "checked_columns",
    "merge_pieces",
    "piece_of_block",
    "piece_of_layout",
    "ravel",
    "split_by_cell",
]

#: Cells each piece of coordinate columns gives to place the bounds of the merge's partitions:
#: with as many partitions as pieces, ~1,000 samples a partition put its size within a few %.
CELL_SAMPLE = 1_024


class Piece(NamedTuple):
    """Nonzeros of cells no other piece holds."""

    #: Global coordinates, shape ``(rank, n)``.
    coords: npt.NDArray[np.int64]
    #: The value at each coordinate.
    data: npt.NDArray[Any]


class Merged(NamedTuple):
    """A piece merged from pieces that may name a cell twice, and how many repeats it added."""

    piece: Piece
    repeats: int


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
    except SporadikError:
        raise
    except ValueError:  # what zarr raises reading a store changed under the kept metadata
        array.check_unchanged()
        raise
    except OSError as failed:
        if isinstance(failed, SporadikError):
            raise
        raise FetchError(
            f"Could not fetch elements {lo}:{hi} of {array.location}/{array.path} "
            f"({type(failed).__name__}: {failed}); nothing is built from values that could not "
            "be read. Retry, or raise the store's retry settings (storage_options)."
        ) from failed


def ravel(
    coords: npt.NDArray[np.int64], order: Sequence[int], shape: Sequence[int]
) -> npt.NDArray[np.int64]:
    """Raveled index over the axes ``order`` of ``coords``, C order over ``shape``."""
    raveled = np.zeros(coords.shape[1], dtype=np.int64)
    for axis, size in zip(order, shape, strict=True):
        raveled *= size
        raveled += coords[axis]
    return raveled


def merge_pieces(shape: Sequence[int], *pieces: Piece) -> Merged:
    """Sort pieces that may name a cell twice into one C-order piece, repeats added together.

    Returns the piece and how many repeats were added, so a caller that refuses repeats can do so
    before anything is written.
    """
    coords = np.concatenate([piece.coords for piece in pieces], axis=1)
    data = np.concatenate([piece.data for piece in pieces])
    keys, order = stable_order(ravel(coords, range(len(shape)), shape), math.prod(shape))
    data = data[order]
    fresh = np.ones(keys.shape[0], dtype=bool)
    fresh[1:] = keys[1:] != keys[:-1]
    starts = np.flatnonzero(fresh)
    repeats = int(keys.shape[0] - starts.shape[0])
    if repeats:
        data, keys = np.add.reduceat(data, starts), keys[starts]
    coords = np.array(np.unravel_index(keys, tuple(shape)), dtype=np.int64)
    return Merged(Piece(coords, data), repeats)


def cell_sample(piece: Piece, shape: Sequence[int]) -> npt.NDArray[np.int64]:
    """Raveled cells of every ``n``-th value of a piece, :data:`CELL_SAMPLE` of them at most
    (every cell of a smaller piece), in the piece's order: the same piece gives the same sample."""
    stride = max(-(-piece.data.shape[0] // CELL_SAMPLE), 1)
    return ravel(piece.coords[:, ::stride], range(len(shape)), shape)


def cell_bounds(partitions: int, *samples: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The raveled cells that start partitions ``1..partitions - 1``: quantiles of the pieces'
    samples, so each partition gets about as many values as any other."""
    found: npt.NDArray[np.int64] = np.sort(np.concatenate([np.zeros(0, np.int64), *samples]))
    if not found.size:
        return np.zeros(max(partitions - 1, 0), dtype=np.int64)
    picked: npt.NDArray[np.int64] = found[np.arange(1, partitions) * found.shape[0] // partitions]
    return picked


def split_by_cell(piece: Piece, shape: Sequence[int], bounds: npt.NDArray[np.int64]) -> list[Piece]:
    """Split a piece by ranges of raveled cells (:func:`cell_bounds`): every copy of a cell
    meets in one partition, and partition ``p`` holds only cells before partition ``p + 1``'s.

    Ranges rather than a hash of the cell make the merged pieces C-order stretches of the array,
    as a dask array's row blocks are: each layout's runs then come out of a write's shuffle
    sorted, and a piece spans few positions of the leading axis.
    """
    coords, data = piece
    which = np.searchsorted(bounds, ravel(coords, range(len(shape)), shape), side="right")
    counts = np.bincount(which, minlength=bounds.shape[0] + 1)
    coords, data = sort_by_key(which, counts, coords, data)
    edges = np.concatenate(([0], np.cumsum(counts))).tolist()
    return [Piece(coords[:, lo:hi], data[lo:hi]) for lo, hi in itertools.pairwise(edges)]
