"""Every check a reader can make, including the ones that read data.

:func:`describe` makes the checks that need only metadata; this adds those that need the arrays
(``indptr`` starts at 0, never decreases and ends at nnz; every index lies inside the raveled
extent; every chunk decodes), decoding a batch of zarr chunks at a time so memory stays bounded
whatever the store's size. It also lists each array's chunk objects: zarr reads an absent one as
zeros, legitimately when it held only zeros, and silently when an object was lost after the store
was finished. An absent chunk whose zeros the layout itself proves (leading zeros of ``indptr``, an
``indices`` chunk every element of which starts a run, ``maxima`` of empty positions) passes; any
other is refused, since every reader would return wrong values from it without a word.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import zarr

from sporadik_dask.format.errors import (
    AbsentChunkError,
    AbsentChunkWarning,
    LayoutError,
    SporadikError,
)
from sporadik_dask.format.spec import MAXIMA, check_indices, check_indptr, magnitudes, maxima_dtype
from sporadik_dask.planning.budgets import CHUNKS_AT_ONCE
from sporadik_dask.store.chunks import read_chunks
from sporadik_dask.store.describe import (
    LayoutDescription,
    OpenedStore,
    StoreDescription,
    open_store,
)
from sporadik_dask.store.storage import StoreLike, run
from sporadik_dask.store.zarr_adapter import chunk_key

__all__ = ["Absent", "validate", "validate_coords", "validate_layout"]

#: What :func:`validate` does about an absent chunk the layout does not prove to be zeros.
Absent = Literal["error", "warn"]


def validate_layout(
    arrays: Mapping[str, zarr.Array[Any]],
    layout: LayoutDescription,
    where: str,
    absent: Absent = "error",
) -> None:
    """Decode every chunk of one described layout and run the data checks over it.

    ``arrays`` are the layout's, by name, as
    :meth:`~sporadik_dask.store.describe.OpenedStore.layout_arrays` gives them.
    """
    label = f"Layout {layout.path!r} in {where}"
    layout.check_whole_read(where)
    indptr = np.concatenate(_chunks(arrays["indptr"], layout.positions + 1, 0, None))
    check_indptr(indptr[: layout.positions + 1], layout.nnz, label)
    indptr = indptr[: layout.positions + 1].astype(np.int64, copy=False)
    step = CHUNKS_AT_ONCE * layout.chunks["indices"]
    largest = np.zeros(layout.positions, dtype=maxima_dtype(layout.dtype))
    for start in range(0, layout.nnz, step):
        stop = min(start + step, layout.nnz)
        indices = np.concatenate(_chunks(arrays["indices"], layout.nnz, start, stop))
        check_indices(indices[: stop - start], layout.extent, label)
        values = np.concatenate(_chunks(arrays["data"], layout.nnz, start, stop))[: stop - start]
        _largest_into(largest, indptr, start, magnitudes(np.abs(values)))
    if _check_absent(arrays, indptr, label, absent):
        return  # the values of absent chunks read as zeros, so maxima cannot be checked
    if MAXIMA in arrays:
        stored = np.concatenate(_chunks(arrays[MAXIMA], layout.positions, 0, None))
        _check_maxima(magnitudes(stored[: layout.positions]), largest, label)


def _check_absent(
    arrays: Mapping[str, zarr.Array[Any]], indptr: npt.NDArray[np.int64], label: str, absent: Absent
) -> bool:
    """Refuse (or warn of, and say there are) absent chunk objects the layout does not prove to
    be zeros."""
    unproven = {}
    for name, array in arrays.items():
        chunk = int(array.chunks[0])
        ids = [i for i in run(absent_chunks(array)) if not _proven_zero(name, indptr, i, chunk)]
        if ids:
            unproven[name] = (ids, array.nchunks)
    if not unproven:
        return False
    found = "; ".join(
        f"{len(ids)} of the {total} chunks of {name!r} (ids "
        + ", ".join(str(i) for i in ids[:10])
        + (" ..." if len(ids) > 10 else "")
        + ")"
        for name, (ids, total) in unproven.items()
    )
    message = (
        f"{label}: {found} have no object and read as zeros, which the layout's own runs do not "
        "account for: every reader returns wrong values there without an error. If the store was "
        "copied or synced, copy it again from its source."
    )
    if absent == "error":
        raise AbsentChunkError(message)
    warnings.warn(message, AbsentChunkWarning, stacklevel=4)
    return True


def _largest_into(
    largest: npt.NDArray[Any], indptr: npt.NDArray[np.int64], start: int, values: Any
) -> None:
    """Each position's largest of ``values`` (elements ``start..``), maxed into ``largest``."""
    stop = start + values.size
    first = int(np.searchsorted(indptr[1:], start, side="right"))
    last = int(np.searchsorted(indptr[:-1], stop, side="left"))
    since = np.clip(indptr[first:last], start, stop) - start
    until = np.clip(indptr[first + 1 : last + 1], start, stop) - start
    meet = np.flatnonzero(until > since)
    if meet.size:  # starts of non-empty parts strictly increase: reduceat reduces each exactly
        parts = np.maximum.reduceat(values, since[meet])
        np.maximum.at(largest, first + meet, parts)


