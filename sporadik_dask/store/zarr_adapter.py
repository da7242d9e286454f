"""Every name this package takes from zarr's internals, in one place.

zarr-python keeps its async core (``zarr.core``) and some codec state private, and may move them in
any release. The package needs a few of them: the I/O loop that drives the async core from
synchronous code (and works inside a running event loop), the async group and array types that
open and describe a store in one batch, the buffer prototype for raw chunk objects, the numcodecs
objects inside ``ZstdCodec`` and ``BloscCodec`` (to encode and decode chunks without zarr's
per-chunk overhead), zarr's resolution of a store-like into a store path, and the crc32c
checksum zarr's sharding codec puts after a shard's index (``google_crc32c``, a dependency of
zarr's rather than of this package). Each is imported or reached here only, and
``tests/store/test_zarr_adapter.py`` checks every one, so a zarr upgrade that moves one fails that
test by name rather than somewhere deep in a read.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

import zarr
from zarr.codecs import BloscCodec, ZstdCodec
from zarr.core.array import AsyncArray
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.core.group import AsyncGroup
from zarr.core.sync import sync
from zarr.storage import StoreLike, StorePath
from zarr.storage._common import make_store_path

__all__ = [
    "AsyncArray",
    "AsyncGroup",
    "Buffer",
    "BufferPrototype",
    "async_array",
    "blosc_codec",
    "buffer_prototype",
    "chunk_key",
    "crc32c",
    "make_writable_store_path",
    "metadata_document",
    "resolve_store_path",
    "run",
    "zstd_codec",
]

_T = TypeVar("_T")


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` on zarr's I/O loop and wait; safe inside a running event loop."""
    return sync(coro)


def buffer_prototype() -> BufferPrototype:
    """zarr's default (CPU) buffer prototype, for reading and writing raw chunk objects."""
    return default_buffer_prototype()


def async_array(array: zarr.Array[Any]) -> AsyncArray[Any]:
    """The async array under a synchronous one, to batch its reads on zarr's I/O loop."""
    return array._async_array


def chunk_key(array: zarr.Array[Any] | AsyncArray[Any], chunk: int) -> str:
    """The key of chunk ``chunk`` of a 1-D array, relative to the array (``c/3``)."""
    return array.metadata.encode_chunk_key((chunk,))


def crc32c(data: bytes) -> bytes:
    """The 4-byte little-endian crc32c checksum zarr's ``Crc32cCodec`` appends to ``data``."""
    import google_crc32c

    return int(google_crc32c.value(data)).to_bytes(4, "little")


def metadata_document(array: zarr.Array[Any]) -> bytes:
    """The array's ``zarr.json`` as zarr would write it now."""
    return array.metadata.to_buffer_dict(default_buffer_prototype())["zarr.json"].to_bytes()


def blosc_codec(codec: BloscCodec) -> Any:
    """The numcodecs ``Blosc`` object a ``BloscCodec`` encodes with, configured as the codec is
    (its ``typesize`` included, so a typed chunk and zarr's raw bytes encode alike)."""
    return codec._blosc_codec


def zstd_codec(codec: ZstdCodec) -> Any:
    """The numcodecs ``Zstd`` object a ``ZstdCodec`` encodes with, configured as the codec is."""
    return codec._zstd_codec


async def resolve_store_path(
    store: StoreLike, *, storage_options: dict[str, Any] | None = None
) -> StorePath:
    """zarr's own resolution of a path, URL or store object into a read-only store path."""
    return await make_store_path(store, mode="r", storage_options=storage_options)


async def make_writable_store_path(
    store: StoreLike, *, storage_options: dict[str, Any] | None = None
) -> StorePath:
    """zarr's own resolution of a path, URL or store object into a writable store path, which
    (unlike opening a group with ``mode="w"``) deletes nothing there.

    A local path's store is left unopened, as opening makes its directory: the first write
    through it makes the directory, not the planning of a write that may never run. Its path
    is resolved: through a symbolic link, the store replaced is the one the link names (zarr
    cannot delete a link's contents, and a store left half-replaced would be lost).
    """
    import os

    from zarr.storage import LocalStore

    if isinstance(store, (str, os.PathLike)) and "://" not in os.fspath(store):
        return StorePath(LocalStore(os.path.realpath(store), read_only=False), "")
    return await make_store_path(store, mode="a", storage_options=storage_options)
