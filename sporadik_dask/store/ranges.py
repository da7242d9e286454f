"""The range coalescer: the inner chunks of shards a read needs, merged into few ranged requests.

Per shard, adjacent inner chunks are fetched in one request when the bytes between them are fewer
than :data:`COALESCE_GAP`, up to :data:`COALESCE_MAX` bytes a request.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import zarr
from zarr.abc.store import RangeByteRequest

from sporadik_dask.format.errors import FetchError, LayoutError
from sporadik_dask.store.objects import done, fetched
from sporadik_dask.store.shards import ABSENT, Sharding, known_indexes
from sporadik_dask.store.zarr_adapter import async_array, buffer_prototype, chunk_key

__all__ = ["COALESCE_GAP", "COALESCE_MAX", "cut", "plan_ranges"]

#: Bytes between two inner chunks of one shard that a read fetches rather than split its request
#: there. A request costs a round trip (10-30 ms on S3) and is billed; 1 MiB moves in ~10 ms at
#: the ~100 MB/s one S3 connection streams, so fetching the gap is never slower than asking twice.
#: ``dask.config`` ``sporadik.coalesce-gap`` overrides it.
COALESCE_GAP = 1 << 20
#: Bytes one merged request may span: past it a read splits, so a scan's requests still run in
#: parallel rather than one connection streaming a whole shard (8 MiB is ~80 ms at 100 MB/s).
#: ``dask.config`` ``sporadik.coalesce-max`` overrides it.
COALESCE_MAX = 8 << 20


def plan_ranges(
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
    in ``whole`` (fetched whole by :func:`~sporadik_dask.store.shards.shard_indexes`) is one
    fetch already done.
    """
    import dask.config

    known = known_indexes(array)
    gap = int(dask.config.get("sporadik.coalesce-gap", COALESCE_GAP))
    longest = int(dask.config.get("sporadik.coalesce-max", COALESCE_MAX))
    placed: list[tuple[int, int, int] | None] = [None] * len(ids)
    by_shard: dict[int, list[tuple[int, int, int]]] = {}
    for n, chunk_id in enumerate(np.asarray(ids, dtype=np.int64).tolist()):
        shard, inner = divmod(int(chunk_id), sharding.per_shard)
        index = known[shard]
        if index is None or index[inner, 0] == ABSENT:
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
        held = whole.get((id(async_array(array)), shard))
        if held is not None:
            for offset, stop, n in spans:
                placed[n] = (len(fetches), offset, stop)
            fetches.append(done(held))
            continue
        for group in groups:
            begin, end = group[0][0], max(stop for _, stop, _ in group)
            for offset, stop, n in group:
                placed[n] = (len(fetches), offset - begin, stop - begin)
            fetches.append(
                fetched(
                    (array.store_path / key).get(
                        prototype, byte_range=RangeByteRequest(begin, end)
                    ),
                    f"bytes {begin}:{end} of shard {shard} of {array.path} ({key})",
                )
            )
    return placed


def cut(
    objects: list[Any],
    views: dict[int, memoryview],
    where: tuple[int, int, int] | None,
    array: zarr.Array[Any],
) -> Any:
    """One inner chunk's bytes out of the ranged fetch holding it (None: absent, the fill);
    ``views`` keeps each fetch's bytes, converted once however many chunks it holds."""
    if where is None:
        return None
    if where[0] not in views:
        item = objects[where[0]]
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
