"""Opening the root group of a store: a local path, a URL with ``storage_options``, a store object.

One async core, driven from synchronous code by zarr's own I/O loop (:func:`run`, from
:mod:`sporadik_dask.store.zarr_adapter`), so every entry point also works from inside a running
event loop (a notebook cell).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from typing import Any, Literal

import zarr
import zarr.api.asynchronous as zarr_async
from zarr.errors import GroupNotFoundError
from zarr.storage import StoreLike, StorePath

from sporadik_dask.format.errors import SporadikError, StoreAccessError, StoreNotFoundError
from sporadik_dask.store.zarr_adapter import AsyncGroup, run

__all__ = [
    "StoreLike",
    "access_denied",
    "bucket_of",
    "location_of",
    "missing_bucket",
    "open_group",
    "open_group_async",
    "option_typo",
    "read_options",
    "refuse_dot_segments",
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


def refuse_dot_segments(store: StoreLike) -> None:
    """Refuse a URL with a ``.`` or ``..`` path segment (``s3://b/a/../x.zarr``).

    An object store has no directories: fsspec keeps such a key as it is, so a write would land
    under a prefix that holds ``..`` literally, where a reader given the tidy URL never looks.
    """
    if not isinstance(store, str) or "://" not in store:
        return
    scheme, _, path = store.partition("://")
    segments = path.split("/")
    if "." in segments or ".." in segments:
        tidy = f"{scheme}://{posixpath.normpath(path).lstrip('/')}"
        raise SporadikError(
            f"The URL {store} has a '.' or '..' segment: an object store has no directories, so "
            "it would name a key holding the dots as they are, not the location it seems to, "
            f"and readers of the tidy URL would not find it. Pass {tidy} if that is the one meant."
        )


#: The message of a filesystem that was given a keyword it does not take (a typo in options).
_UNKNOWN_OPTION = re.compile(r"unexpected keyword argument '([^']+)'")


def bucket_of(store: StoreLike) -> str | None:
    """The bucket (or container) of a URL, for messages."""
    if isinstance(store, str) and "://" in store:
        return store.partition("://")[2].split("/", 1)[0] or None
    return None


async def missing_bucket(store: StoreLike, storage_options: dict[str, Any] | None) -> bool:
    """Whether ``store`` is a URL whose bucket does not exist (one request, on a failure only)."""
    bucket = bucket_of(store)
    if bucket is None or not isinstance(store, str):
        return False
    try:
        import fsspec

        fs = fsspec.filesystem(store.partition("://")[0], **(storage_options or {}))
        return not bool(fs.exists(bucket))
    except Exception:  # the check only words the message; the original failure is raised
        return False


def access_denied(
    store: StoreLike, error: BaseException, verb: Literal["read", "write"]
) -> StoreAccessError | None:
    """The error to raise for an object store refusing these credentials, if it was that.

    s3fs turns S3's ``AccessDenied`` (403) into a bare ``PermissionError("Access Denied")``, which
    names neither the URL nor the bucket, so a user with several buckets or profiles cannot tell
    which one to fix. A local file's ``PermissionError`` already names its path: it passes.
    """
    bucket = bucket_of(store)
    if not isinstance(error, PermissionError) or bucket is None:
        return None
    return StoreAccessError(
        f"Access denied: the object store would not let these credentials {verb} "
        f"{location_of(store)} (bucket {bucket!r}; {error}). Nothing there was reached, so "
        "nothing says it is missing or damaged, and retrying will not help. Give credentials "
        f"that may {verb} it (key and secret, or a profile, in storage_options, or in the "
        "environment), or anon=True for a public bucket."
    )


def option_typo(store: StoreLike, error: BaseException) -> SporadikError | None:
    """The error to raise for a filesystem refusing one of ``storage_options``' keys, if it was
    that: the store is then unreachable, not corrupt."""
    found = _UNKNOWN_OPTION.search(str(error)) if isinstance(error, TypeError) else None
    if found is None:
        return None
    return SporadikError(
        f"storage_options for {location_of(store)} has the key {found.group(1)!r}, which the "
        f"filesystem does not take ({error}): it was not reached at all. Check the key's "
        "spelling against the filesystem's options (s3fs: anon, key, secret, endpoint_url, "
        "client_kwargs, ...)."
    )


async def open_group_async(
    store: StoreLike,
    *,
    mode: Mode = "r",
    storage_options: dict[str, Any] | None = None,
) -> AsyncGroup:
    """The root group at ``store``, refusing a location that holds nothing."""
    if isinstance(store, os.PathLike):
        store = os.fspath(store)
    refuse_dot_segments(store)
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
    except PermissionError as refused:
        raise (
            access_denied(store, refused, "read" if mode == "r" else "write") or refused
        ) from refused
    except (FileNotFoundError, GroupNotFoundError, KeyError) as missing:
        if await missing_bucket(store, storage_options):
            raise StoreNotFoundError(
                f"No store at {location_of(store)}: its bucket {bucket_of(store)!r} does not "
                "exist (or these credentials cannot see it). Check the bucket's name, and "
                "endpoint_url in storage_options for a server other than AWS."
            ) from missing
        raise StoreNotFoundError(
            f"No zarr v3 group at {location_of(store)}: a sparse store is a zarr v3 group whose "
            "attributes carry the block. Check the path or URL (and storage_options for a remote "
            "store)."
        ) from missing
    except (ValueError, TypeError, AttributeError) as unreadable:
        if isinstance(unreadable, SporadikError):
            raise
        typo = option_typo(store, unreadable)
        if typo is not None:
            raise typo from unreadable
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
