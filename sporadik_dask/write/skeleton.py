"""A new store's documents: made in memory when a write is planned, put in place when it runs.

A write planned with ``compute=False`` must not touch what is at its location yet: a dask user
reads it as "nothing happens until compute", and a pending write over an old store that is never
computed, or fails while counting, would otherwise have deleted the old store for nothing. So
the client writes the root group, its labels and coordinates, and every layout's empty arrays
into a ``MemoryStore``, takes each array's ``zarr.json`` from there for the write's tasks to
check, and the write's first task (:func:`write_skeleton`) puts those documents in place, on
whichever process runs it, before any chunk is written. A layout added to a finished store is
planned the same way (:func:`layout_skeleton_of`, :func:`write_layout_skeleton`): nothing in the
store changes until the write runs. Each layout's group and empty arrays are made by
:func:`create_layout`, chunked and encoded as readers expect.

The documents name their write: the root's attribute ``WRITING_KEY`` holds the write's token
until :func:`commit_block` replaces it with the block, in one document write. A retried
:func:`write_skeleton` (its result lost with a worker) finds its own token and leaves the chunks
already written alone; a commit that finds another write's token refuses, as another write has
replaced the store while this one ran.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zarr
from dask.base import tokenize
from zarr.storage import MemoryStore, StorePath

from sporadik_dask.format.errors import SporadikError
from sporadik_dask.format.spec import BLOCK_KEY, ENCODING_VERSION, LAYOUTS_GROUP, MAXIMA, Block
from sporadik_dask.planning.plan import LayoutPlan
from sporadik_dask.store.codecs import Codecs, compressors_for
from sporadik_dask.store.describe import WRITTEN_KEY
from sporadik_dask.store.labels import Labels, labels_attributes, write_coords
from sporadik_dask.store.storage import StoreLike, location_of, open_group, run
from sporadik_dask.store.zarr_adapter import buffer_prototype, make_writable_store_path
from sporadik_dask.write.array_refs import ArrayRef
from sporadik_dask.write.targets import WRITING_KEY, check_target

__all__ = [
    "LayoutSkeleton",
    "Skeleton",
    "commit_block",
    "create_layout",
    "discard",
    "joined",
    "layout_skeleton_of",
    "skeleton_and_arrays",
    "skeleton_of",
    "write_layout_skeleton",
    "write_skeleton",
]


@dataclass(frozen=True, slots=True)
class Skeleton:
    """Every document of a new store, the location they go to, and the write they belong to."""

    #: Where the store goes: a writable store and the path of the root group in it.
    where: StorePath = field(compare=False)
    #: The location as the user gave it, for messages.
    location: str
    #: Whether a sporadik store found there when the write runs may be replaced.
    overwrite: bool
    #: ``(key, bytes)`` relative to the root, the root's ``zarr.json`` first.
    documents: tuple[tuple[str, bytes], ...] = field(repr=False)
    #: The write's token, in the root's attributes until the block replaces it.
    token: str

    def __dask_tokenize__(self) -> tuple[str, str]:
        return (self.location, self.token)


def skeleton_of(
    store: Any,
    storage_options: dict[str, Any] | None,
    location: str,
    overwrite: bool,
    attributes: Mapping[str, Any],
    build: Callable[[zarr.Group], None],
    identity: Any,
) -> Skeleton:
    """A store's documents, made by ``build`` on an empty root group in memory with
    ``attributes``, to go to ``store``, for the write ``identity`` names (its input's keys).

    The token names the input as well as the documents: two writes of different inputs of one
    shape and count (``x`` and ``2 * x``) make the same documents, and under one token dask
    would run one skeleton for both, each then writing its chunks into the other's store. The
    same name without the location stays in the root for good (``WRITTEN_KEY``): a reader that
    opened the store tells it from any later write of other values (a copy of it anywhere, or
    a retried write, holds the same bytes)."""
    memory = MemoryStore()
    root = zarr.open_group(memory, mode="w", zarr_format=3, attributes=dict(attributes))
    build(root)
    documents = run(_documents(memory))
    written = tokenize(documents, identity)
    token = tokenize(location, written)
    root.attrs.update({WRITING_KEY: token, WRITTEN_KEY: written})
    (first, _), *rest = documents  # the root's document, first, now names the write
    marked = run(memory.get(first, buffer_prototype()))
    assert marked is not None  # written just now, in memory
    documents = ((first, marked.to_bytes()), *rest)
    where = run(make_writable_store_path(store, storage_options=storage_options))
    return Skeleton(where, location, overwrite, documents, token)


@dataclass(frozen=True, slots=True)
class LayoutSkeleton:
    """The documents of one layout added to a finished store, and the block it was planned
    against."""

    #: The store's root group: a writable store and the root's path in it.
    where: StorePath = field(compare=False)
    #: The store's location as the user gave it, for messages.
    location: str
    #: The layout group's path under the root, ``layouts/axis{k}``.
    path: str
    #: The block the root held when the layout was planned, as JSON.
    block: str
    #: ``(key, bytes)`` relative to the root, the layout group's ``zarr.json`` first.
    documents: tuple[tuple[str, bytes], ...] = field(repr=False)
    #: The write's token: names the documents and the block.
    token: str

    def __dask_tokenize__(self) -> tuple[str, str]:
        return (self.location, self.token)


def layout_skeleton_of(
    root: zarr.Group, location: str, path: str, build: Callable[[zarr.Group], None]
) -> LayoutSkeleton:
    """The documents ``build`` makes on an empty ``layouts`` group in memory, to go to the
    finished store at ``root`` (``location``), under ``path`` (``layouts/axis{k}``)."""
    memory = MemoryStore()
    build(zarr.open_group(memory, mode="w", zarr_format=3).create_group(path.rsplit("/", 1)[0]))
    documents = run(_documents(memory, prefix=f"{path}/"))
    block = json.dumps(dict(root.attrs).get(BLOCK_KEY), sort_keys=True)
    token = tokenize(location, path, block, documents)
    return LayoutSkeleton(root.store_path, location, path, block, documents, token)


def write_layout_skeleton(skeleton: LayoutSkeleton) -> str:
    """The first task of a layout added to a finished store: put its documents in place.

    1. Refuse when the root's block is not the one the layout was planned against: the store
       was replaced or given layouts since, and the commit would name layouts it no longer has.
    2. A layout group holding this write's documents was laid out by an earlier run of this
       task: write them again (that run may have been cut off among them), keep the chunks.
    3. Otherwise delete what is at the layout's path (what an unfinished earlier write left,
       which the block does not name), then write the group's document, then the arrays'.
    """
    found = dict(open_group(skeleton.where, mode="r").attrs).get(BLOCK_KEY)
    if json.dumps(found, sort_keys=True) != skeleton.block:
        raise SporadikError(
            f"The block of {skeleton.location} changed since {skeleton.path} was planned (it "
            f"now reads {found!r}): committing would name layouts the store may no longer "
            "have. Call add_axis again."
        )
    run(_put_layout(skeleton))
    return skeleton.token


async def _put_layout(skeleton: LayoutSkeleton) -> None:
    import asyncio

    prototype = buffer_prototype()
    group = skeleton.where / skeleton.path
    held = await asyncio.gather(
        *((skeleton.where / key).get(prototype) for key, _ in skeleton.documents)
    )
    if [None if h is None else h.to_bytes() for h in held] != [b for _, b in skeleton.documents]:
        await group.delete_dir()
    (first, document), *rest = skeleton.documents
    await (skeleton.where / first).set(prototype.buffer.from_bytes(document))
    await asyncio.gather(
        *((skeleton.where / key).set(prototype.buffer.from_bytes(blob)) for key, blob in rest)
    )


async def _documents(memory: MemoryStore, prefix: str = "") -> tuple[tuple[str, bytes], ...]:
    """Every document in ``memory`` under ``prefix``, the first group's ``zarr.json`` first."""
    first = f"{prefix}zarr.json"
    found_keys = [key async for key in memory.list() if key.startswith(prefix)]
    keys = sorted(found_keys, key=lambda k: (k != first, k))
    found = []
    for key in keys:
        value = await memory.get(key, buffer_prototype())
        assert value is not None  # listed just now, in memory
        found.append((key, value.to_bytes()))
    return tuple(found)


