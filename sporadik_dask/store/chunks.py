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

Sharded arrays (zarr's ``sharding_indexed`` codec: many inner chunks in one object, an index of
their byte ranges at its end) are written a whole shard per object in one PUT, encoded here the
way zarr encodes them, and read by byte range: each shard's index once (a suffix request, then
kept as long as the array is open), then the inner chunks a read needs, adjacent ones merged into
one ranged request when the bytes between them are fewer than :data:`COALESCE_GAP`. zarr's own
read of a sharded array fetches the index again for every inner chunk it reads.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import zarr
from zarr.abc.store import RangeByteRequest, SuffixByteRequest
from zarr.codecs import (
    BytesCodec,
    Crc32cCodec,
    ShardingCodec,
    ShardingCodecIndexLocation,
    ZstdCodec,
)
from zarr.codecs.bytes import Endian
from zarr.storage import StorePath

from sporadik_dask.format.errors import FetchError, LayoutError
from sporadik_dask.store import zstd
from sporadik_dask.store.zarr_adapter import (
    async_array,
    buffer_prototype,
    chunk_key,
    crc32c,
    run,
    zstd_codec,
)

__all__ = [
    "COALESCE_GAP",
    "COALESCE_MAX",
    "PREFETCH_SHARDS",
    "WHOLE_SHARD",
    "read_chunks",
    "read_joined",
    "shard_of",
    "writable_directory",
    "write_chunks",
    "write_constant",
]

Encoder = Callable[[npt.NDArray[Any]], bytes]
#: What a read does with its chunks' jobs, given the requests they came from.
Finish = Callable[[list[Any], list[tuple[zarr.Array[Any], npt.NDArray[np.int64]]]], Any]

#: Bytes between two inner chunks of one shard that a read fetches rather than split its request
#: there. A request costs a round trip (10-30 ms on S3) and is billed; 1 MiB moves in ~10 ms at
#: the ~100 MB/s one S3 connection streams, so fetching the gap is never slower than asking twice.
#: ``dask.config`` ``sporadik.coalesce-gap`` overrides it.
COALESCE_GAP = 1 << 20
#: Bytes one merged request may span: past it a read splits, so a scan's requests still run in
#: parallel rather than one connection streaming a whole shard (8 MiB is ~80 ms at 100 MB/s).
#: ``dask.config`` ``sporadik.coalesce-max`` overrides it.
COALESCE_MAX = 8 << 20
#: Bytes of values (uncompressed) up to which a shard whose index is not known yet is fetched
#: whole rather than its index and then a range: two requests in sequence become one. 2 MiB moves
#: in ~20 ms at the ~100 MB/s one S3 connection streams, one round trip, and compressed it is
#: fewer; ``indptr`` of 262,144 positions (int64) or 524,288 (int32) fits in one such shard.
#: ``dask.config`` ``sporadik.whole-shard`` overrides it.
WHOLE_SHARD = 2 << 20
#: Shards of the arrays a read will need next (``data`` and ``indices`` while ``indptr`` is read)
#: whose indexes are fetched with the current wave when none is known yet, so the next wave is
#: ranges alone. An index is 16 bytes per inner chunk (8 KiB at 64 MiB shards of 128 KiB chunks);
#: past this many the unneeded ones would cost more requests than the wave they save.
PREFETCH_SHARDS = 64
#: An inner chunk the shard index marks absent (the fill value): offset and length both 2**64-1.
_ABSENT = np.uint64(2**64 - 1)


def _chain(codecs: list[Any]) -> list[Any] | None:
    """The numcodecs compressors after a little-endian ``bytes`` codec, if that is the chain."""
    if not codecs:
        return None
    serializer = codecs.pop(0)
    if not isinstance(serializer, BytesCodec) or serializer.endian not in (None, Endian.little):
        return None
    if not all(isinstance(codec, ZstdCodec) for codec in codecs):
        return None
    return [zstd_codec(codec) for codec in codecs]


