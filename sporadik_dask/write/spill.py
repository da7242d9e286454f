"""A write's shuffle parts kept on disk rather than in memory while they wait for their sort.

A layout whose partitions gather from every piece (the CSC layout of row blocks) holds every
value's part, 12 bytes a value, until its first sort runs. The threaded, synchronous and process
schedulers would hold it all, so a threaded write grew with the values; a ``dask.distributed``
worker holds it until its own spill thresholds (60 and 70 % of its memory limit), where the
parts set the worker's peak whatever our tasks do, and half of them are pickled to the worker
running their sort. Past ``sporadik.spill-bytes`` of such parts, each split task writes its
piece's parts to one file and returns where each part lies; the sort task reads them back one
at a time, into one buffer, and deals each straight into its runs (:class:`PartReader`).

Where the file goes is :class:`SpillTo`'s to say. Off a distributed worker, a directory under
dask's ``temporary-directory`` (else the system's). On a worker, one every worker can read:
inside the target store's own directory, when it is a local directory store (every worker
writes its chunks there, so every worker sees it); a worker's own temporary directory would not
be readable by the worker running the sort. Writing to an object store or a memory store, a
worker keeps its parts, and distributed's own spilling and transfers apply. A directory is made
by the first split that needs it and removed by :func:`remove` once the write has finished or
failed, before the block is written.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = [
    "PartReader",
    "SpillTo",
    "SpilledPart",
    "directory_for",
    "on_worker",
    "remove",
    "shared_directory_for",
    "write_failed",
    "write_file",
    "write_parts",
]


class SpilledPart(NamedTuple):
    """Where one piece's part for one partition lies in that piece's spill file.

    The file holds the piece's position row, its index row and its values, each ``length``
    elements, in that order, every part a slice ``lo:hi`` of each.
    """

    path: str
    length: int
    lo: int
    hi: int
    pairs_dtype: str
    data_dtype: str
    #: What the position row counts from (see :class:`~sporadik_dask.write.tasks.Part`).
    base: int = 0

    @property
    def size(self) -> int:
        return self.hi - self.lo


class SpillTo(NamedTuple):
    """Where a write's split tasks put the parts they spill: ``local`` off a distributed worker,
    ``shared`` (or nowhere: the parts stay in memory) on one."""

    local: str
    shared: str | None

    def here(self) -> str | None:
        """The directory for a task running here, or None to keep its parts in memory."""
        return self.shared if on_worker() else self.local

    @property
    def directories(self) -> tuple[str, ...]:
        return (self.local,) if self.shared is None else (self.local, self.shared)


def shared_directory_for(group: Any, token: str) -> str | None:
    """The spill directory of the write named ``token`` inside the directory of ``group`` (a
    zarr ``StorePath``), when it is in a plain local directory store, else None.

    Inside the store, not beside it: the store's directory is the one place every worker
    writing the store can write and read, and a write cut short leaves its parts in the torn
    store that ``overwrite=True`` replaces, not beside it where nothing removes them.
    """
    from sporadik_dask.store.objects import writable_directory

    base = writable_directory(group)
    return None if base is None else os.path.join(base, f".sporadik-parts-{token}")


def directory_for(token: str) -> str:
    """The spill directory of the write named ``token``: under dask's ``temporary-directory``."""
    import dask.config

    base = dask.config.get("temporary-directory", None) or tempfile.gettempdir()
    return os.path.join(base, f"sporadik-parts-{token}")


def on_worker() -> bool:
    """Whether this task runs on a ``dask.distributed`` worker (never imports distributed)."""
    worker = sys.modules.get("distributed.worker")
    if worker is None:
        return False
    try:
        worker.get_worker()
    except ValueError:
        return False
    return True


def write_parts(
    directory: str,
    pairs: npt.NDArray[Any],
    data: npt.NDArray[Any],
    edges: Sequence[int],
    bases: Sequence[int],
) -> list[SpilledPart]:
    """Write a piece's sorted ``pairs`` and ``data`` to one new file; part ``p`` is
    ``edges[p]:edges[p + 1]``, its positions counted from ``bases[p]``. A retried task writes
    a file of its own."""
    pairs = np.ascontiguousarray(pairs)
    data = np.ascontiguousarray(data)
    path = write_file(directory, "parts", pairs, data, "shuffle parts")
    length = data.shape[0]
    return [
        SpilledPart(path, length, lo, hi, pairs.dtype.str, data.dtype.str, base)
        for (lo, hi), base in zip(itertools.pairwise(edges), bases, strict=True)
    ]


