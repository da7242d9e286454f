"""The pieces the count pass read, kept on disk so the write takes them instead of reading its
input again.

A write reads its input to count values per position (which fixes ``indptr`` and the
partitions) and then to move them. Generating, decoding or merging the input is most of the
count pass (docs/scaling.md), so each count task writes the piece it read to one file, and
the write's task for that piece reads the file back: 12 bytes a float32 value of a rank-2
array, read from the page cache, against generating or decoding the input once more.

Kept where every task of the write can read it: under dask's ``temporary-directory`` on a
local scheduler, or on a ``distributed`` cluster whose workers all run on the client's host.
Not inside the store, as spilled shuffle parts are: the write's first task replaces what is
there, after the count pass. Elsewhere (workers on other hosts), and when
``sporadik.spill-bytes`` is negative (nothing goes to disk), nothing is kept and the write reads
its input again, as does a write of an in-memory array or of a stored layout, whose pieces
cost less to read again than to keep.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Any, NamedTuple

import numpy as np

from sporadik_dask.write.pieces import Piece
from sporadik_dask.write.spill import SpillTo, directory_for, write_file

__all__ = [
    "KeptPiece",
    "keep_piece",
    "keep_to_for",
    "kept_piece",
]

#: Names of this host as a ``distributed`` worker's address may give it.
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


class KeptPiece(NamedTuple):
    """Where one piece lies on disk: its coordinates (``rank`` rows of ``length``, in
    ``coords_dtype``), then its values."""

    path: str
    rank: int
    length: int
    coords_dtype: str
    data_dtype: str


def keep_to_for(keep: bool, client: Any = None) -> SpillTo | None:
    """Where the count pass keeps pieces of an input that asks to be kept (``keep``), computed
    by ``client`` (None: a local scheduler): a new directory under dask's
    ``temporary-directory``, or None to keep nothing.

    A cluster keeps pieces only when every worker runs on this host, which then reads the same
    directory; ``sporadik.spill-bytes`` negative says nothing goes to disk.
    """
    import dask.config

    if not keep or int(dask.config.get("sporadik.spill-bytes", 0)) < 0:
        return None
    if client is not None and not _workers_here(client):
        return None
    directory = directory_for(f"kept-{uuid.uuid4().hex}")
    return SpillTo(directory, directory)


def _workers_here(client: Any) -> bool:
    """Whether every worker of ``client``'s cluster runs on this host."""
    import socket
    from urllib.parse import urlsplit

    here = set(_LOOPBACK)
    with contextlib.suppress(OSError):
        name = socket.gethostname()
        here |= {name, *socket.gethostbyname_ex(name)[2]}
    workers = client.scheduler_info().get("workers", {})
    return bool(workers) and all(urlsplit(address).hostname in here for address in workers)


def keep_piece(piece: Piece, keep_to: SpillTo | None) -> KeptPiece | None:
    """Write ``piece`` to a new file where ``keep_to`` says for this process (None: nowhere,
    and None is returned). Coordinates go as int32 when every one fits, halving their bytes."""
    directory = None if keep_to is None else keep_to.here()
    if directory is None:
        return None
    coords, data = piece
    narrow = coords.size == 0 or int(coords.max()) < 2**31
    coords = np.ascontiguousarray(coords, dtype=np.int32 if narrow else np.int64)
    data = np.ascontiguousarray(data)
    path = write_file(directory, "piece", coords, data, "piece")
    return KeptPiece(path, coords.shape[0], data.shape[0], coords.dtype.str, data.dtype.str)


def kept_piece(kept: KeptPiece) -> Piece:
    """The piece :func:`keep_piece` wrote, as it was read (coordinates as int64)."""
    coords_dtype, data_dtype = np.dtype(kept.coords_dtype), np.dtype(kept.data_dtype)
    with open(kept.path, "rb") as file:
        coords: Any = np.fromfile(file, dtype=coords_dtype, count=kept.rank * kept.length)
        data = np.fromfile(file, dtype=data_dtype, count=kept.length)
    if coords.shape[0] != kept.rank * kept.length or data.shape[0] != kept.length:
        expected = kept.length * (kept.rank * coords_dtype.itemsize + data_dtype.itemsize)
        raise OSError(
            f"The kept piece {kept.path} is {os.path.getsize(kept.path):,} of its "
            f"{expected:,} bytes; something removed or truncated the write's directory of kept "
            "pieces while it ran. Write again."
        )
    return Piece(coords.reshape(kept.rank, kept.length).astype(np.int64), data)