def _compressors(array: zarr.Array[Any]) -> list[Any] | None:
    """The numcodecs compressors of an unsharded array, if its chain is one this knows."""
    return _chain(list(array.metadata.codecs))  # type: ignore[union-attr]


@dataclass(frozen=True, slots=True)
class Sharding:
    """How a sharded array's objects are laid out, when this package reads them itself."""

    #: Elements per inner chunk (the format's chunk) and inner chunks per shard object.
    chunk: int
    per_shard: int
    #: numcodecs compressors of each inner chunk, after little-endian bytes.
    compressors: list[Any]

    @property
    def shard(self) -> int:
        """Elements per shard object."""
        return self.chunk * self.per_shard

    @property
    def index_bytes(self) -> int:
        """Length of the index at the end of every shard: offset and length per inner chunk,
        little-endian uint64, then a crc32c."""
        return 16 * self.per_shard + 4


def shard_of(array: zarr.Array[Any]) -> Sharding | None:
    """The array's sharding, if it is sharded as this package writes shards (inner chunks in
    ``bytes`` then optionally ``zstd``, the index at the end in ``bytes`` and ``crc32c``); None for
    an unsharded array or one whose shards only zarr reads."""
    codecs = list(array.metadata.codecs)  # type: ignore[union-attr]
    if len(codecs) != 1 or not isinstance(codecs[0], ShardingCodec):
        return None
    codec = codecs[0]
    index = list(codec.index_codecs)
    if (
        codec.index_location != ShardingCodecIndexLocation.end
        or len(index) != 2
        or not isinstance(index[0], BytesCodec)
        or index[0].endian not in (None, Endian.little)
        or not isinstance(index[1], Crc32cCodec)
    ):
        return None
    compressors = _chain(list(codec.codecs))
    if compressors is None or len(array.shape) != 1:
        return None
    chunk = int(codec.chunk_shape[0])
    return Sharding(chunk, int(array.shards[0]) // chunk, compressors)  # type: ignore[index]


def _encoder(array: zarr.Array[Any], compressors: list[Any] | None = None) -> Encoder | None:
    """How to encode one whole chunk of ``array``, if its codecs are ones this knows exactly."""
    if compressors is None:
        compressors = _compressors(array)
    if compressors is None:
        return None
    little = np.dtype(array.dtype).newbyteorder("<")
    steps = [zstd.encoder(compressor) for compressor in compressors]

    def encode(values: npt.NDArray[Any]) -> bytes:
        encoded: Any = np.ascontiguousarray(values.astype(little, copy=False))
        if not steps:
            raw: bytes = encoded.tobytes()
            return raw
        for step in steps:  # the first reads the array's own buffer: no copy
            encoded = step(encoded)
        return bytes(encoded)

    return encode


def write_chunks(array: zarr.Array[Any], start: int, values: npt.NDArray[Any]) -> None:
    """Write ``values`` at ``start``: whole chunks, the last one possibly ending the array.

    1. Cut ``values`` at chunk edges; pad a final partial chunk with the fill value (0), as zarr
       stores every chunk at full size.
    2. Skip a chunk that holds only the fill value, as zarr does by default, so the objects are
       exactly the ones zarr would write.
    3. Encode the rest (a chunk of one repeated value once: :class:`_Encoding`) and store them:
       straight into their files in a local directory, in one batch on zarr's I/O loop in any
       other store.
    """
    chunk = int(array.chunks[0])
    stop = start + values.shape[0]
    sharding = shard_of(array)
    if sharding is not None:
        _write_shards(array, sharding, start, values)
        return
    encode = _encoder(array)
    if encode is None or start % chunk or (stop % chunk and stop != array.shape[0]):
        array[start:stop] = values
        return
    encoding = _Encoding(encode, chunk)
    objects = []
    for first in range(start, stop, chunk):
        blob = encoding(values[first - start : first - start + chunk])
        if blob is not None:
            objects.append((chunk_key(array, first // chunk), blob))
    _store_objects(array, objects)


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
    encode = _encoder(array, sharding.compressors if sharding is not None else None)
    if encode is None or whole == start or start % unit or (stop % unit and stop != array.shape[0]):
        write_chunks(array, start, np.full(stop - start, value, dtype=array.dtype))
        return
    blob = _Encoding(encode, chunk)(np.full(chunk, value, dtype=array.dtype))
    if blob is not None and sharding is not None:  # every inner chunk this one, in order
        sizes = np.full(sharding.per_shard, len(blob), dtype="<u8")
        table = np.stack([np.cumsum(sizes) - sizes, sizes], axis=1).tobytes()
        blob = blob * sharding.per_shard + table + crc32c(table)
    if blob is not None:
        keys = range(start // unit, whole // unit)
        _store_objects(array, [(chunk_key(array, k), blob) for k in keys])
    if whole < stop:  # the array's last chunk (or shard), padded
        write_chunks(array, whole, np.full(stop - whole, value, dtype=array.dtype))


class _Encoding:
    """Whole chunks encoded, or None for a chunk of only the fill value; a chunk of one value
    repeated is encoded once per value (a stretch of ``indptr`` where no position holds any)."""

    __slots__ = ("_chunk", "_encode", "_repeated")

    def __init__(self, encode: Encoder, chunk: int) -> None:
        self._encode, self._chunk = encode, chunk
        self._repeated: dict[bytes, bytes] = {}

    def __call__(self, piece: npt.NDArray[Any]) -> bytes | None:
        if piece.shape[0] < self._chunk:
            piece = np.concatenate([piece, np.zeros(self._chunk - piece.shape[0], piece.dtype)])
        if piece[0] != piece[-1] or not np.all(piece == piece[0]):  # a NaN is never repeated
            return self._encode(piece)
        if not piece[0]:  # the fill value throughout
            return None
        value = piece[:1].tobytes()
        if value not in self._repeated:
            self._repeated[value] = self._encode(piece)
        return self._repeated[value]


def _store_objects(array: zarr.Array[Any], objects: list[tuple[str, bytes]]) -> None:
    """Store encoded chunk objects of ``array`` (keys relative to it): files when local."""
    if not objects:
        return
    base = writable_directory(array)
    if base is not None:
        _write_files(base, objects)
        return
    prototype = buffer_prototype()
    path = array.store_path
    run(_gather([(path / key).set(prototype.buffer.from_bytes(blob)) for key, blob in objects]))


def writable_directory(node: zarr.Array[Any] | StorePath) -> Path | None:
    """The directory of ``node`` (an array, or a store path) when it is in a plain local
    directory store that may be written, else None: where files may be written in place, by
    this process or any worker."""
    where = node if isinstance(node, StorePath) else node.store_path
    return None if where.store.read_only else _local_directory(where)


def _local_directory(node: zarr.Array[Any] | StorePath) -> Path | None:
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


def _write_shards(
    array: zarr.Array[Any], sharding: Sharding, start: int, values: npt.NDArray[Any]
) -> None:
    """Write whole shards at ``start``, each one object in one PUT, as zarr would encode it.

    A shard is its non-empty inner chunks (each encoded as an unsharded chunk is, a chunk of only
    the fill value left out), one after another, then the index: offset and length of each
    inner chunk (2**64-1 twice for one left out), little-endian uint64, and the index's crc32c.
    A shard of only the fill value is not written. A write that does not cover whole shards goes
    through zarr, which reads and rewrites the shards it touches.
    """
    shard = sharding.shard
    stop = start + values.shape[0]
    if start % shard or (stop % shard and stop != array.shape[0]):
        array[start:stop] = values
        return
    encode = _encoder(array, sharding.compressors)
    assert encode is not None  # shard_of found the chain
    encoding = _Encoding(encode, sharding.chunk)
    objects = []
    for first in range(start, stop, shard):
        blob = _shard_object(values[first - start : first - start + shard], sharding, encoding)
        if blob is not None:
            objects.append((chunk_key(array, first // shard), blob))
    _store_objects(array, objects)


def _shard_object(
    values: npt.NDArray[Any], sharding: Sharding, encoding: _Encoding
) -> bytes | None:
    """One shard's object, or None when it holds only the fill value."""
    chunk = sharding.chunk
    index = np.full((sharding.per_shard, 2), _ABSENT, dtype="<u8")
    parts: list[bytes] = []
    at = 0
    for k in range(sharding.per_shard):
        piece = values[k * chunk : (k + 1) * chunk]
        encoded = encoding(piece) if piece.shape[0] else None
        if encoded is None:
            continue
        index[k] = (at, len(encoded))
        at += len(encoded)
        parts.append(encoded)
    if not parts:
        return None
    table = index.tobytes()
    parts.append(table + crc32c(table))
    return b"".join(parts)


async def _gather(awaitables: list[Any], alongside: Any = None) -> list[Any]:
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
    *,
    next_arrays: Sequence[zarr.Array[Any]] = (),
) -> list[list[npt.NDArray[Any]]]:
    """Whole chunks of several 1-D arrays, fetched in one batch: for each ``(array, chunk ids)``,
    the decoded chunks in the order asked (a missing chunk is the fill value, 0).

    Inner chunks of a sharded array are fetched by byte range:

    1. The index of every shard not read before by this array object, all in one batch: a
       suffix request, or the whole shard when its values take at most :data:`WHOLE_SHARD`
       bytes (the object then holds the index and the chunks, so no second request follows).
    2. Every needed range, merged across small gaps, in one batch with every unsharded chunk.

    ``next_arrays`` are arrays the caller reads next (``data`` and ``indices`` after ``indptr``):
    when none of their indexes is known and they have at most :data:`PREFETCH_SHARDS` shards, all
    their indexes are fetched in this call's first batch, so the next read is ranges alone.
    """
    decoded: list[list[npt.NDArray[Any]]] = _read(requests, next_arrays, _decoded_lists)
    return decoded


def read_joined(
    requests: list[tuple[zarr.Array[Any], npt.NDArray[np.int64]]],
    *,
    next_arrays: Sequence[zarr.Array[Any]] = (),
) -> list[npt.NDArray[Any]]:
    """:func:`read_chunks`, each request's chunks joined into one array: chunk ``k`` of those
    asked at elements ``[k * chunk, (k + 1) * chunk)`` (past the array's end, unspecified).

    Each chunk is decoded by its thread straight into its place, so no list of decoded chunks is
    held beside the join, nor copied into it afterwards (every gene of 89.6 M values: the fetch
    raised peak RSS by 1.36 GiB as chunks and their join, by 0.69 GiB so).
    """
    joined: list[npt.NDArray[Any]] = _read(requests, next_arrays, _joined)
    return joined


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
        _IndexRequest(array, ids, sharding)
        for (array, ids), sharding in zip(requests, shardings, strict=True)
    ]
    ahead = _prefetched(next_arrays)
    whole: dict[tuple[int, int], Any] = {}
    if _unknown(needed):
        whole = run(_shard_indexes(needed + ahead))
        ahead = []
    fetches: list[Any] = []
    plans: list[list[Any] | None] = []
    placements: list[list[tuple[int, int, int] | None] | None] = []
    for (array, ids), sharding in zip(requests, shardings, strict=True):
        if sharding is not None:
            plans.append(sharding.compressors)
            placements.append(_plan_ranges(array, ids, sharding, fetches, whole))
            continue
        placements.append(None)
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
        fetched = run(_gather(fetches, _shard_indexes(ahead))) if fetches or ahead else []
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
            jobs += [(array, _cut(fetched, views, where, array), compressors) for where in placed]
            continue
        jobs += [(array, item, compressors) for item in fetched[at : at + len(ids)]]
        at += len(ids)
    return finish(jobs, requests)


def _decoded_lists(
    jobs: list[Any], requests: list[tuple[zarr.Array[Any], npt.NDArray[np.int64]]]
) -> list[list[npt.NDArray[Any]]]:
    return _per_request(_map(lambda job: _decoded(*job), jobs), requests)


def _joined(
    jobs: list[Any], requests: list[tuple[zarr.Array[Any], npt.NDArray[np.int64]]]
) -> list[npt.NDArray[Any]]:
    tables = [
        np.empty(len(ids) * int(array.chunks[0]), dtype=array.dtype) for array, ids in requests
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
            item = _read_file(item)
        out = table[at : at + int(array.chunks[0])]
        if not _decoded_into(array, item, compressors, out):
            values = _decoded(array, item, compressors)
            table[at : at + values.size] = values

    _map(lambda pair: place(*pair), list(zip(jobs, places, strict=True)))
    return tables


#: Each open array's shard indexes read so far, by the id of its async array (dropped with it):
#: a shard's index is fetched once however many reads an open reader makes.
_INDEXES: dict[int, dict[int, npt.NDArray[np.uint64] | None]] = {}


def _known_indexes(array: zarr.Array[Any]) -> dict[int, npt.NDArray[np.uint64] | None]:
    opened = async_array(array)
    key = id(opened)
    if key not in _INDEXES:
        _INDEXES[key] = {}
        weakref.finalize(opened, _INDEXES.pop, key, None)
    return _INDEXES[key]


def _prefetched(arrays: Sequence[zarr.Array[Any]]) -> list[_IndexRequest]:
    """One inner chunk per shard of each sharded array in ``arrays`` none of whose indexes is
    known yet, when it has few enough shards: requests for their indexes alone."""
    found = []
    for array in arrays:
        sharding = shard_of(array)
        if sharding is None or _known_indexes(array):
            continue
        shards = -(-int(array.shape[0]) // sharding.shard)
        if shards <= PREFETCH_SHARDS:
            ids = np.arange(shards, dtype=np.int64) * sharding.per_shard
            found.append(_IndexRequest(array, ids, sharding, whole=False))
    return found


class _IndexRequest(NamedTuple):
    """Shards whose indexes a read needs: those holding inner chunks ``ids`` of ``array``."""

    array: zarr.Array[Any]
    ids: npt.NDArray[np.int64]
    sharding: Sharding | None
    #: Whether a small shard may be fetched whole (its chunks are needed now) or only its index.
    whole: bool = True


def _unknown(requests: list[_IndexRequest]) -> bool:
    """Whether any shard the requests touch has an index this array object does not know."""
    for array, ids, sharding, _ in requests:
        if sharding is not None:
            known = _known_indexes(array)
            shards = np.unique(np.asarray(ids, dtype=np.int64) // sharding.per_shard)
            if any(int(shard) not in known for shard in shards):
                return True
    return False


async def _shard_indexes(requests: list[_IndexRequest]) -> dict[tuple[int, int], Any]:
    """Fetch the index of every shard the requests touch and this array object does not know
    yet, in one batch: a suffix range of each shard object (the index is its last bytes), or the
    whole object when its values take at most :data:`WHOLE_SHARD` bytes. Returns the whole
    objects fetched, by ``(id of the async array, shard)``, for this read to cut chunks from."""
    import dask.config

    limit = int(dask.config.get("sporadik.whole-shard", WHOLE_SHARD))
    wanted: dict[tuple[int, int], tuple[dict[int, Any], int, zarr.Array[Any], Sharding, bool]] = {}
    for array, ids, sharding, may_be_whole in requests:
        if sharding is None:
            continue
        known = _known_indexes(array)
        whole = may_be_whole and sharding.shard * np.dtype(array.dtype).itemsize <= limit
        for shard in np.unique(np.asarray(ids, dtype=np.int64) // sharding.per_shard).tolist():
            if shard not in known:
                key = (id(async_array(array)), int(shard))
                wanted.setdefault(key, (known, int(shard), array, sharding, whole))
    if not wanted:
        return {}
    prototype = buffer_prototype()
    fetches = [
        _fetched(
            (array.store_path / chunk_key(array, shard)).get(
                prototype,
                byte_range=None if whole else SuffixByteRequest(sharding.index_bytes),
            ),
            f"{'' if whole else 'the index of '}shard {shard} of {array.path} "
            f"({chunk_key(array, shard)})",
        )
        for known, shard, array, sharding, whole in wanted.values()
    ]
    objects: dict[tuple[int, int], Any] = {}
    for key, item in zip(wanted, await _gather(fetches), strict=True):
        known, shard, array, sharding, whole = wanted[key]
        if whole and item is not None:
            objects[key] = item.to_bytes()
            item = prototype.buffer.from_bytes(objects[key][-sharding.index_bytes :])
        known[shard] = _parse_index(item, array, shard, sharding)
    return objects


def _parse_index(
    item: Any, array: zarr.Array[Any], shard: int, sharding: Sharding
) -> npt.NDArray[np.uint64] | None:
    """Offsets and lengths of a shard's inner chunks, checked against their crc32c; None for a
    shard that does not exist (every inner chunk the fill value, as zarr reads it)."""
    if item is None:
        return None
    raw = item.to_bytes()
    table, checksum = raw[:-4], raw[-4:]
    if len(raw) != sharding.index_bytes or crc32c(table) != checksum:
        raise LayoutError(
            f"The index of shard {shard} of {array.path} is truncated or corrupt ({len(raw)} "
            f"bytes, {sharding.index_bytes} expected, checksum "
            f"{'wrong' if len(raw) == sharding.index_bytes else 'unchecked'}); where its chunks "
            "are is unknown, so their values are too. Write the store again."
        )
    return np.frombuffer(table, dtype="<u8").reshape(sharding.per_shard, 2)


def _plan_ranges(
    array: zarr.Array[Any],
    ids: npt.NDArray[np.int64],
    sharding: Sharding,
    fetches: list[Any],
    whole: dict[tuple[int, int], Any],
) -> list[tuple[int, int, int] | None]:
    """Add the ranged fetches of inner chunks ``ids`` to ``fetches``; return, per id, which fetch
    holds it and where (``(fetch, start, stop)``), or None for an absent chunk.

    Per shard, the wanted chunks sorted by offset are merged into one range while the gap to the
    next is at most :data:`COALESCE_GAP` and the range at most :data:`COALESCE_MAX` long. A shard
    in ``whole`` (fetched whole by :func:`_shard_indexes`) is one fetch already done.
    """
    import dask.config

    known = _known_indexes(array)
    gap = int(dask.config.get("sporadik.coalesce-gap", COALESCE_GAP))
    longest = int(dask.config.get("sporadik.coalesce-max", COALESCE_MAX))
    placed: list[tuple[int, int, int] | None] = [None] * len(ids)
    by_shard: dict[int, list[tuple[int, int, int]]] = {}
    for n, chunk_id in enumerate(np.asarray(ids, dtype=np.int64).tolist()):
        shard, inner = divmod(int(chunk_id), sharding.per_shard)
        index = known[shard]
        if index is None or index[inner, 0] == _ABSENT:
            continue
        offset, length = int(index[inner, 0]), int(index[inner, 1])
        by_shard.setdefault(shard, []).append((offset, offset + length, n))
    prototype = buffer_prototype()
    for shard, spans in by_shard.items():
        spans.sort()
        groups: list[list[tuple[int, int, int]]] = []
        for span in spans:
            if groups:
                first, last = groups[-1][0][0], max(stop for _, stop, _ in groups[-1])
                if span[0] - last <= gap and span[1] - first <= longest:
                    groups[-1].append(span)
                    continue
            groups.append([span])
        key = chunk_key(array, shard)
        fetched = whole.get((id(async_array(array)), shard))
        if fetched is not None:
            for offset, stop, n in spans:
                placed[n] = (len(fetches), offset, stop)
            fetches.append(_done(fetched))
            continue
        for group in groups:
            begin, end = group[0][0], max(stop for _, stop, _ in group)
            for offset, stop, n in group:
                placed[n] = (len(fetches), offset - begin, stop - begin)
            fetches.append(
                _fetched(
                    (array.store_path / key).get(
                        prototype, byte_range=RangeByteRequest(begin, end)
                    ),
                    f"bytes {begin}:{end} of shard {shard} of {array.path} ({key})",
                )
            )
    return placed


async def _done(value: bytes) -> bytes:
    """``value``, as a fetch that has already happened."""
    return value


def _cut(
    fetched: list[Any],
    views: dict[int, memoryview],
    where: tuple[int, int, int] | None,
    array: zarr.Array[Any],
) -> Any:
    """One inner chunk's bytes out of the ranged fetch holding it (None: absent, the fill);
    ``views`` keeps each fetch's bytes, converted once however many chunks it holds."""
    if where is None:
        return None
    if where[0] not in views:
        item = fetched[where[0]]
        if item is None:
            raise FetchError(
                f"A shard of {array.path} vanished between reading its index and its chunks; "
                "the store was rewritten during the read. Open it again."
            )
        views[where[0]] = memoryview(item.to_bytes() if not isinstance(item, bytes) else item)
    piece = bytes(views[where[0]][where[1] : where[2]])
    if len(piece) != where[2] - where[1]:
        raise LayoutError(
            f"A shard of {array.path} is shorter than its index says; the object is truncated. "
            "Write the store again."
        )
    return piece


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
) -> list[Any] | None:
    """The same read from a local directory: its jobs, each chunk read and decoded by one thread.

    Files need no event loop: a thread that opens, reads and decodes a chunk in one step costs
    a fraction of an asyncio fetch, a hand-off and a decode, which dominates for 128 KB chunks.
    None when any array is not a local one in codecs this package decodes.
    """
    jobs = []
    for array, ids in requests:
        base, compressors = _local_directory(array), _compressors(array)
        if base is None or compressors is None:
            return None
        jobs += [(array, base / chunk_key(array, int(i)), compressors) for i in ids]
    return jobs


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


def _decoded_into(
    array: zarr.Array[Any], item: Any, compressors: list[Any] | None, out: npt.NDArray[Any]
) -> bool:
    """Decode one zstd chunk straight into ``out``, a whole chunk of the table it fills; False
    leaves it to :func:`_decoded` (no compressor or another chain, an absent chunk, a
    big-endian table, or no numcodecs library functions to decode with)."""
    decode = zstd.decoder()
    if decode is None or item is None or compressors is None or len(compressors) != 1:
        return False
    if out.dtype != out.dtype.newbyteorder("<"):
        return False
    written = decode(item if isinstance(item, bytes) else item.to_bytes(), out)
    if written != out.nbytes:
        found = "cannot be decoded" if written < 0 else f"decodes to {written} bytes"
        raise LayoutError(
            f"A chunk of {array.path} {found}, not the {out.nbytes} bytes of a whole chunk; the "
            "object is truncated or corrupt, and its values are unknown. Write it again."
        )
    return True


def _decoded(array: zarr.Array[Any], item: Any, compressors: list[Any] | None) -> Any:
    """A chunk's values from its fetched object, or from its local file (a ``Path``)."""
    if isinstance(item, Path):
        item = _read_file(item)
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
