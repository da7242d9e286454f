"""What a write reads from: which inputs are accepted, checked here, and handed to
``piece_graphs``.

Every input becomes :class:`~sporadik_dask.write.piece_graphs.Pieces`, tasks yielding nonzeros of
disjoint sets of cells, which is what lets a count pass give exact ``indptr`` before any value
moves. Dask blocks are disjoint regions, and an in-memory sparse array is canonical, so their
pieces are that already; coordinate columns may name a cell in two chunks, so ``piece_graphs``
merges them by cell. This module decides what an input is and refuses what cannot be written; it
builds no graph itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import dask
import dask.array as da
import numpy as np

from sporadik_dask.format.errors import LayoutError, SporadikError
from sporadik_dask.format.spec import MIN_RANK, check_indptr
from sporadik_dask.planning.plan import partition_bounds
from sporadik_dask.store.describe import LayoutDescription
from sporadik_dask.store.labels import Labels, labels_of
from sporadik_dask.write import array_refs, frame_pieces, piece_graphs, pieces

__all__ = [
    "Labels",
    "Source",
    "check_dtype",
    "frame_shape",
    "refuse_positions_without_lengths",
    "source_of",
    "source_of_layout",
]

#: Values per piece cut from an in-memory array: a few tens of MB of coordinates and values.
PIECE_VALUES = 2**22


@dataclass(frozen=True, slots=True, eq=False)
class Source:
    """An accepted input: its shape and dtype, the tasks yielding its pieces, and its labels."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    pieces: piece_graphs.Pieces
    labels: Labels | None = None


def check_dtype(given: Any) -> np.dtype[Any]:
    try:
        dtype: np.dtype[Any] = np.dtype(given)
    except TypeError:  # pandas' own dtypes (strings, nullable integers) name no numpy dtype
        dtype = np.dtype(object)
    if dtype.kind not in "biufc":
        raise LayoutError(
            f"Values of dtype {given} cannot be stored: the format holds numbers or booleans, and "
            "an object or string dtype would need a codec that runs code on read. Convert the "
            "values to a numeric dtype first."
        )
    return dtype


def _check_shape(shape: Sequence[Any]) -> tuple[int, ...]:
    if len(shape) < MIN_RANK:
        raise LayoutError(
            f"A sparse store holds an array of at least {MIN_RANK} axes, and this has shape "
            f"{tuple(shape)}. Add an axis (x[:, None]) if a vector is what you mean to store."
        )
    if any(not isinstance(size, (int, np.integer)) or size < 0 for size in shape):
        raise LayoutError(
            f"Shape {tuple(shape)} has a size that is not a known non-negative integer; compute "
            "unknown chunk sizes first (x.compute_chunk_sizes())."
        )
    sizes = tuple(int(size) for size in shape)
    if math.prod(sizes) >= 2**63:
        raise LayoutError(
            f"Shape {sizes} has {math.prod(sizes)} cells, past what an int64 can ravel; indices "
            "would wrap around and name the wrong cells. Split the array into stores."
        )
    return sizes


def source_of(
    x: Any,
    *,
    shape: Sequence[int | None] | None = None,
    columns: Sequence[str] | None = None,
    values: str | None = None,
) -> Source:
    """The pieces of any supported input.

    Accepts a dask array (``sparse``, ``scipy.sparse`` or numpy chunks), an xarray DataArray,
    scipy-style coordinate columns ``(data, (row, col, ...))`` with ``shape``, a dask (or
    pandas) DataFrame with ``shape``, ``columns`` and ``values``, a ``scipy.sparse`` matrix or
    array, a ``sparse`` array, or a numpy array.
    """
    import scipy.sparse
    import sparse

    if isinstance(x, Source):
        return x
    if type(x).__module__.startswith("pandas") and hasattr(x, "columns"):
        import dask.dataframe as dd  # a table in memory: in pieces, as a dask one is

        x = dd.from_pandas(x, chunksize=PIECE_VALUES)
    if hasattr(x, "to_delayed") and hasattr(x, "dtypes") and hasattr(x, "columns"):
        if columns is None:
            raise LayoutError(
                "A DataFrame needs columns= (one coordinate column per axis, in axis order) and "
                "usually values= (the value column): nothing else says which column is which."
            )
        return _from_frame(x, shape, tuple(columns), values)

    if type(x).__module__.startswith("xarray") and hasattr(x, "dims"):
        return _from_dataarray(x)
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], (tuple, list)):
        if shape is None:
            raise LayoutError(
                "Coordinate columns need shape=: the largest coordinate does not say how long "
                "each axis is, and a guess would make trailing empty positions disappear."
            )
        return _from_columns(x[0], tuple(x[1]), _check_shape(shape))
    if shape is not None and tuple(shape) != tuple(getattr(x, "shape", shape)):
        raise LayoutError(f"shape={tuple(shape)} disagrees with the input's shape {x.shape}.")
    if isinstance(x, da.Array):
        return _from_dask_array(x)
    if scipy.sparse.issparse(x):
        return _from_coo(sparse.COO.from_scipy_sparse(x))
    if isinstance(x, sparse.SparseArray):
        if x.fill_value != 0:
            pieces.piece_of_block(x, [0] * x.ndim)  # refuses, with the reason
        return _from_coo(x if isinstance(x, sparse.COO) else x.asformat("coo"))
    if isinstance(x, np.ndarray):
        check_dtype(x.dtype)
        return _from_dask_array(da.from_array(x), keep=False)  # cheaper read again than kept
    raise SporadikError(
        f"Cannot write a {type(x).__module__}.{type(x).__name__}: pass a dask array, an xarray "
        "DataArray, coordinate columns (data, (row, col, ...)) with shape=, a scipy.sparse or "
        "sparse array, or a numpy array."
    )