def write_skeleton(skeleton: Skeleton) -> str:
    """The write's first task: replace what is at the location with the skeleton's documents.

    1. Check the location again, by :func:`~sporadik_dask.write.targets.check_target`'s rule: it may
       have changed since the write was planned.
    2. A root already naming this write was laid out by an earlier run of this task: write its
       documents again (that run may have been cut off among them), keep the chunks.
    3. Remove an old store's block first, so a store torn by what follows is never read as
       finished; then delete everything there (the root's document last), and write the root
       document, then the rest.
    """
    target = check_target(
        skeleton.where,
        overwrite=skeleton.overwrite,
        location=skeleton.location,
        token=skeleton.token,
    )
    if target.attributes.get(WRITING_KEY) == skeleton.token:
        run(_put(skeleton, fresh=False))
        return skeleton.token
    if BLOCK_KEY in target.attributes:
        del open_group(skeleton.where, mode="r+").attrs[BLOCK_KEY]
    run(_put(skeleton, fresh=True))
    return skeleton.token


async def _put(skeleton: Skeleton, *, fresh: bool) -> None:
    """Write the skeleton's documents, the root's first; ``fresh``: delete what is there first.

    Not fresh, the run before was cut off somewhere in here (its worker lost): the documents are
    written again, the same bytes, and the chunks written since are kept.
    """
    import asyncio

    prototype = buffer_prototype()
    if fresh:
        await _delete(skeleton.where)
    (first, root), *rest = skeleton.documents
    await (skeleton.where / first).set(prototype.buffer.from_bytes(root))
    await asyncio.gather(
        *((skeleton.where / key).set(prototype.buffer.from_bytes(blob)) for key, blob in rest)
    )


