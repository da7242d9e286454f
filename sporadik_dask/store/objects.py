"""Chunk objects in and out of a store: files written and read in place in a local directory,
one batch of requests on zarr's I/O loop in any other store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import zarr
from zarr.storage import StorePath

from sporadik_dask.format.errors import FetchError, LayoutError
from sporadik_dask.store.zarr_adapter import buffer_prototype, run

__all__ = [
    "done",
    "fetch",
    "fetched",
    "gather",
    "local_directory",
    "read_file",
    "store_objects",
    "writable_directory",
]


def store_objects(array: zarr.Array[Any], objects: list[tuple[str, bytes]]) -> None:
    """Store encoded chunk objects of ``array`` (keys relative to it): files when local."""
    if not objects:
        return
    base = writable_directory(array)
    if base is not None:
        _write_files(base, objects)
        return
    prototype = buffer_prototype()
    path = array.store_path
    run(gather([(path / key).set(prototype.buffer.from_bytes(blob)) for key, blob in objects]))


def writable_directory(node: zarr.Array[Any] | StorePath) -> Path | None:
    """The directory of ``node`` (an array, or a store path) when it is in a plain local
    directory store that may be written, else None: where files may be written in place, by
    this process or any worker."""
    where = node if isinstance(node, StorePath) else node.store_path
    return None if where.store.read_only else local_directory(where)


def local_directory(node: zarr.Array[Any] | StorePath) -> Path | None:
    """The directory of ``node`` when it is in a plain local directory store, else None (a
    subclass may hook its reads and writes)."""
    from zarr.storage import LocalStore

    where = node if isinstance(node, StorePath) else node.store_path
    if type(where.store) is not LocalStore:
        return None
    return Path(where.store.root) / where.path


def _write_files(base: Path, objects: list[tuple[str, bytes]]) -> None:
    """Write chunk objects straight into their files under ``base``, in place.

    zarr's ``LocalStore`` writes each object to a temporary file and renames it into place, from
    its I/O loop's thread pool: two directory updates and two hand-offs per chunk, which at
    ~128 KB chunks (~11,000 files for 90 M values) cost as much as the encoding. The rename
    guards a reader from a half-written chunk; a store is not read before its completion block
    is written, after every chunk, so in place is as safe here and the file is the same.
    """
    if not base.is_dir():  # made again, its chunks would stand in a store removed meanwhile
        raise LayoutError(
            f"The array directory {base} is gone: its store was removed or replaced while this "
            "write ran. Nothing was written; write the store again."
        )
    made: set[Path] = set()
    for key, blob in objects:
        path = base / key
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        with open(path, "wb") as file:
            file.write(blob)


async def gather(awaitables: list[Any], alongside: Any = None) -> list[Any]:
    """Await all, at most zarr's ``async.concurrency`` at a time, as zarr itself does: an object
    store answers a few dozen requests in flight faster than a thousand at once. ``alongside``,
    a coroutine whose result is not wanted, runs in the same batch."""
    limit = asyncio.Semaphore(max(int(zarr.config.get("async.concurrency") or 10), 1))

    async def bounded(awaitable: Any) -> Any:
        async with limit:
            return await awaitable

    if alongside is None:
        return list(await asyncio.gather(*(bounded(a) for a in awaitables)))
    found, _ = await asyncio.gather(asyncio.gather(*(bounded(a) for a in awaitables)), alongside)
    return list(found)


async def fetch(path: Any, prototype: Any) -> Any:
    """One chunk object, or None when the store says it does not exist (zarr's fill value)."""
    return await fetched(path.get(prototype), path)


async def fetched(request: Any, what: Any) -> Any:
    """``request`` awaited; a store failure becomes a :class:`FetchError` naming ``what``.

    Decoding errors (zarr raises ``RuntimeError`` or ``ValueError``) pass through unchanged.
    """
    try:
        return await request
    except (RuntimeError, ValueError):
        raise
    except PermissionError as refused:
        raise FetchError(
            f"Could not fetch {what}: access denied ({refused}). The object store would not let "
            "these credentials read it, so the read stopped rather than take zeros for it; "
            "retrying will not help. Give credentials that may read the whole store."
        ) from refused
    except Exception as failed:
        raise FetchError(
            f"Could not fetch {what} ({type(failed).__name__}: {failed}). The read stopped "
            "rather than take zeros for it; the store may be unreachable or overloaded, so "
            "retry, or raise the store's retry settings (storage_options)."
        ) from failed


async def done(value: bytes) -> bytes:
    """``value``, as a fetch that has already happened."""
    return value


def read_file(path: Path) -> bytes | None:
    """A local chunk file's bytes, or None when it does not exist (zarr's fill value)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as failed:
        raise FetchError(
            f"Could not read {path} ({failed}). The read stopped rather than take zeros for it."
        ) from failed
