"""What a store says about itself, read from metadata documents only, never from a chunk.

This is the one place a store is opened for reading: :func:`open_store` opens the root group,
describes it and keeps every array it opened on the way, so a reader built from the result
fetches no metadata document twice (on an object store each is a round trip).

Everything a reader needs besides the block is derived from the artifact (nnz, dtypes, chunking,
whether a layout is byte addressable), so it cannot be declared wrong. The checks that need no data
run here, so a store that opens is one whose arrays agree with their declarations; the checks that
need data (:func:`sporadik_dask.format.spec.check_indptr`,
:func:`~sporadik_dask.format.spec.check_indices`) run where the data is read.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
from zarr.codecs.bytes import BytesCodec, Endian

import sporadik_dask.config  # noqa: F401  (every open and write passes here: the keys' defaults)
from sporadik_dask.format.errors import (
    IncompleteError,
    LayoutError,
)
from sporadik_dask.format.spec import (
    ARRAY_NAMES,
    MAXIMA,
    LayoutEntry,
    LayoutGeometry,
    anndata_encoding,
    declared_shape,
    layout_path,
    parse_block,
)
from sporadik_dask.store.codecs import chain_label
from sporadik_dask.store.storage import (
    StoreLike,
    location_of,
    open_group_async,
)
from sporadik_dask.store.zarr_adapter import AsyncArray, AsyncGroup, run

if TYPE_CHECKING:
    pass

__all__ = [
    "WRITTEN_KEY",
    "LayoutDescription",
    "OpenedStore",
    "StoreDescription",
    "describe",
    "describe_async",
    "max_positions",
    "normalized",
    "open_store",
    "open_store_async",
]

#: Root attribute naming the write that made a finished store (its token, written in one document
#: with the block): what tells two stores of one shape and count apart, so an array opened on
#: one never reads the other's values (:func:`check_as_opened`).
WRITTEN_KEY = "sporadik-dask-written"


@dataclass(frozen=True, slots=True)
class LayoutDescription(LayoutGeometry):
    """One layout: what the block declares of it and what its arrays say of themselves."""

    #: Where the child group lives inside the prefix.
    path: str
    #: The axis this layout makes contiguous.
    indexed_axis: int
    #: The other axes, in the order ``indices`` was raveled over them.
    index_order: tuple[int, ...]
    #: The array's own shape (the block's), not the raveled one the group declares.
    shape: tuple[int, ...]
    #: ``csr_matrix`` or ``csc_matrix``, as anndata spells it.
    encoding: str
    encoding_version: str
    #: How many values the layout holds.
    nnz: int
    #: dtype of ``data``.
    dtype: np.dtype[Any]
    #: dtype of ``indices`` and of ``indptr``, each.
    index_dtypes: Mapping[str, np.dtype[Any]]
    #: Elements per zarr chunk of each array.
    chunks: Mapping[str, int]
    #: Whether each array is one uncompressed chunk, so ``indptr`` names exact byte ranges.
    byte_addressable: bool
    #: Whether the layout carries per-slice ``maxima``.
    has_maxima: bool
    #: Elements per shard object of each array (zarr's ``sharding_indexed``), or None when every
    #: chunk is its own object. ``chunks`` are then the inner chunks, each its own byte range.
    shards: Mapping[str, int] | None = None
    #: Each array's codec chain (:func:`~sporadik_dask.store.codecs.chain_label`).
    codecs: Mapping[str, str] = field(default_factory=dict)

    def check_whole_read(self, where: str) -> None:
        """Refuse to read all of ``indptr`` (8 bytes a position) past ``sporadik.max-positions``.

        A declared shape costs nothing to write, and absent chunks read as zeros, so a corrupt
        or hostile store could otherwise make a reader allocate terabytes.
        """
        limit = max_positions()
        if self.positions > limit:
            raise LayoutError(
                f"Layout {self.path!r} in {where} declares {self.positions:,} positions; reading "
                f"its indptr whole would take {8 * (self.positions + 1) / 2**30:,.1f} GiB, past "
                f"the limit of {limit:,} positions. A shape this long is usually corrupt; if it "
                "is real, raise dask.config 'sporadik.max-positions'."
            )


#: Positions a layout may declare before reading its whole ``indptr`` is refused: 2**31 positions
#: take 16 GiB as int64. Selections read only their brackets and are never refused.
MAX_POSITIONS = 2**31


def max_positions() -> int:
    """``sporadik.max-positions``: positions past which a whole ``indptr``, or a dense answer
    per position, is refused (:data:`MAX_POSITIONS` unless set)."""
    import dask.config

    return int(dask.config.get("sporadik.max-positions", MAX_POSITIONS))


@dataclass(frozen=True, slots=True)
class StoreDescription:
    """A store: its spec, its array's shape, and each finished layout by indexed axis."""

    #: Where the store is, for messages; not part of what the store *is*, so not compared.
    location: str = field(compare=False)
    spec: str
    shape: tuple[int, ...]
    layouts: Mapping[int, LayoutDescription]
    #: The token of the write that made the store (:data:`WRITTEN_KEY`); None for a store
    #: another writer made, told apart from a rewrite of it by its block alone.
    written: str | None = None

    @property
    def rank(self) -> int:
        """How many axes the array has."""
        return len(self.shape)

    @property
    def nnz(self) -> int:
        """How many nonzeros the array holds (every layout holds them all)."""
        return next(iter(self.layouts.values())).nnz

    @property
    def dtype(self) -> np.dtype[Any]:
        """The dtype of the values."""
        return next(iter(self.layouts.values())).dtype

    @property
    def indexed_axes(self) -> tuple[int, ...]:
        """The axes a store answers with one contiguous read each."""
        return tuple(sorted(self.layouts))