async def _delete(where: StorePath) -> None:
    """Delete the group at ``where``, its root document last.

    A deletion cut off midway (the process killed) then leaves a root group that names what it
    is, which a write with ``overwrite=True`` replaces, never a directory of nameless entries
    that every write must refuse.
    """
    import asyncio

    entries = [entry async for entry in where.store.list_dir(where.path)]
    await asyncio.gather(*((where / e).delete_dir() for e in entries if e != "zarr.json"))
    await where.delete_dir()


def commit_block(store: Any, block: Block, location: str, token: str | None) -> None:
    """Write ``block`` into the root's attributes, in place of ``token``'s mark when given.

    Refused when the root names another write: it replaced the store while this one ran, and
    the chunks there may be either write's.
    """
    root = zarr.open_group(store, mode="r+", zarr_format=3)
    attributes = dict(root.attrs)
    if _holds(attributes, block):
        return  # committed already: the same write computed twice together, or committed again
    if token is not None and attributes.pop(WRITING_KEY, None) != token:
        raise SporadikError(
            f"{location} was laid out again by another write while this one ran (its root "
            f"names {root.attrs.get(WRITING_KEY)!r}, not {token!r}), so its chunks may be "
            "either write's; no block was written. Run one write to a location at a time, "
            "then write it again."
        )
    root.attrs.put({**attributes, BLOCK_KEY: block.to_json()})


def is_committed(store: Any, block: Block) -> bool:
    """Whether the root holds ``block`` and no write's mark: that write's commit went through."""
    try:
        attributes = dict(zarr.open_group(store, mode="r", zarr_format=3).attrs)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError):
        return False
    return _holds(attributes, block)


def _holds(attributes: dict[str, Any], block: Block) -> bool:
    """Whether root attributes hold ``block`` and no write's mark."""
    written = json.loads(json.dumps(block.to_json()))  # as it reads back: lists, not tuples
    return WRITING_KEY not in attributes and attributes.get(BLOCK_KEY) == written


def discard(store: Any, token: str) -> bool:
    """Delete the store at the root of ``store`` when its root still names the write ``token``:
    laid out by that write, which never committed. Anything else is left as it is."""
    try:
        root = zarr.open_group(store, mode="r", zarr_format=3)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError):
        return False
    attributes = dict(root.attrs)
    if attributes.pop(WRITING_KEY, None) != token:
        return False
    # first the mark: a deletion cut off midway leaves an unfinished store no write takes for
    # its own (a retried skeleton would keep what is left, documents missing)
    writable = zarr.open_group(store, mode="r+", zarr_format=3)
    writable.attrs.put(attributes)
    run(_delete(StorePath(root.store.with_read_only(False), "")))
    return True


def skeleton_and_arrays(
    store: StoreLike,
    storage_options: dict[str, Any] | None,
    overwrite: bool,
    labels: Labels | None,
    plans: dict[int, LayoutPlan],
    byte_addressable: bool,
    codecs: Codecs,
    identity: Any,
) -> tuple[Skeleton, dict[int, dict[str, ArrayRef]]]:
    """The new store's documents (:func:`skeleton_of`) for the write of the input ``identity``
    names, and a reference to each array they create, at ``store``, where :func:`write_skeleton`
    puts them."""
    made: dict[int, dict[str, zarr.Array[Any]]] = {}

    def build(root: zarr.Group) -> None:
        write_coords(root, labels)
        layouts = root.create_group(LAYOUTS_GROUP)
        for axis, plan in plans.items():
            made[axis] = create_layout(layouts, plan, byte_addressable, codecs)

    skeleton = skeleton_of(
        store,
        storage_options,
        location_of(store),
        overwrite,
        labels_attributes(labels),
        build,
        identity,
    )
    where = skeleton.where
    arrays = {
        axis: {
            name: ArrayRef.at(
                where.store,
                joined(where.path, array.path),
                array,
                (where.path, {WRITING_KEY: skeleton.token}),
            )
            for name, array in found.items()
        }
        for axis, found in made.items()
    }
    return skeleton, arrays


def joined(prefix: str, path: str) -> str:
    return f"{prefix}/{path}" if prefix else path


def create_layout(
    layouts: zarr.Group, plan: LayoutPlan, byte_addressable: bool, codecs: Codecs
) -> dict[str, zarr.Array[Any]]:
    """The child group of one layout and its empty arrays, chunked and encoded as readers expect."""
    child = layouts.create_group(
        f"axis{plan.indexed_axis}",
        attributes={
            "encoding-type": plan.encoding,
            "encoding-version": ENCODING_VERSION,
            "shape": list(plan.declared_shape),
        },
    )
    lengths, dtypes = plan.lengths(), plan.dtypes()
    return {
        name: child.create_array(
            name,
            shape=(lengths[name],),
            dtype=dtypes[name],
            chunks=(plan.chunks[name],),
            shards=(plan.shards[name],) if plan.shards and name in plan.shards else None,
            compressors=None
            if byte_addressable
            else compressors_for(codecs, name, np.dtype(dtypes[name])),
            fill_value=0,
        )
        for name in ("data", "indices", "indptr", MAXIMA)
    }