def _from_dask_array(x: da.Array, keep: bool = True) -> Source:
    shape = _check_shape(x.shape)
    dtype = check_dtype(x.dtype)
    meta_fill = getattr(x._meta, "fill_value", 0)
    if meta_fill != 0:
        pieces.piece_of_block(x._meta, [0] * x.ndim)  # refuses, with the reason
    return Source(shape=shape, dtype=dtype, pieces=piece_graphs.pieces_of_blocks(x, keep))


def _from_coo(coo: Any) -> Source:
    shape = _check_shape(coo.shape)
    dtype = check_dtype(coo.dtype)
    coords, data = np.asarray(coo.coords, dtype=np.int64), np.asarray(coo.data)
    pieces = piece_graphs.pieces_of_coo(coords, data, shape, PIECE_VALUES)
    return Source(shape=shape, dtype=dtype, pieces=pieces)


def _from_columns(data: Any, columns: tuple[Any, ...], shape: tuple[int, ...]) -> Source:
    if len(columns) != len(shape):
        raise LayoutError(
            f"{len(columns)} coordinate columns for a shape of {len(shape)} axes; there is one "
            "column per axis, in axis order."
        )
    values = da.asarray(data)
    dtype = check_dtype(values.dtype)
    if values.ndim != 1:
        raise LayoutError(f"Values must be one column, but have shape {values.shape}.")
    aligned = []
    for axis, column in enumerate(columns):
        column = da.asarray(column)
        if column.dtype.kind not in "iu":
            raise LayoutError(
                f"The coordinates along axis {axis} have dtype {column.dtype}; coordinates are "
                "integers, and rounding would silently move values to other cells."
            )
        if column.shape != values.shape:
            raise LayoutError(
                f"The coordinates along axis {axis} number {column.shape[0]} against "
                f"{values.shape[0]} values; the columns are parallel, one coordinate per value."
            )
        with dask.config.set({"array.rechunk.method": "tasks"}):
            aligned.append(column.rechunk(values.chunks))
    pieces = piece_graphs.pieces_of_columns(values, aligned, shape)
    return Source(shape=shape, dtype=dtype, pieces=pieces)