def write_file(
    directory: str, suffix: str, first: npt.NDArray[Any], data: npt.NDArray[Any], what: str
) -> str:
    """A new file in ``directory`` (made if missing) holding C-contiguous ``first`` then
    ``data``, empty when ``data`` is; its path. A retried task writes a file of its own."""
    path = os.path.join(directory, f"{uuid.uuid4().hex}.{suffix}")
    try:
        os.makedirs(directory, exist_ok=True)
        with open(path, "wb") as file:
            if data.size:  # an empty piece's file is empty (no view of zero bytes casts)
                file.write(first.data.cast("B"))
                file.write(data.data.cast("B"))
    except OSError as failed:
        raise write_failed(failed, directory, first.nbytes + data.nbytes, what) from failed
    return path


def write_failed(failed: OSError, directory: str, size: int, what: str) -> OSError:
    """The error of a write's file that could not be written to ``directory``: what it held,
    where else it may go, and how to keep it in memory instead."""
    return OSError(
        failed.errno,
        f"Cannot put the write's {what} in {directory} ({failed.strerror}); this one is "
        f"{size:,} bytes (a float32 layout's parts are 12 bytes a value). On a local "
        "scheduler, point dask's temporary-directory at a writable directory with room "
        "(dask.config.set({'temporary-directory': ...})); on a cluster, make room beside the "
        "store. Or keep everything in memory with dask.config.set({'sporadik.spill-bytes': -1}).",
    )


class PartReader:
    """A partition's parts, one at a time: a part in memory as it is, a spilled one read into
    one buffer that every spilled part of the partition reuses, so a sort holds its runs and
    one part rather than every part joined as well."""

    def __init__(self, parts: Sequence[Any]) -> None:
        first = parts[0]
        if isinstance(first, SpilledPart):
            self.index_dtype, self.data_dtype = (
                np.dtype(first.pairs_dtype),
                np.dtype(first.data_dtype),
            )
        else:
            self.index_dtype, self.data_dtype = first.pairs.dtype, first.data.dtype
        self.total = sum(_size(part) for part in parts)
        largest = max((p.size for p in parts if isinstance(p, SpilledPart)), default=0)
        self._pairs = np.empty((2, largest), dtype=self.index_dtype)
        self._data = np.empty(largest, dtype=self.data_dtype)

    def positions(self, part: Any) -> npt.NDArray[Any]:
        """The part's positions (the first row of its pairs)."""
        if not isinstance(part, SpilledPart):
            return np.asarray(part.pairs[0])
        positions = self._pairs[0, : part.size]
        with open(part.path, "rb", buffering=0) as file:
            _read_at(file, part.lo * positions.itemsize, positions)
        return positions

    def whole(self, part: Any) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """The part's pairs and values; a spilled part's valid until the next call."""
        if not isinstance(part, SpilledPart):
            return part.pairs, part.data
        pairs, data = self._pairs[:, : part.size], self._data[: part.size]
        _read(part, pairs, data)
        return pairs, data

    def joined(self, parts: Sequence[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """Every part's pairs and values joined in order, a spilled part read straight into
        place."""
        pairs = np.empty((2, self.total), dtype=self.index_dtype)
        data = np.empty(self.total, dtype=self.data_dtype)
        at = 0
        for part in parts:
            end = at + _size(part)
            if isinstance(part, SpilledPart):
                _read(part, pairs[:, at:end], data[at:end])
            else:
                pairs[:, at:end], data[at:end] = part.pairs, part.data
            at = end
        return pairs, data


def _size(part: Any) -> int:
    return part.size if isinstance(part, SpilledPart) else int(part.data.shape[0])


def _read(part: SpilledPart, pairs: npt.NDArray[Any], data: npt.NDArray[Any]) -> None:
    row = part.length * pairs.itemsize
    with open(part.path, "rb", buffering=0) as file:
        for r in range(2):
            _read_at(file, r * row + part.lo * pairs.itemsize, pairs[r])
        _read_at(file, 2 * row + part.lo * data.itemsize, data)


def _read_at(file: Any, offset: int, out: npt.NDArray[Any]) -> None:
    """Fill ``out`` (contiguous) from ``offset``; a short read means the file was cut."""
    if not out.size:
        return
    view = out.data.cast("B")
    file.seek(offset)
    got = 0
    while got < len(view):
        n = file.readinto(view[got:])
        if not n:
            raise OSError(
                f"The spill file {file.name} ended {len(view) - got} bytes early; something "
                "removed or truncated the write's spill directory while it ran."
            )
        got += n


def remove(directories: Sequence[str]) -> None:
    """Remove a write's spill directories, those that were made."""
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)
