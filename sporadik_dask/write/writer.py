"""Writing a store out of core: ``to_sporadik`` and ``add_axis``.

The order is the format's: the client creates the groups and array documents, the workers write
every zarr chunk, and the client writes the block last, only after every chunk write returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, overload

import numpy.typing as npt
import zarr
from zarr.storage import StorePath

from sporadik_dask.format.errors import LayoutError
from sporadik_dask.format.spec import BLOCK_KEY, LAYOUTS_GROUP, Block
from sporadik_dask.planning.budgets import held_pieces
from sporadik_dask.planning.dtypes import check_dtype_option
from sporadik_dask.planning.plan import LayoutPlan
from sporadik_dask.store.codecs import Codecs, check_codecs
from sporadik_dask.store.describe import WRITTEN_KEY, StoreDescription, describe
from sporadik_dask.store.storage import StoreLike, open_group
from sporadik_dask.write.array_refs import ArrayRef
from sporadik_dask.write.graph import write_graph
from sporadik_dask.write.persisted import let_go
from sporadik_dask.write.plans import Duplicates, plan_source
from sporadik_dask.write.skeleton import (
    LayoutSkeleton,
    Skeleton,
    create_layout,
    joined,
    layout_skeleton_of,
    skeleton_and_arrays,
    write_layout_skeleton,
    write_skeleton,
)
from sporadik_dask.write.sources import Source, source_of, source_of_layout
from sporadik_dask.write.store_write import LAY_OUT, StoreWrite
from sporadik_dask.write.targets import check_target

__all__ = ["add_axis", "to_sporadik"]


def _check_codecs(codecs: Codecs, byte_addressable: bool) -> None:
    """Refuse codecs this package does not write, or any with ``byte_addressable``."""
    check_codecs(codecs)
    if byte_addressable and codecs != "zstd":
        raise LayoutError(
            f"codecs={codecs!r} and byte_addressable=True contradict each other: a "
            "byte-addressable array is stored raw, with no codec. Choose one."
        )


def _axes(axes: Sequence[int] | None, rank: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(rank))
    chosen = tuple(int(axis) for axis in axes)
    if not chosen or len(set(chosen)) != len(chosen) or not all(0 <= a < rank for a in chosen):
        raise LayoutError(
            f"axes={tuple(axes)!r} must name each of some axes of a rank-{rank} array once; a "
            "repeated or missing axis would write a layout twice or one no reader can use."
        )
    return tuple(sorted(chosen))


def _read_from(x: Any) -> list[str]:
    """Locations of the sporadik stores ``x`` reads lazily: a target there must be refused.

    Only this package's readers are recognised (a DataArray's encoding, a dask graph's values);
    the command line also names its input file.
    """
    from sporadik_dask.read import StoreReader

    found: list[Any] = list(getattr(x, "encoding", {}).values())
    for collection in (x, getattr(x, "data", None)):
        graph: Any = getattr(collection, "__dask_graph__", lambda: None)()
        found.extend(dict(graph or {}).values())
    return [value.location for value in found if isinstance(value, StoreReader)]


@overload
def to_sporadik(
    x: Any,
    store: StoreLike,
    *,
    shape: Sequence[int | None] | None = None,
    axes: Sequence[int] | None = None,
    chunk: int | None = None,
    shard: int | None = None,
    byte_addressable: bool = False,
    codecs: Codecs = "zstd",
    dtype: npt.DTypeLike | None = None,
    duplicates: Duplicates = "sum",
    overwrite: bool = False,
    compute: Literal[True] = True,
    storage_options: dict[str, Any] | None = None,
    partition_bytes: int | None = None,
    columns: Sequence[str] | None = None,
    values: str | None = None,
) -> StoreDescription: ...


@overload
def to_sporadik(
    x: Any,
    store: StoreLike,
    *,
    shape: Sequence[int | None] | None = None,
    axes: Sequence[int] | None = None,
    chunk: int | None = None,
    shard: int | None = None,
    byte_addressable: bool = False,
    codecs: Codecs = "zstd",
    dtype: npt.DTypeLike | None = None,
    duplicates: Duplicates = "sum",
    overwrite: bool = False,
    compute: Literal[False],
    storage_options: dict[str, Any] | None = None,
    partition_bytes: int | None = None,
    columns: Sequence[str] | None = None,
    values: str | None = None,
) -> StoreWrite: ...


def to_sporadik(
    x: Any,
    store: StoreLike,
    *,
    shape: Sequence[int | None] | None = None,
    axes: Sequence[int] | None = None,
    chunk: int | None = None,
    shard: int | None = None,
    byte_addressable: bool = False,
    codecs: Codecs = "zstd",
    dtype: npt.DTypeLike | None = None,
    duplicates: Duplicates = "sum",
    overwrite: bool = False,
    compute: bool = True,
    storage_options: dict[str, Any] | None = None,
    partition_bytes: int | None = None,
    columns: Sequence[str] | None = None,
    values: str | None = None,
) -> StoreDescription | StoreWrite:
    """Write ``x`` as a sparse store with one layout per axis in ``axes`` (default: every axis).

    Parameters
    ----------
    x
        A dask array with ``sparse``, ``scipy.sparse`` or numpy chunks, an xarray DataArray,
        coordinate columns ``(data, (row, col, ...))`` with ``shape=``, a dask (or pandas)
        DataFrame with ``columns=``, a ``scipy.sparse`` or ``sparse`` array, or a numpy array.
        Zeros of numpy input are dropped.
    store
        A local path, a URL (with ``storage_options``), or a zarr store object.
    chunk, byte_addressable
        Elements per zarr chunk (default ~128 KB worth), or one uncompressed chunk per array.
    codecs
        The codec chain of every array, or of each by name (``{"data": "blosc-lz4"}``; those not
        named get ``"zstd"``): ``"zstd"`` (the default), ``"blosc-zstd"`` (the fewest bytes) or
        ``"blosc-lz4"`` (the fastest decode). zarr-python, the reference, anndata and zarrita
        read every one; see the benchmarks page for bytes and speed.
    dtype
        The dtype the values are stored in: their own (None, the default), ``"smallest-integer"``
        (the narrowest integer dtype holding every value: uint8 or uint16 for most counts kept as
        float32, unsigned unless a value is negative), or an integer dtype (``"uint16"``). Every
        value must be a whole number the dtype holds; the pass that counts values per position
        checks each, and a value that is not refuses the write before anything is written,
        naming it (a cast would store another number without an error).
    shard
        Elements per object (default: one object per chunk). With it each array is sharded
        (zarr's ``sharding_indexed``): ``shard`` elements in one object, each chunk still read by
        its own byte range. Rounded up to a multiple of each array's chunk; with ``chunk`` it
        must be one. One task writes each shard in one PUT. See the object stores page for the
        size to pick (e.g. ``2**24``: 64 MiB of 4-byte values, 512 chunks).
    duplicates
        What two values at one cell mean: ``"sum"`` adds them, as scipy does; ``"refuse"``
        raises before anything is written.
    overwrite
        Replace an existing sporadik store (finished or torn): when the write runs, its block
        is removed before anything else is touched. A location holding anything else (a store
        with other files kept in it included) is never replaced, nor one that is, holds or lies
        inside a store ``x`` is read from, nor a path inside another store.
    compute
        If False, return a :class:`StoreWrite`, having touched nothing at the location; computing
        it lays the store out, writes, then commits the block.
    partition_bytes
        Memory a sort task may hold; default ``dask.config`` ``sporadik.partition-bytes``. A
        layout's shuffle parts past ``sporadik.spill-bytes`` wait on disk rather than in
        memory: on a local scheduler under dask's ``temporary-directory``, on a cluster inside
        a local directory store (:mod:`sporadik_dask.write.spill`).
    columns, values
        For a DataFrame: its coordinate columns, one per axis, and its value column (without
        one, each row counts one). A column of names becomes a labelled axis, its sorted distinct
        names the coordinate; integer columns are positions and need ``shape=`` (with None for
        an axis of names, e.g. ``shape=(n_cells, None)``).

    Returns
    -------
    StoreDescription or StoreWrite
        The written store's description, or the pending write when ``compute`` is False. One
        pass over ``x`` counts values per position when this is called; the values move when
        the write is computed.
    """
    _check_codecs(codecs, byte_addressable)
    check_dtype_option(dtype)
    inputs = _read_from(x)
    check_target(store, overwrite=overwrite, storage_options=storage_options, inputs=inputs)
    given = source_of(x, shape=shape, columns=columns, values=values)
    plans, source = plan_source(
        given,
        _axes(axes, len(given.shape)),
        duplicates=duplicates,
        chunk=chunk,
        byte_addressable=byte_addressable,
        partition_bytes=partition_bytes,
        shard=shard,
        dtype=dtype,
    )
    try:
        skeleton, arrays = skeleton_and_arrays(
            store,
            storage_options,
            overwrite,
            source.labels,
            plans,
            byte_addressable,
            codecs,
            given.pieces.keys,
        )
        block = Block.over(source.shape, {axis: plan.index_order for axis, plan in plans.items()})
    except BaseException:
        let_go(source.pieces)
        raise
    return _write(source, plans, arrays, skeleton.where / LAYOUTS_GROUP, block, skeleton, compute)


def _write(
    source: Source,
    plans: dict[int, LayoutPlan],
    arrays: dict[int, dict[str, ArrayRef]],
    layouts: StorePath,
    block: Block,
    laid_out: Skeleton | LayoutSkeleton,
    compute: bool,
) -> StoreDescription | StoreWrite:
    """Compute (or return) the write of the planned layouts' ``arrays`` and its commit, after
    its first task lays out the store (:class:`Skeleton`) or the layout added to a finished
    one (:class:`LayoutSkeleton`)."""
    pieces = len(source.pieces.keys)
    held = {axis: held_pieces(plan, pieces) for axis, plan in plans.items()}
    spilled = {axis: first for axis, first in held.items() if first < pieces}
    first = (
        LAY_OUT + laid_out.token,
        write_skeleton if isinstance(laid_out, Skeleton) else write_layout_skeleton,
        laid_out,
    )
    # a layout added to a finished store is never the write's own to delete (``discard``)
    token = laid_out.token if isinstance(laid_out, Skeleton) else None
    location = laid_out.location
    try:
        graph, keys, spill_to = write_graph(
            source.pieces, plans, arrays, spilled, shared=layouts, first=first
        )
    except BaseException:
        let_go(source.pieces)
        raise
    write = StoreWrite(
        graph,
        keys,
        layouts.store,
        block,
        location,
        spill_to,
        token=token,
        kept=source.pieces.kept,
        persisted=source.pieces.persisted,
    )
    if compute:
        try:
            description: StoreDescription = write.compute()
        finally:
            let_go(source.pieces)  # no one retries a write they did not hold
        return description
    return write


@overload
def add_axis(
    store: StoreLike,
    axis: int,
    *,
    chunk: int | None = None,
    shard: int | None = None,
    byte_addressable: bool = False,
    codecs: Codecs = "zstd",
    compute: Literal[True] = True,
    storage_options: dict[str, Any] | None = None,
    partition_bytes: int | None = None,
) -> StoreDescription: ...


@overload
def add_axis(
    store: StoreLike,
    axis: int,
    *,
    chunk: int | None = None,
    shard: int | None = None,
    byte_addressable: bool = False,
    codecs: Codecs = "zstd",
    compute: Literal[False],
    storage_options: dict[str, Any] | None = None,
    partition_bytes: int | None = None,
) -> StoreWrite: ...


def add_axis(
    store: StoreLike,
    axis: int,
    *,
    chunk: int | None = None,
    shard: int | None = None,
    byte_addressable: bool = False,
    codecs: Codecs = "zstd",
    compute: bool = True,
    storage_options: dict[str, Any] | None = None,
    partition_bytes: int | None = None,
) -> StoreDescription | StoreWrite:
    """Build the layout making ``axis`` contiguous from one the store already has, out of core.

    The new layout's chunks are written beside the finished ones, which readers go on reading;
    the block is rewritten to name it only after every chunk is written, keeping any other root
    attributes. A store that already has the layout is returned as it is. ``chunk``, ``shard``,
    ``byte_addressable`` and ``codecs`` are :func:`to_sporadik`'s, for the new layout only. With
    ``compute=False`` nothing in the store changes until the returned write is computed (the
    held layout is counted now); its first task then refuses a store whose block changed since.
    """
    _check_codecs(codecs, byte_addressable)
    description = describe(store, storage_options=storage_options)
    axis = int(axis)
    if axis in description.layouts:
        return description
    _axes((axis,), description.rank)
    held = min(description.layouts.values(), key=lambda layout: layout.nnz)
    root = open_group(store, mode="r+", storage_options=storage_options)
    child = root[held.path]
    source = source_of_layout(child, held, description.location)
    plans, source = plan_source(
        source,
        (axis,),
        duplicates="refuse",
        chunk=chunk,
        byte_addressable=byte_addressable,
        partition_bytes=partition_bytes,
        shard=shard,
    )
    orders = {a: layout.index_order for a, layout in description.layouts.items()}
    block = Block.over(description.shape, {**orders, axis: plans[axis].index_order})
    made: dict[str, zarr.Array[Any]] = {}

    def build(layouts: zarr.Group) -> None:
        made.update(create_layout(layouts, plans[axis], byte_addressable, codecs))

    path = f"{LAYOUTS_GROUP}/axis{axis}"  # what an unfinished earlier add_axis left goes then
    laid_out = layout_skeleton_of(root, description.location, path, build)
    where = root.store_path
    # its tasks write only while the root holds the block and write it extends: a store
    # removed or replaced meanwhile (a cancelled add_axis's tasks run on) is left alone
    extended = {key: root.attrs.get(key) for key in (BLOCK_KEY, WRITTEN_KEY)}
    owner = (where.path, extended)
    arrays = {
        axis: {
            name: ArrayRef.at(where.store, joined(where.path, array.path), array, owner)
            for name, array in made.items()
        }
    }
    return _write(source, plans, arrays, where / LAYOUTS_GROUP, block, laid_out, compute)