def _from_frame(
    frame: Any, shape: Sequence[int | None] | None, columns: tuple[str, ...], values: str | None
) -> Source:
    """A dask DataFrame of coordinate columns and a value column: one piece per partition.

    Integer columns are positions. Columns of names (strings, categoricals) are labels: their
    distinct values, sorted, become the axis and its coordinate, found in one pass here
    (:func:`piece_graphs.names_of_frame`: per partition, then united in a tree). Without
    ``values`` each row counts one, so a transcript table becomes counts per cell.
    """
    wanted = [*columns, *([values] if values else [])]
    missing = [name for name in wanted if name not in frame.columns]
    if missing:
        raise LayoutError(
            f"columns={list(columns)!r} and values={values!r} name {missing}, which the "
            f"DataFrame does not have; its columns are {list(frame.columns)}."
        )
    labelled = []
    for axis, name in enumerate(columns):
        kind = frame.dtypes[name].kind
        if kind in "OUS":
            labelled.append(name)
        elif kind not in "iu":
            raise LayoutError(
                f"Column {name!r} (axis {axis}) has dtype {frame.dtypes[name]}; coordinates are "
                "integers or names, and rounding would silently move values to other cells."
            )
    refuse_positions_without_lengths(shape, columns, labelled)
    found, held = _frame_names(frame, labelled)
    labels = {
        name: np.asarray(names.to_numpy(zero_copy_only=False), dtype=str)
        for name, names in found.items()
    }
    sizes = frame_shape(shape, columns, labels)
    dtype = frame_pieces.COUNT_DTYPE if values is None else check_dtype(frame.dtypes[values])
    names = Labels(name=values or "count", dims=columns, attrs={}, coords=labels)
    pieces = piece_graphs.pieces_of_frame(frame, sizes, columns, values, held)
    return Source(shape=sizes, dtype=dtype, pieces=pieces, labels=names)


def _frame_names(frame: Any, labelled: Sequence[str]) -> tuple[dict[str, Any], Any]:
    """Each labelled column's sorted names, and what the pieces' graph holds them by: on a
    ``distributed.Client``, the future of the label pass, which the scheduler can compute again
    if the worker holding it dies (a scattered copy would be lost with it)."""
    if not labelled:
        return {}, {}
    names = piece_graphs.names_of_frame(frame, labelled)
    client = piece_graphs.current_client()
    if client is None:
        found = names.compute()
        return found, found
    held = client.compute(names)
    return held.result(), held


def refuse_positions_without_lengths(
    shape: Sequence[int | None] | None, columns: tuple[str, ...], labelled: Sequence[str]
) -> None:
    """Refuse integer columns without their axes' lengths, before any pass over the table."""
    unlabelled = [name for name in columns if name not in labelled]
    given = [None] * len(columns) if shape is None else list(shape)
    if len(given) != len(columns):
        raise LayoutError(
            f"{len(columns)} coordinate columns for a shape of {len(given)} axes; there is one "
            "column per axis, in axis order."
        )
    missing = [name for name, size in zip(columns, given, strict=True) if size is None]
    if any(name in unlabelled for name in missing):
        example = tuple("None" if name in labelled else f"<{name} length>" for name in columns)
        raise LayoutError(
            f"Columns {unlabelled} hold integer positions, so the table needs shape= with their "
            "axes' lengths: the largest position does not say how long an axis is, and a guess "
            "would make trailing empty positions disappear. Pass "
            f"shape=({', '.join(example)}){',' if len(columns) == 1 else ''}: None leaves an "
            "axis of names to its distinct names."
        )


def frame_shape(
    shape: Sequence[int | None] | None, columns: tuple[str, ...], labels: Mapping[str, Any]
) -> tuple[int, ...]:
    """The shape a table declares: label counts along labelled axes (where ``shape`` gives
    None, or is None), ``shape`` elsewhere."""
    refuse_positions_without_lengths(shape, columns, list(labels))
    given = [None] * len(columns) if shape is None else list(shape)
    sizes = _check_shape(
        [
            len(labels[name]) if size is None else size
            for name, size in zip(columns, given, strict=True)
        ]
    )
    for name, size in zip(columns, sizes, strict=True):
        if name in labels and len(labels[name]) != size:
            raise LayoutError(
                f"Column {name!r} holds {len(labels[name])} distinct names but shape= gives its "
                f"axis length {size}; the names decide the axis, so give None for it in shape=."
            )
    return sizes


def _from_dataarray(array: Any) -> Source:
    return replace(source_of(array.data), labels=labels_of(array))


def source_of_layout(group: Any, layout: LayoutDescription, where: str) -> Source:
    """The pieces of a layout already in a store: ranges of its positions, read where needed.

    ``indptr`` is read here, on the client, and checked, since it decides every piece's range.
    """
    layout.check_whole_read(where)
    indptr = np.asarray(group["indptr"][:], dtype=np.int64)
    check_indptr(indptr, layout.nnz, f"Layout {layout.path!r} in {where}")
    bounds = partition_bounds(indptr, PIECE_VALUES)
    indices, data = array_refs.ArrayRef.of(group["indices"]), array_refs.ArrayRef.of(group["data"])
    pieces = piece_graphs.pieces_of_layout(indices, data, indptr, bounds, layout)
    return Source(shape=layout.shape, dtype=layout.dtype, pieces=pieces)