async def _child(group: AsyncGroup, name: str) -> Any:
    """The node at ``name``, None if there is none, refusing metadata zarr cannot parse."""
    try:
        return await group.getitem(name)
    except KeyError:
        return None
    except Exception as unreadable:  # zarr raises many kinds for a malformed document
        raise LayoutError(
            f"The metadata of {group.path or '/'}/{name} cannot be read "
            f"({type(unreadable).__name__}: {unreadable}); the store is corrupt, and what it "
            "holds cannot be interpreted. Write it again."
        ) from unreadable


def _regular_chunks(array: AsyncArray[Any]) -> bool:
    try:
        chunks = tuple(array.chunks)
    except Exception:  # a chunk grid zarr cannot express as one chunk shape
        return False
    return len(chunks) == 1 and isinstance(chunks[0], int) and chunks[0] >= 1


def _shards(arrays: Mapping[str, Any]) -> dict[str, int] | None:
    """Elements per shard object of each array, when any array is sharded."""
    found = {name: arrays[name].shards for name in ARRAY_NAMES}
    if all(shards is None for shards in found.values()):
        return None
    return {
        name: int(shards[0]) if shards else int(arrays[name].chunks[0])
        for name, shards in found.items()
    }


def _is_byte_addressable(array: AsyncArray[Any]) -> bool:
    """One chunk, no filter or compressor, little-endian bytes: the object is the raw buffer."""
    serializer = array.serializer
    raw = isinstance(serializer, BytesCodec) and serializer.endian in (None, Endian.little)
    return (
        raw
        and not array.filters
        and not array.compressors
        and tuple(array.chunks) == tuple(array.shape)
    )


#: The nodes of one layout, each read from its own ``zarr.json``: the group, then its arrays.
_NODES = ("", *ARRAY_NAMES, MAXIMA)


async def _layout_nodes(root: AsyncGroup, entries: tuple[LayoutEntry, ...]) -> list[list[Any]]:
    """Every layout's group and arrays (None where there is none), all documents in one batch.

    The block names each layout's path and the format names its arrays, so no document waits
    for another: on an object store, one round trip after the root's for any number of layouts.
    """
    paths = [f"{entry.path}/{name}".rstrip("/") for entry in entries for name in _NODES]
    found = await asyncio.gather(*(_child(root, path) for path in paths))
    return [list(found[k : k + len(_NODES)]) for k in range(0, len(found), len(_NODES))]


