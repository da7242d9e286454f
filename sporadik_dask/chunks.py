"""Writing and reading whole zarr chunks of 1-D arrays, encoded and decoded here.

zarr's own ``array[a:b] = values`` spends about 1 ms of Python per chunk holding the GIL, so two
threads write no faster than one (measured: 18 M int32 in 32,768-element chunks, 0.55 s alone and
no gain from a second thread), while encoding the same chunks with the same codec takes 0.02 s.
The arrays here carry only the codecs this package chose (``bytes``, then optionally ``zstd``), so
their chunks are encoded with those codecs' own numcodecs implementation and stored in one batch;
any other codec chain falls back to zarr. Tests compare the objects byte for byte with zarr's.

Reads go the same way: only the fetches run on zarr's I/O loop, all of them in one batch; decoding
happens in the calling thread, so dask's threads decode in parallel rather than queueing behind
one event loop (zarr decodes a chunk per executor hop, ~1 ms each, measured on 18 M values).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.codecs.bytes import Endian

from sporadik_dask.errors import FetchError, LayoutError
from sporadik_dask.zarr_adapter import async_array, buffer_prototype, chunk_key, run, zstd_codec

__all__ = ["read_chunks", "write_chunks"]

Encoder = Callable[[npt.NDArray[Any]], bytes]


def _compressors(array: zarr.Array[Any]) -> list[Any] | None:
    """The numcodecs compressors after a little-endian ``bytes`` codec, if that is the chain."""
    codecs = list(array.metadata.codecs)  # type: ignore[union-attr]
    serializer = codecs.pop(0)
    if not isinstance(serializer, BytesCodec) or serializer.endian not in (None, Endian.little):
        return None
    if not all(isinstance(codec, ZstdCodec) for codec in codecs):
        return None
    return [zstd_codec(codec) for codec in codecs]


def _encoder(array: zarr.Array[Any]) -> Encoder | None:
    """How to encode one whole chunk of ``array``, if its codecs are ones this knows exactly."""
    compressors = _compressors(array)
    if compressors is None:
        return None
    little = np.dtype(array.dtype).newbyteorder("<")

    def encode(values: npt.NDArray[Any]) -> bytes:
        encoded: Any = values.astype(little, copy=False).tobytes()
        for compressor in compressors:
            encoded = compressor.encode(encoded)
        return bytes(encoded)

    return encode


def write_chunks(array: zarr.Array[Any], start: int, values: npt.NDArray[Any]) -> None:
    """Write ``values`` at ``start``: whole chunks, the last one possibly ending the array.

    1. Cut ``values`` at chunk edges; pad a final partial chunk with the fill value (0), as zarr
       stores every chunk at full size.
    2. Skip a chunk that holds only the fill value, as zarr does by default, so the objects are
       exactly the ones zarr would write.
    3. Encode the rest and store them in one batch.
    """
    chunk = int(array.chunks[0])
    stop = start + values.shape[0]
    encode = _encoder(array)
    if encode is None or start % chunk or (stop % chunk and stop != array.shape[0]):
        array[start:stop] = values
        return
    prototype = buffer_prototype()
    writes = []
    for first in range(start, stop, chunk):
        piece = values[first - start : first - start + chunk]
        if not np.any(piece):
            continue
        if piece.shape[0] < chunk:
            piece = np.concatenate([piece, np.zeros(chunk - piece.shape[0], dtype=piece.dtype)])
        key = chunk_key(array, first // chunk)
        writes.append((array.store_path / key).set(prototype.buffer.from_bytes(encode(piece))))
    if writes:
        run(_gather(writes))


async def _gather(awaitables: list[Any]) -> list[Any]:
    """Await all, at most zarr's ``async.concurrency`` at a time, as zarr itself does: an object
    store answers a few dozen requests in flight faster than a thousand at once."""
    limit = asyncio.Semaphore(max(int(zarr.config.get("async.concurrency") or 10), 1))

    async def bounded(awaitable: Any) -> Any:
        async with limit:
            return await awaitable

    return list(await asyncio.gather(*(bounded(a) for a in awaitables)))


async def _fetch(path: Any, prototype: Any) -> Any:
    """One chunk object, or None when the store says it does not exist (zarr's fill value)."""
    return await _fetched(path.get(prototype), path)


async def _fetched(fetch: Any, what: Any) -> Any:
    """``fetch`` awaited; a store failure becomes a :class:`FetchError` naming ``what``.

    Decoding errors (zarr raises ``RuntimeError`` or ``ValueError``) pass through unchanged.
    """
    try:
        return await fetch
    except (RuntimeError, ValueError):
        raise
    except Exception as failed:
        raise FetchError(
            f"Could not fetch {what} ({type(failed).__name__}: {failed}). The read stopped "
            "rather than take zeros for it; the store may be unreachable or overloaded, so "
            "retry, or raise the store's retry settings (storage_options)."
        ) from failed


def read_chunks(
    requests: list[tuple[zarr.Array[Any], npt.NDArray[np.int64]]],
) -> list[list[npt.NDArray[Any]]]:
    """Whole chunks of several 1-D arrays, fetched in one batch: for each ``(array, chunk ids)``,
    the decoded chunks in the order asked (a missing chunk is the fill value, 0)."""
    local = _local_files(requests)
    if local is not None:
        return local
    fetches: list[Any] = []
    plans = []
    for array, ids in requests:
        compressors = _compressors(array)
        plans.append(compressors)
        if compressors is None:  # zarr reads and decodes these itself
            chunk = int(array.chunks[0])
            fetches += [
                _fetched(
                    async_array(array).getitem(slice(int(i) * chunk, (int(i) + 1) * chunk)),
                    f"chunk {int(i)} of {array.path}",
                )
                for i in ids
            ]
        else:
            prototype = buffer_prototype()
            fetches += [_fetch(array.store_path / chunk_key(array, int(i)), prototype) for i in ids]
    try:
        fetched = run(_gather(fetches)) if fetches else []
    except (RuntimeError, ValueError) as broken:  # zarr's own decoding, for other codecs
        if isinstance(broken, (LayoutError, FetchError)):  # FetchError is a ValueError too
            raise
        raise LayoutError(
            f"A chunk cannot be decoded ({type(broken).__name__}: {broken}); the object is "
            "truncated or corrupt, and its values are unknown. Write it again."
        ) from broken
    jobs = []
    at = 0
    for (array, ids), compressors in zip(requests, plans, strict=True):
        jobs += [(array, item, compressors) for item in fetched[at : at + len(ids)]]
        at += len(ids)
    return _per_request(_map(lambda job: _decoded(*job), jobs), requests)


#: Chunks a read decodes before it spreads decoding over threads (zstd releases the GIL).
PARALLEL_DECODE = 16


def _per_request(decoded: list[Any], requests: list[tuple[Any, Any]]) -> list[list[Any]]:
    """Decoded chunks, in request order, cut back into one list per ``(array, chunk ids)``."""
    results, at = [], 0
    for _, ids in requests:
        results.append(decoded[at : at + len(ids)])
        at += len(ids)
    return results


def _local_files(
    requests: list[tuple[zarr.Array[Any], npt.NDArray[np.int64]]],
) -> list[list[npt.NDArray[Any]]] | None:
    """The same read from a local directory, each chunk read and decoded by one thread.

    Files need no event loop: a thread that opens, reads and decodes a chunk in one step costs
    a fraction of an asyncio fetch, a hand-off and a decode, which dominates for 128 KB chunks.
    None when any array is not a local one in codecs this package decodes.
    """
    from zarr.storage import LocalStore

    jobs = []
    for array, ids in requests:
        store, compressors = array.store_path.store, _compressors(array)
        if type(store) is not LocalStore or compressors is None:  # a subclass may hook reads
            return None
        base = Path(store.root) / array.store_path.path
        jobs += [(array, base / chunk_key(array, int(i)), compressors) for i in ids]
    decoded = _map(lambda job: _decoded(job[0], _read_file(job[1]), job[2]), jobs)
    return _per_request(decoded, requests)


def _read_file(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as failed:
        raise FetchError(
            f"Could not read {path} ({failed}). The read stopped rather than take zeros for it."
        ) from failed


def _map(function: Callable[[Any], Any], jobs: list[Any]) -> list[Any]:
    """``function`` over ``jobs`` on every core when there are many, in order."""
    if len(jobs) < PARALLEL_DECODE:
        return [function(job) for job in jobs]
    from concurrent.futures import ThreadPoolExecutor

    workers = os.cpu_count() or 1
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(function, jobs, chunksize=max(len(jobs) // (4 * workers), 1)))


def _decoded(array: zarr.Array[Any], item: Any, compressors: list[Any] | None) -> Any:
    if compressors is None:
        return np.asarray(item)
    chunk = int(array.chunks[0])
    dtype = np.dtype(array.dtype).newbyteorder("<")
    if item is None:
        return np.zeros(chunk, dtype=array.dtype)
    decoded: Any = item if isinstance(item, bytes) else item.to_bytes()
    try:
        for compressor in reversed(compressors):
            decoded = compressor.decode(decoded)
        values = np.frombuffer(decoded, dtype=dtype)
    except Exception as broken:  # numcodecs raises RuntimeError, ValueError, ...
        raise LayoutError(
            f"A chunk of {array.path} cannot be decoded ({type(broken).__name__}: {broken}); "
            "the object is truncated or corrupt, and its values are unknown. Write it again."
        ) from broken
    if values.shape != (chunk,):
        raise LayoutError(
            f"A chunk of {array.path} decodes to {values.shape[0]} values, not {chunk}; the "
            "object is truncated or corrupt. Write it again."
        )
    return values
