"""Sharded arrays as this package reads and writes them itself: a shard written whole in one
PUT, and each shard's index read once.

zarr's ``sharding_indexed`` codec puts many inner chunks in one object, an index of their byte
ranges at its end. A shard is written a whole object at a time, encoded here the way zarr encodes
it; a read fetches each shard's index once (a suffix request, then kept as long as the array is
open) and then only the inner chunks it needs (:mod:`~sporadik_dask.store.ranges`). zarr's own
read of a sharded array fetches the index again for every inner chunk it reads.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import zarr
from zarr.abc.store import SuffixByteRequest
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ShardingCodecIndexLocation
from zarr.codecs.bytes import Endian

from sporadik_dask.format.errors import LayoutError
from sporadik_dask.store.codecs import Encoding, chain_of, encoder_of
from sporadik_dask.store.objects import fetched, gather, store_objects
from sporadik_dask.store.zarr_adapter import async_array, buffer_prototype, chunk_key, crc32c

__all__ = [
    "ABSENT",
    "PREFETCH_SHARDS",
    "WHOLE_SHARD",
    "IndexRequest",
    "Sharding",
    "known_indexes",
    "prefetched",
    "shard_indexes",
    "shard_object",
    "shard_of",
    "unknown",
    "write_shards",
]

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
ABSENT = np.uint64(2**64 - 1)


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
    compressors = chain_of(list(codec.codecs))
    if compressors is None or len(array.shape) != 1:
        return None
    chunk = int(codec.chunk_shape[0])
    return Sharding(chunk, int(array.shards[0]) // chunk, compressors)  # type: ignore[index]


def write_shards(
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
    encode = encoder_of(array, sharding.compressors)
    assert encode is not None  # shard_of found the chain
    encoding = Encoding(encode, sharding.chunk)
    objects = []
    for first in range(start, stop, shard):
        blob = shard_object(values[first - start : first - start + shard], sharding, encoding)
        if blob is not None:
            objects.append((chunk_key(array, first // shard), blob))
    store_objects(array, objects)


def shard_object(values: npt.NDArray[Any], sharding: Sharding, encoding: Encoding) -> bytes | None:
    """One shard's object, or None when it holds only the fill value."""
    chunk = sharding.chunk
    index = np.full((sharding.per_shard, 2), ABSENT, dtype="<u8")
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


#: Each open array's shard indexes read so far, by the id of its async array (dropped with it):
#: a shard's index is fetched once however many reads an open reader makes.
_INDEXES: dict[int, dict[int, npt.NDArray[np.uint64] | None]] = {}


def known_indexes(array: zarr.Array[Any]) -> dict[int, npt.NDArray[np.uint64] | None]:
    """The shard indexes of ``array`` read so far, by shard (None: the shard does not exist)."""
    opened = async_array(array)
    key = id(opened)
    if key not in _INDEXES:
        _INDEXES[key] = {}
        weakref.finalize(opened, _INDEXES.pop, key, None)
    return _INDEXES[key]


def prefetched(arrays: Sequence[zarr.Array[Any]]) -> list[IndexRequest]:
    """One inner chunk per shard of each sharded array in ``arrays`` none of whose indexes is
    known yet, when it has few enough shards: requests for their indexes alone."""
    found = []
    for array in arrays:
        sharding = shard_of(array)
        if sharding is None or known_indexes(array):
            continue
        shards = -(-int(array.shape[0]) // sharding.shard)
        if shards <= PREFETCH_SHARDS:
            ids = np.arange(shards, dtype=np.int64) * sharding.per_shard
            found.append(IndexRequest(array, ids, sharding, whole=False))
    return found


class IndexRequest(NamedTuple):
    """Shards whose indexes a read needs: those holding inner chunks ``ids`` of ``array``."""

    array: zarr.Array[Any]
    ids: npt.NDArray[np.int64]
    sharding: Sharding | None
    #: Whether a small shard may be fetched whole (its chunks are needed now) or only its index.
    whole: bool = True


def unknown(requests: list[IndexRequest]) -> bool:
    """Whether any shard the requests touch has an index this array object does not know."""
    for array, ids, sharding, _ in requests:
        if sharding is not None:
            known = known_indexes(array)
            shards = np.unique(np.asarray(ids, dtype=np.int64) // sharding.per_shard)
            if any(int(shard) not in known for shard in shards):
                return True
    return False


async def shard_indexes(requests: list[IndexRequest]) -> dict[tuple[int, int], Any]:
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
        known = known_indexes(array)
        whole = may_be_whole and sharding.shard * np.dtype(array.dtype).itemsize <= limit
        for shard in np.unique(np.asarray(ids, dtype=np.int64) // sharding.per_shard).tolist():
            if shard not in known:
                key = (id(async_array(array)), int(shard))
                wanted.setdefault(key, (known, int(shard), array, sharding, whole))
    if not wanted:
        return {}
    prototype = buffer_prototype()
    fetches = [
        fetched(
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
    for key, item in zip(wanted, await gather(fetches), strict=True):
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