def _check_maxima(stored: Any, largest: Any, label: str) -> None:
    """``maxima`` must be each position's largest absolute value, as written (both read as
    :func:`~sporadik_dask.format.spec.magnitudes`)."""
    wrong = np.flatnonzero(~((stored == largest) | (np.isnan(stored) & np.isnan(largest))))
    if wrong.size:
        shown = ", ".join(str(int(p)) for p in wrong[:10]) + (" ..." if wrong.size > 10 else "")
        raise LayoutError(
            f"{label}: maxima disagree with the values at {wrong.size} positions ({shown}); "
            "da.sporadik.maxima would report the wrong largest value for them. Rewrite the "
            "layout (sporadik_dask.add_axis after removing it), or ignore maxima."
        )


def _proven_zero(name: str, indptr: npt.NDArray[np.int64], chunk_id: int, chunk: int) -> bool:
    """Whether the layout itself proves an absent chunk of ``name`` held only zeros.

    ``indptr`` starts at 0 and never decreases, so its absent chunk is zeros when its value after
    the chunk is 0. Indices in a run strictly increase, so a run of zeros is at most one long and
    opens its run: an ``indices`` chunk is zeros when each of its elements starts a run. A
    position's ``maxima`` is 0 when its run is empty. Stored values of 0 are not expected, so an
    absent ``data`` chunk is never proven.
    """
    first, last = chunk_id * chunk, (chunk_id + 1) * chunk
    if name == "indptr":
        return bool(indptr[min(last, len(indptr) - 1)] == 0)
    if name == "indices":
        stop = min(last, int(indptr[-1]))
        starts = np.unique(indptr[:-1][indptr[1:] > indptr[:-1]])
        lo, hi = np.searchsorted(starts, [first, stop])
        return bool(hi - lo == max(stop - first, 0))
    if name == MAXIMA:
        runs = np.diff(indptr)[first:last]
        return bool(np.all(runs == 0))
    return False


