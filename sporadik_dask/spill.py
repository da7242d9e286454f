"""A write's shuffle parts kept on local disk, for the schedulers that cannot spill them.

A layout whose partitions gather from every piece (the CSC layout of row blocks) holds every
value's part, 12 bytes a value, until its first sort runs. A ``dask.distributed`` worker spills
what it holds past its memory target; the threaded, synchronous and process schedulers hold it
all, so a threaded write grew with the values. Above ``sporadik.spill-bytes`` of such parts,
each split task writes its piece's parts to one file of the write's spill directory and returns
where each part lies; the sort task reads them back one at a time, into one buffer, and deals
each straight into its runs (:class:`PartReader`). On a distributed worker the same task keeps
its parts in memory, where distributed's own spilling (and its transfers between workers)
apply: a worker's local file would not be readable by the worker running the sort.

The directory lies under dask's ``temporary-directory`` (else the system's), is made by the
first split that needs it and is removed by :func:`remove` once the write has finished or failed.
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

__all__ = ["PartReader", "SpilledPart", "directory_for", "on_worker", "remove", "write_parts"]


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

    @property
    def size(self) -> int:
        return self.hi - self.lo


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
    directory: str, pairs: npt.NDArray[Any], data: npt.NDArray[Any], edges: Sequence[int]
) -> list[SpilledPart]:
    """Write a piece's sorted ``pairs`` and ``data`` to one new file; part ``p`` is
    ``edges[p]:edges[p + 1]``. A retried task writes a file of its own."""
    path = os.path.join(directory, f"{uuid.uuid4().hex}.parts")
    pairs = np.ascontiguousarray(pairs)
    data = np.ascontiguousarray(data)
    try:
        os.makedirs(directory, exist_ok=True)
        with open(path, "wb") as file:
            if data.size:  # an empty piece's file is empty (no view of zero bytes casts)
                file.write(pairs.data.cast("B"))
                file.write(data.data.cast("B"))
    except OSError as failed:
        raise OSError(
            failed.errno,
            f"Cannot spill the write's shuffle parts to {directory} ({failed.strerror}); this "
            f"piece's parts are {pairs.nbytes + data.nbytes:,} bytes (a float32 layout's are "
            "12 bytes a value). Point dask's temporary-directory at a writable directory with "
            "room (dask.config.set({'temporary-directory': ...})), or keep the parts in memory "
            "with dask.config.set({'sporadik.spill-bytes': -1}).",
        ) from failed
    length = data.shape[0]
    return [
        SpilledPart(path, length, lo, hi, pairs.dtype.str, data.dtype.str)
        for lo, hi in itertools.pairwise(edges)
    ]


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


def remove(directory: str | None) -> None:
    """Remove a write's spill directory, if it was made."""
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
