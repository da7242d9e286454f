"""Opening the root group of a store: a local path, a URL with ``storage_options``, a store object.

One async core, driven from synchronous code by zarr's own I/O loop (:func:`run`, from
:mod:`sporadik_dask.store.zarr_adapter`), so every entry point also works from inside a running
event loop (a notebook cell).
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

import zarr
import zarr.api.asynchronous as zarr_async
from zarr.errors import GroupNotFoundError
from zarr.storage import StoreLike, StorePath

from sporadik_dask.format.errors import SporadikError, StoreNotFoundError
from sporadik_dask.store.zarr_adapter import AsyncGroup, run

__all__ = [
    "StoreLike",
    "location_of",
    "open_group",
    "open_group_async",
    "read_options",
    "root_document",
    "run",
]

Mode = Literal["r", "r+", "a", "w", "w-"]


def location_of(store: StoreLike) -> str:
    """A short name for ``store`` to put in messages."""
    if isinstance(store, (str, os.PathLike)):
        return os.fspath(store)
    return repr(store)


#: URL schemes fsspec serves with ``s3fs``.
_S3_SCHEMES = ("s3://", "s3a://")


def read_options(store: StoreLike, storage_options: dict[str, Any] | None) -> dict[str, Any] | None:
    """``storage_options`` for reading ``store``, with ``s3fs``'s ``max_concurrency`` 1 unless set.

    ``s3fs`` (2025 on) asks an object's size (a HEAD) before every whole-object GET, to split
    objects past its block size (50 MiB) into concurrent ranges when ``max_concurrency`` > 1 (its
    default is 10). Every document and unsharded chunk this package reads is far smaller, so the
    HEAD only adds a round trip in front of each GET: at 1, a read is one request.
    """
    if not (isinstance(store, str) and store.startswith(_S3_SCHEMES)):
        return storage_options
    return {"max_concurrency": 1, **(storage_options or {})}


async def open_group_async(
    store: StoreLike,
    *,
    mode: Mode = "r",
    storage_options: dict[str, Any] | None = None,
) -> AsyncGroup:
    """The root group at ``store``, refusing a location that holds nothing."""
    if isinstance(store, os.PathLike):
        store = os.fspath(store)
    if mode == "r":
        storage_options = read_options(store, storage_options)
    try:
        return await zarr_async.open_group(
            store=store,
            mode=mode,
            storage_options=storage_options,
            zarr_format=3,
            use_consolidated=False,
        )
    except (FileNotFoundError, GroupNotFoundError, KeyError) as missing:
        raise StoreNotFoundError(
            f"No zarr v3 group at {location_of(store)}: a sparse store is a zarr v3 group whose "
            "attributes carry the block. Check the path or URL (and storage_options for a remote "
            "store)."
        ) from missing
    except (ValueError, TypeError, AttributeError) as unreadable:
        if isinstance(unreadable, SporadikError):
            raise
        raise SporadikError(
            f"The root document of {location_of(store)} cannot be read as a zarr v3 group "
            f"({type(unreadable).__name__}: {unreadable}); the store is corrupt or not zarr v3."
        ) from unreadable


async def root_document(where: StorePath) -> dict[str, Any] | None:
    """The root's ``zarr.json`` at ``where``, parsed; None where there is none, or it is not a
    JSON object. One request, whatever the store."""
    raw = await (where / "zarr.json").get()
    try:
        document = json.loads(raw.to_bytes()) if raw is not None else None
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def open_group(
    store: StoreLike,
    *,
    mode: Mode = "r",
    storage_options: dict[str, Any] | None = None,
) -> zarr.Group:
    """Synchronous :func:`open_group_async`."""
    return zarr.Group(run(open_group_async(store, mode=mode, storage_options=storage_options)))