async def absent_chunks(array: Any) -> list[int]:
    """Chunk ids inside ``array`` with no object in the store, found by one listing.

    For a sharded array these are the inner chunks of every shard object that is missing. An
    inner chunk a present shard's index marks empty is not absent: the shard is one object,
    written whole, so its index is the writer's own statement that the chunk held zeros.
    """
    store, path = array.store_path.store, array.store_path.path
    if not store.supports_listing:
        return []
    prefix = f"{path}/" if path else ""
    present = {key[len(prefix) :] async for key in store.list_prefix(prefix)}
    chunks, shards = int(array.chunks[0]), array.shards
    if shards is None:
        return [i for i in range(array.nchunks) if chunk_key(array, i) not in present]
    per = int(shards[0]) // chunks
    inner = -(-int(array.shape[0]) // chunks)
    return [
        i
        for s in range(-(-int(array.shape[0]) // int(shards[0])))
        if chunk_key(array, s) not in present
        for i in range(s * per, min((s + 1) * per, inner))
    ]


async def _absent_coordinate_chunks(array: Any) -> list[int]:
    """:func:`absent_chunks` of a coordinate, which may be a scalar (one chunk, id 0)."""
    if array.ndim:
        return await absent_chunks(array)
    store, path = array.store_path.store, array.store_path.path
    key = array.metadata.encode_chunk_key(())
    return [] if await store.exists(f"{path}/{key}" if path else key) else [0]


def _chunks(array: Any, length: int, start: int, stop: int | None) -> list[Any]:
    """Decoded chunks of ``array`` covering elements ``[start, stop)`` (to the end if None)."""
    chunk = int(array.chunks[0])
    end = length if stop is None else stop
    ids = np.arange(start // chunk, max(-(-end // chunk), start // chunk))
    (decoded,) = read_chunks([(array, ids)])
    return decoded or [np.zeros(0, dtype=array.dtype)]


def validate(
    store: StoreLike, *, storage_options: dict[str, Any] | None = None, absent: Absent = "error"
) -> StoreDescription:
    """Describe ``store`` and run every check that reads data; raise on the first failure.

    ``absent="warn"`` turns the refusal of absent chunks the layout does not prove to be zeros
    into an :class:`~sporadik_dask.format.errors.AbsentChunkWarning`, for a store known to hold
    zeros.
    """
    if absent not in ("error", "warn"):
        raise SporadikError(f"absent={absent!r}; choose 'error' or 'warn'.")
    opened = open_store(store, storage_options=storage_options)
    description = opened.description
    for layout in description.layouts.values():
        validate_layout(opened.layout_arrays(layout), layout, description.location, absent)
    validate_coords(opened, absent)
    return description


def validate_coords(opened: OpenedStore, absent: Absent) -> None:
    """Decode every coordinate the labels name, and refuse (or warn of) absent chunk objects.

    A coordinate's absent chunk reads as zeros (or empty names) and its cells come back with
    labels nobody stored; the writer stores every chunk of a coordinate, zeros included.
    """
    from sporadik_dask.store.labels import COORDS_GROUP, read_labels

    description, root = opened.description, opened.group
    where = description.location
    try:
        labels = read_labels(opened.root, description.shape, where)
    except SporadikError:
        raise
    except Exception as failed:  # a cut chunk, categories that do not decode
        raise LayoutError(
            f"The coordinates of {where} cannot be read ({type(failed).__name__}: {failed}); "
            "xarray would refuse to open the store, or give wrong labels. Write the store again "
            "from its source."
        ) from failed
    if not labels.nodes():  # none, or ranges alone: formulas in the root document, no chunks
        return
    coords = root[COORDS_GROUP]
    assert isinstance(coords, zarr.Group)  # read just now
    lost = {
        f"{COORDS_GROUP}/{path}": ids
        for path, node in coords.members(max_depth=None)
        if isinstance(node, zarr.Array) and (ids := run(_absent_coordinate_chunks(node)))
    }
    if not lost:
        return
    found = "; ".join(f"{len(ids)} of {name!r} (ids {ids[:10]})" for name, ids in lost.items())
    message = (
        f"Coordinates of {where}: chunks {found} have no object and read as zeros or empty "
        "names, labels nobody stored. If the store was copied or synced, copy it again from "
        "its source (a store written before every coordinate chunk was stored may lack chunks "
        "of zeros: absent='warn')."
    )
    if absent == "error":
        raise AbsentChunkError(message)
    warnings.warn(message, AbsentChunkWarning, stacklevel=3)