def _describe_layout(
    nodes: list[Any],
    entry: LayoutEntry,
    shape: tuple[int, ...],
    where: str,
) -> tuple[LayoutDescription, dict[str, AsyncArray[Any]]]:
    """One layout from its nodes (:func:`_layout_nodes`), refusing anything that contradicts
    itself or the block, and the arrays it opened by path (``maxima`` only when the layout
    carries it)."""
    child = nodes[0]
    if not isinstance(child, AsyncGroup):
        raise IncompleteError(
            f"{where} names layout {entry.path!r}, but the prefix holds no group there: the block "
            "lists what the writer finished, so the upload stopped between the two. Write it again."
        )
    expected_path = layout_path(entry.indexed_axis)
    if entry.path != expected_path:
        raise LayoutError(
            f"Layout {entry.path!r} in {where} makes axis {entry.indexed_axis} contiguous, so it "
            f"belongs at {expected_path!r}; read from the wrong name it would be indexed along the "
            "wrong axis and every lookup would return a real, wrong slice."
        )
    label = f"Layout {entry.path!r} in {where}"
    attrs = child.attrs
    encoding = attrs.get("encoding-type")
    expected_encoding = anndata_encoding(len(shape), entry.indexed_axis)
    if encoding != expected_encoding:
        raise LayoutError(
            f"{label} declares encoding-type {encoding!r}, but making axis {entry.indexed_axis} of "
            f"a rank-{len(shape)} array contiguous is {expected_encoding!r}; anndata would read it "
            "along the other axis."
        )
    declared = attrs.get("shape")
    expected_shape = declared_shape(shape, entry.indexed_axis, entry.index_order)
    if not isinstance(declared, list) or tuple(declared) != expected_shape:
        raise LayoutError(
            f"{label} declares shape {declared!r}, but axis {entry.indexed_axis} of {shape} in "
            f"index_order {list(entry.index_order)} gives {list(expected_shape)}; the group "
            "and the block describe different arrays."
        )

    arrays: dict[str, Any] = dict(zip(_NODES[1:], nodes[1:], strict=True))
    missing = [name for name in ARRAY_NAMES if not isinstance(arrays[name], AsyncArray)]
    if missing:
        raise LayoutError(
            f"{label} has no array {', '.join(missing)}; a layout holds data, indices and indptr. "
            "The store is torn or was not written by a sporadik writer."
        )
    for name, array in arrays.items():
        if isinstance(array, AsyncArray) and len(array.shape) != 1:
            raise LayoutError(
                f"{label}: {name} has shape {array.shape}; it must be one-dimensional."
            )
        if isinstance(array, AsyncArray) and not _regular_chunks(array):
            raise LayoutError(
                f"{label}: {name} is not chunked as one regular run of at least one element per "
                "chunk; its chunks could not be addressed. The store is corrupt."
            )
    data, indices, indptr = (arrays[name] for name in ARRAY_NAMES)
    for name in ("indices", "indptr"):
        if arrays[name].dtype.kind not in "iu":
            raise LayoutError(
                f"{label}: {name} has dtype {arrays[name].dtype}, not an integer dtype, so it "
                "cannot address values."
            )
    if data.dtype.kind not in "biufc":
        raise LayoutError(
            f"{label}: data has dtype {data.dtype}; sparse values are numbers or booleans. "
            "Refused rather than decoded, since an object codec would run code from the store."
        )
    positions = shape[entry.indexed_axis]
    if indptr.shape[0] != positions + 1:
        raise LayoutError(
            f"{label} makes axis {entry.indexed_axis} of {shape} contiguous, so indptr should have "
            f"{positions + 1} entries, but it has {indptr.shape[0]}; runs would be read at the "
            "wrong positions."
        )
    if data.shape != indices.shape:
        raise LayoutError(
            f"{label} has {data.shape[0]} values and {indices.shape[0]} indices; they are "
            "parallel, so one of them stopped partway. The layout is torn; write it again."
        )
    cells = math.prod(shape)
    if data.shape[0] > cells:
        raise LayoutError(
            f"{label} holds {data.shape[0]} values for an array of {cells} cells; some cell is "
            "named twice, and a reader would return one of them at random."
        )
    maxima = arrays[MAXIMA]
    has_maxima = isinstance(maxima, AsyncArray)
    if has_maxima and maxima.shape != (positions,):
        raise LayoutError(
            f"{label}: maxima has shape {maxima.shape}, but there is one per position "
            f"({positions})."
        )
    description = LayoutDescription(
        path=entry.path,
        indexed_axis=entry.indexed_axis,
        index_order=entry.index_order,
        shape=shape,
        encoding=str(encoding),
        encoding_version=str(attrs.get("encoding-version", "")),
        nnz=int(data.shape[0]),
        dtype=np.dtype(data.dtype),
        index_dtypes={name: np.dtype(arrays[name].dtype) for name in ("indices", "indptr")},
        chunks={name: int(arrays[name].chunks[0]) for name in ARRAY_NAMES},
        byte_addressable=all(_is_byte_addressable(arrays[name]) for name in ARRAY_NAMES),
        has_maxima=has_maxima,
        shards=_shards(arrays),
        codecs={
            name: chain_label(getattr(arrays[name].metadata, "codecs", ())) for name in ARRAY_NAMES
        },
    )
    opened = {
        f"{entry.path}/{name}": array
        for name, array in arrays.items()
        if name in ARRAY_NAMES or has_maxima
    }
    return description, opened


