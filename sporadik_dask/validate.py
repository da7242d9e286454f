"""Every check a reader can make, including the ones that read data.

:func:`describe` makes the checks that need only metadata; this adds those that need the arrays
(``indptr`` starts at 0, never decreases and ends at nnz; every index lies inside the raveled
extent; every chunk decodes), decoding a batch of zarr chunks at a time so memory stays bounded
whatever the store's size. It also lists each array's chunk objects and warns of any that are
absent: zarr reads those as zeros, legitimately when they held only zeros, and silently when an
object was lost after the store was finished.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import zarr

from sporadik_dask.chunks import read_chunks
from sporadik_dask.describe import LayoutDescription, StoreDescription, describe_group_async
from sporadik_dask.errors import AbsentChunkWarning
from sporadik_dask.spec import check_indices, check_indptr
from sporadik_dask.storage import StoreLike, location_of, open_group_async, run

__all__ = ["validate", "validate_layout"]

#: Zarr chunks decoded per batch while validating: memory stays at a few tens of MB.
CHUNKS_AT_ONCE = 64


def validate_layout(group: zarr.Group, layout: LayoutDescription, where: str) -> None:
    """Decode every chunk of one described layout and run the data checks over it."""
    label = f"Layout {layout.path!r} in {where}"
    layout.check_whole_read(where)
    arrays: dict[str, Any] = {name: group[name] for name in ("indptr", "indices", "data")}
    indptr = np.concatenate(_chunks(arrays["indptr"], layout.positions + 1, 0, None))
    check_indptr(indptr[: layout.positions + 1], layout.nnz, label)
    step = CHUNKS_AT_ONCE * layout.chunks["indices"]
    for start in range(0, layout.nnz, step):
        stop = min(start + step, layout.nnz)
        indices = np.concatenate(_chunks(arrays["indices"], layout.nnz, start, stop))
        check_indices(indices[: stop - start], layout.extent, label)
        _chunks(arrays["data"], layout.nnz, start, stop)
    for name, array in arrays.items():
        absent = run(absent_chunks(array))
        if name == "indptr":
            absent = [
                i for i in absent if not _certainly_zero(indptr, (i + 1) * layout.chunks[name])
            ]
        if absent:
            shown = ", ".join(str(i) for i in absent[:10]) + (" ..." if len(absent) > 10 else "")
            warnings.warn(
                f"{label}: {len(absent)} of the {array.nchunks} chunks of {name!r} (ids {shown}) "
                "have no object and read as zeros. Writers leave out chunks holding only "
                "zeros, so this can be legitimate, but stored zeros are rare: if the store was "
                "copied or synced, compare it with its source.",
                AbsentChunkWarning,
                stacklevel=3,
            )


def _certainly_zero(indptr: Any, end: int) -> bool:
    """Whether ``indptr`` must be zero before ``end``: it starts at 0 and never decreases, so
    it is when its value at ``end`` (or its last, for a chunk at the end) is 0."""
    return bool(indptr[min(end, len(indptr) - 1)] == 0)


async def absent_chunks(array: Any) -> list[int]:
    """Chunk ids inside ``array`` with no object in the store, found by one listing."""
    store, path = array.store_path.store, array.store_path.path
    if not store.supports_listing:
        return []
    prefix = f"{path}/" if path else ""
    present = {key[len(prefix) :] async for key in store.list_prefix(prefix)}
    encode = array.metadata.encode_chunk_key
    return [i for i in range(array.nchunks) if encode((i,)) not in present]


def _chunks(array: Any, length: int, start: int, stop: int | None) -> list[Any]:
    """Decoded chunks of ``array`` covering elements ``[start, stop)`` (to the end if None)."""
    chunk = int(array.chunks[0])
    end = length if stop is None else stop
    ids = np.arange(start // chunk, max(-(-end // chunk), start // chunk))
    (decoded,) = read_chunks([(array, ids)])
    return decoded or [np.zeros(0, dtype=array.dtype)]


def validate(
    store: StoreLike, *, storage_options: dict[str, Any] | None = None
) -> StoreDescription:
    """Describe ``store`` and run every check that reads data; raise on the first failure."""
    where = location_of(store)
    root = run(open_group_async(store, mode="r", storage_options=storage_options))
    description = run(describe_group_async(root, where))
    group = zarr.Group(root)
    for layout in description.layouts.values():
        child = group[layout.path]
        assert isinstance(child, zarr.Group)  # described already
        validate_layout(child, layout, where)
    return description
