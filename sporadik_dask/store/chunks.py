"""Whole chunks of 1-D arrays written and read in one batch, encoded and decoded outside zarr.

Writes encode whole chunks with the array's own codecs (:mod:`~sporadik_dask.store.codecs`) and
store them in one batch (:mod:`~sporadik_dask.store.objects`), a shard a whole object
(:mod:`~sporadik_dask.store.shards`). Reads go the same way: only the fetches run on zarr's I/O
loop, all of them in one batch; decoding happens in the calling thread, so dask's threads decode
in parallel rather than queueing behind one event loop (zarr decodes a chunk per executor hop).
Inner chunks of a sharded array are read by byte range
(:mod:`~sporadik_dask.store.ranges`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr

from sporadik_dask.format.errors import FetchError, LayoutError
from sporadik_dask.store.codecs import (
    Encoding,
    compressors_of,
    decode_chunk,
    decode_chunk_into,
    encoder_of,
)
from sporadik_dask.store.objects import (
    fetch,
    fetched,
    gather,
    local_directory,
    read_file,
    store_objects,
)
from sporadik_dask.store.parallel import map_jobs
from sporadik_dask.store.ranges import cut, plan_ranges
from sporadik_dask.store.shards import (
    IndexRequest,
    prefetched,
    shard_indexes,
    shard_of,
    unknown,
    write_shards,
)
from sporadik_dask.store.zarr_adapter import async_array, buffer_prototype, chunk_key, crc32c, run

__all__ = ["read_chunks", "read_joined", "read_visited", "write_chunks", "write_constant"]

#: What a visited read hands each decoded chunk to: (request, chunk's rank among its ids, values).
Visit = Callable[[int, int, npt.NDArray[Any]], None]
#: What a read does with its chunks' jobs, given the requests they came from.
Finish = Callable[[list[Any], list[tuple[zarr.Array[Any], npt.NDArray[np.int64]]]], Any]


def write_chunks(array: zarr.Array[Any], start: int, values: npt.NDArray[Any]) -> None:
    """Write ``values`` at ``start``: whole chunks, the last one possibly ending the array.

    1. Cut ``values`` at chunk edges; pad a final partial chunk with the fill value (0), as zarr
       stores every chunk at full size.
    2. Skip a chunk that holds only the fill value, as zarr does by default, so the objects are
       exactly the ones zarr would write.
    3. Encode the rest (a chunk of one repeated value once: :class:`~sporadik_dask.store.
       codecs.Encoding`) and store them: straight into their files in a local directory, in one
       batch on zarr's I/O loop in any other store.
    """
    chunk = int(array.chunks[0])
    stop = start + values.shape[0]
    sharding = shard_of(array)
    if sharding is not None:
        write_shards(array, sharding, start, values)
        return
    encode = encoder_of(array)
    if encode is None or start % chunk or (stop % chunk and stop != array.shape[0]):
        array[start:stop] = values
        return
    encoding = Encoding(encode, chunk)
    objects = []
    for first in range(start, stop, chunk):
        blob = encoding(values[first - start : first - start + chunk])
        if blob is not None:
            objects.append((chunk_key(array, first // chunk), blob))
    store_objects(array, objects)


def write_constant(array: zarr.Array[Any], start: int, stop: int, value: Any) -> None:
    """Write ``value`` at every element of ``[start, stop)``, bounds as :func:`write_chunks`
    takes them: one chunk encoded, and one object made of it stored as every whole chunk (or
    shard), the same bytes :func:`write_chunks` stores.

    An ``indptr`` over a genome's empty stretch is one offset repeated for 10^9 positions: made
    and encoded chunk by chunk, it cost more than the values' own sort.
    """
    sharding = shard_of(array)
    chunk = sharding.chunk if sharding is not None else int(array.chunks[0])
    unit = sharding.shard if sharding is not None else chunk
    whole = start + (stop - start) // unit * unit
    encode = encoder_of(array, sharding.compressors if sharding is not None else None)
    if encode is None or whole == start or start % unit or (stop % unit and stop != array.shape[0]):
        write_chunks(array, start, np.full(stop - start, value, dtype=array.dtype))
        return
    blob = Encoding(encode, chunk)(np.full(chunk, value, dtype=array.dtype))
    if blob is not None and sharding is not None:  # every inner chunk this one, in order
        sizes = np.full(sharding.per_shard, len(blob), dtype="<u8")
        table = np.stack([np.cumsum(sizes) - sizes, sizes], axis=1).tobytes()
        blob = blob * sharding.per_shard + table + crc32c(table)
    if blob is not None:
        keys = range(start // unit, whole // unit)
        store_objects(array, [(chunk_key(array, k), blob) for k in keys])
    if whole < stop:  # the array's last chunk (or shard), padded
        write_chunks(array, whole, np.full(stop - whole, value, dtype=array.dtype))


def read_chunks(
    requests: list[tuple[zarr.Array[Any], npt.NDArray[np.int64]]],
    *,
    next_arrays: Sequence[zarr.Array[Any]] = (),
) -> list[list[npt.NDArray[Any]]]:
    """Whole chunks of several 1-D arrays, fetched in one batch: for each ``(array, chunk ids)``,
    the decoded chunks in the order asked (a missing chunk is the fill value, 0).

    Inner chunks of a sharded array are fetched by byte range:

    1. The index of every shard not read before by this array object, all in one batch: a
       suffix request, or the whole shard when its values take at most
       :data:`~sporadik_dask.store.shards.WHOLE_SHARD` bytes (the object then holds the index
       and the chunks, so no second request follows).
    2. Every needed range, merged across small gaps, in one batch with every unsharded chunk.

    ``next_arrays`` are arrays the caller reads next (``data`` and ``indices`` after ``indptr``):
    when none of their indexes is known and they have at most
    :data:`~sporadik_dask.store.shards.PREFETCH_SHARDS` shards, all their indexes are fetched in
    this call's first batch, so the next read is ranges alone.
    """
    decoded: list[list[npt.NDArray[Any]]] = _read(requests, next_arrays, _decoded_lists)
    return decoded


def read_joined(
    requests: list[tuple[zarr.Array[Any], npt.NDArray[np.int64]]],
    *,
    next_arrays: Sequence[zarr.Array[Any]] = (),
    reused: int | None = None,
) -> list[npt.NDArray[Any]]:
    """:func:`read_chunks`, each request's chunks joined into one array: chunk ``k`` of those
    asked at elements ``[k * chunk, (k + 1) * chunk)`` (past the array's end, unspecified).

    Each chunk is decoded by its thread straight into its place, so no list of decoded chunks is
    held beside the join, nor copied into it afterwards, which halves what a fetch adds to the
    peak (docs/benchmarks.md, "Numbers behind the code's choices"). Request ``reused`` is joined
    into a buffer the calling thread keeps (:func:`_reused_table`), valid until its next join
    into it: for a table that never leaves the caller's read.
    """

    def finish(
        jobs: list[Any], asked: list[tuple[zarr.Array[Any], npt.NDArray[np.int64]]]
    ) -> list[npt.NDArray[Any]]:
        return _joined(jobs, asked, reused)

    joined: list[npt.NDArray[Any]] = _read(requests, next_arrays, finish)
    return joined


def read_visited(
    requests: list[tuple[zarr.Array[Any], npt.NDArray[np.int64]]], visit: Visit
) -> None:
    """:func:`read_chunks`, each chunk handed to ``visit(request, k, values)`` as it is decoded
    (chunk ``k`` of request ``request``), on the thread that decoded it.

    ``values`` is a chunk each thread decodes into again and again, valid during the call only:
    nothing is joined or kept, so a read taking a few values from each of many chunks holds the
    values it takes and a chunk a thread, not every chunk it touched.
    """
    _read(requests, (), lambda jobs, asked: _visited(jobs, asked, visit))


#: Each decoding thread's scratch chunks, by dtype and length.
_scratch = threading.local()


def _scratch_chunk(array: zarr.Array[Any]) -> npt.NDArray[Any]:
    found: dict[tuple[str, int], npt.NDArray[Any]] = _scratch.__dict__.setdefault("chunks", {})
    key = (np.dtype(array.dtype).str, int(array.chunks[0]))
    if key not in found:
        found[key] = np.empty(key[1], dtype=array.dtype)
    return found[key]


def _visited(
    jobs: list[Any], requests: list[tuple[zarr.Array[Any], npt.NDArray[np.int64]]], visit: Visit
) -> None:
    sites = [(r, k) for r, (_, ids) in enumerate(requests) for k in range(len(ids))]

    def one(pair: tuple[Any, tuple[int, int]]) -> None:
        (array, item, compressors), (request, k) = pair
        if isinstance(item, Path):
            item = read_file(item)
        values = _scratch_chunk(array)
        if not decode_chunk_into(array, item, compressors, values):
            values = decode_chunk(array, item, compressors)
        visit(request, k, values)

    map_jobs(one, list(zip(jobs, sites, strict=True)))


def _read(
    requests: list[tuple[zarr.Array[Any], npt.NDArray[np.int64]]],
    next_arrays: Sequence[zarr.Array[Any]],
    finish: Finish,
) -> Any:
    """The read of :func:`read_chunks`: ``(array, fetched object or local path, compressors)``
    for every chunk asked, in order, handed to ``finish`` to decode."""
    local = _local_files(requests)
    if local is not None:
        return finish(local, requests)
    shardings = [shard_of(array) for array, _ in requests]
    needed = [
        IndexRequest(array, ids, sharding)
        for (array, ids), sharding in zip(requests, shardings, strict=True)
    ]
    ahead = prefetched(next_arrays)
    whole: dict[tuple[int, int], Any] = {}
    if unknown(needed):
        whole = run(shard_indexes(needed + ahead))
        ahead = []
    fetches: list[Any] = []
    plans: list[list[Any] | None] = []
    placements: list[list[tuple[int, int, int] | None] | None] = []
    for (array, ids), sharding in zip(requests, shardings, strict=True):
        if sharding is not None:
            plans.append(sharding.compressors)
            placements.append(plan_ranges(array, ids, sharding, fetches, whole))
            continue
        placements.append(None)
        compressors = compressors_of(array)
        plans.append(compressors)
        if compressors is None:  # zarr reads and decodes these itself
            chunk = int(array.chunks[0])
            fetches += [
                fetched(
                    async_array(array).getitem(slice(int(i) * chunk, (int(i) + 1) * chunk)),
                    f"chunk {int(i)} of {array.path}",
                )
                for i in ids
            ]
        else:
            prototype = buffer_prototype()
            fetches += [fetch(array.store_path / chunk_key(array, int(i)), prototype) for i in ids]
    try:
        objects = run(gather(fetches, shard_indexes(ahead))) if fetches or ahead else []
    except (RuntimeError, ValueError) as broken:  # zarr's own decoding, for other codecs
        if isinstance(broken, (LayoutError, FetchError)):  # FetchError is a ValueError too
            raise
        raise LayoutError(
            f"A chunk cannot be decoded ({type(broken).__name__}: {broken}); the object is "
            "truncated or corrupt, and its values are unknown. Write it again."
        ) from broken
    jobs = []
    at = 0
    views: dict[int, memoryview] = {}
    for (array, ids), compressors, placed in zip(requests, plans, placements, strict=True):
        if placed is not None:
            jobs += [(array, cut(objects, views, where, array), compressors) for where in placed]
            continue
        jobs += [(array, item, compressors) for item in objects[at : at + len(ids)]]
        at += len(ids)
    return finish(jobs, requests)


def _decoded_lists(
    jobs: list[Any], requests: list[tuple[zarr.Array[Any], npt.NDArray[np.int64]]]
) -> list[list[npt.NDArray[Any]]]:
    return _per_request(map_jobs(lambda job: decode_chunk(*job), jobs), requests)


#: Bytes up to which a join asked to be reused (:func:`read_joined`) goes into the calling
#: thread's buffer rather than fresh memory: a region of 2 Mi positions' ``indptr`` offsets as
#: int32. A lazy read of a 1 Mb region made its 4 MB of offsets afresh each time, and held more
#: than glibc keeps between reads, so all its memory came back fresh: 2,518 page faults a read
#: again. With the offsets in a kept buffer, 2, and 9.3 ms against 12.2 ms, four processes each
#: way at a load of 4 (docs/benchmarks.md, "a region read again, its offsets as stored").
REUSED_TABLE_BYTES = 2**23

#: Each calling thread's buffer for joins asked to be reused.
_reused = threading.local()


def _reused_table(size: int, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """``size`` elements of ``dtype`` in the calling thread's buffer, grown to fit (fresh memory
    past :data:`REUSED_TABLE_BYTES`)."""
    nbytes = size * dtype.itemsize
    if nbytes > REUSED_TABLE_BYTES:
        return np.empty(size, dtype=dtype)
    held: npt.NDArray[np.uint8] | None = getattr(_reused, "buffer", None)
    if held is None or held.size < nbytes:
        held = _reused.buffer = np.empty(nbytes, dtype=np.uint8)
    table: npt.NDArray[Any] = held[:nbytes].view(dtype)
    return table


def _joined(
    jobs: list[Any],
    requests: list[tuple[zarr.Array[Any], npt.NDArray[np.int64]]],
    reused: int | None = None,
) -> list[npt.NDArray[Any]]:
    tables = [
        _reused_table(len(ids) * int(array.chunks[0]), np.dtype(array.dtype))
        if k == reused
        else np.empty(len(ids) * int(array.chunks[0]), dtype=array.dtype)
        for k, (array, ids) in enumerate(requests)
    ]
    places = [
        (table, k * int(array.chunks[0]))
        for table, (array, ids) in zip(tables, requests, strict=True)
        for k in range(len(ids))
    ]

    def place(job: Any, where: tuple[npt.NDArray[Any], int]) -> None:
        table, at = where
        array, item, compressors = job
        if isinstance(item, Path):
            item = read_file(item)
        out = table[at : at + int(array.chunks[0])]
        if not decode_chunk_into(array, item, compressors, out):
            values = decode_chunk(array, item, compressors)
            table[at : at + values.size] = values

    map_jobs(lambda pair: place(*pair), list(zip(jobs, places, strict=True)))
    return tables


def _per_request(decoded: list[Any], requests: list[tuple[Any, Any]]) -> list[list[Any]]:
    """Decoded chunks, in request order, cut back into one list per ``(array, chunk ids)``."""
    results, at = [], 0
    for _, ids in requests:
        results.append(decoded[at : at + len(ids)])
        at += len(ids)
    return results


def _local_files(
    requests: list[tuple[zarr.Array[Any], npt.NDArray[np.int64]]],
) -> list[Any] | None:
    """The same read from a local directory: its jobs, each chunk read and decoded by one thread.

    Files need no event loop: a thread that opens, reads and decodes a chunk in one step costs
    a fraction of an asyncio fetch, a hand-off and a decode, which dominates for 128 KB chunks.
    None when any array is not a local one in codecs this package decodes.
    """
    jobs = []
    for array, ids in requests:
        base, compressors = local_directory(array), compressors_of(array)
        if base is None or compressors is None:
            return None
        jobs += [(array, base / chunk_key(array, int(i)), compressors) for i in ids]
    return jobs