@dataclass(frozen=True, slots=True)
class OpenedStore:
    """A store opened for reading: its root group, its description and the arrays it names.

    Built by :func:`open_store` (which checks everything :func:`describe` checks) or, for a
    description known already, by :func:`reopen_store_async`; never by hand.
    """

    #: The store as given (a path as a string), to open it again in another process.
    store: StoreLike = field(compare=False)
    #: Options for opening a URL (fsspec's).
    storage_options: dict[str, Any] | None = field(compare=False)
    #: The root group, open.
    root: AsyncGroup = field(compare=False, repr=False)
    description: StoreDescription
    #: Every layout's arrays, by path inside the store (``layouts/axis0/indptr``), open.
    arrays: Mapping[str, AsyncArray[Any]] = field(compare=False, repr=False)

    @property
    def group(self) -> zarr.Group:
        """The root group, synchronous."""
        return zarr.Group(self.root)

    def layout_arrays(self, layout: LayoutDescription) -> dict[str, zarr.Array[Any]]:
        """One layout's ``data``, ``indices``, ``indptr`` (and ``maxima``), synchronous."""
        return {
            name: zarr.Array(self.arrays[f"{layout.path}/{name}"])
            for name in (*ARRAY_NAMES, MAXIMA)
            if f"{layout.path}/{name}" in self.arrays
        }


def normalized(store: StoreLike) -> StoreLike:
    return os.fspath(store) if isinstance(store, os.PathLike) else store


async def open_store_async(
    store: StoreLike, *, storage_options: dict[str, Any] | None = None
) -> OpenedStore:
    """Asynchronous :func:`open_store`."""
    store = normalized(store)
    where = location_of(store)
    root = await open_group_async(store, mode="r", storage_options=storage_options)
    block = parse_block(root.attrs, where)
    nodes = await _layout_nodes(root, block.layouts)
    described = [
        _describe_layout(found, entry, block.shape, where)
        for found, entry in zip(nodes, block.layouts, strict=True)
    ]
    written = root.attrs.get(WRITTEN_KEY)
    description = StoreDescription(
        location=where,
        spec=block.spec,
        shape=block.shape,
        layouts={layout.indexed_axis: layout for layout, _ in described},
        written=written if isinstance(written, str) else None,
    )
    arrays = {path: array for _, opened in described for path, array in opened.items()}
    return OpenedStore(store, storage_options, root, description, arrays)


def open_store(store: StoreLike, *, storage_options: dict[str, Any] | None = None) -> OpenedStore:
    """Open the sparse store at ``store`` for reading: root, description and arrays, together.

    Reads metadata documents only, each once, in two batches (the root, then every layout's
    group and arrays together), and makes every check :func:`describe` makes.
    """
    return run(open_store_async(store, storage_options=storage_options))


async def reopen_store_async(
    store: StoreLike, storage_options: dict[str, Any] | None, description: StoreDescription
) -> OpenedStore:
    """The arrays of a store described already (in another process, say), opened again.

    The description is trusted, not made again: this is how a reader that travelled as a
    location gets its arrays back.
    """
    store = normalized(store)
    root = await open_group_async(store, mode="r", storage_options=storage_options)
    paths = [
        f"{layout.path}/{name}"
        for layout in description.layouts.values()
        for name in (*ARRAY_NAMES, MAXIMA)
        if name != MAXIMA or layout.has_maxima
    ]
    found = await asyncio.gather(*(root.getitem(path) for path in paths))
    arrays = {path: array for path, array in zip(paths, found, strict=True)}
    return OpenedStore(store, storage_options, root, description, arrays)  # type: ignore[arg-type]


async def describe_async(
    store: StoreLike, *, storage_options: dict[str, Any] | None = None
) -> StoreDescription:
    """Asynchronous :func:`describe`."""
    return (await open_store_async(store, storage_options=storage_options)).description


def describe(
    store: StoreLike, *, storage_options: dict[str, Any] | None = None
) -> StoreDescription:
    """Describe the sparse store at ``store``, reading metadata documents only.

    Parameters
    ----------
    store
        A local path, a URL such as ``s3://bucket/prefix``, or a zarr store object.
    storage_options
        Passed to fsspec for a URL, as dask and xarray pass them.

    Raises
    ------
    IncompleteError
        The block is missing or not complete, or names a layout that is not there.
    SpecError
        The block declares a spec version this does not read.
    LayoutError
        A layout contradicts itself or the block.
    """
    return run(describe_async(store, storage_options=storage_options))
