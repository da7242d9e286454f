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
there, after the count pass. On workers of other hosts the pieces are persisted on the workers
that read them, as results (:mod:`~sporadik_dask.write.persisted`); ``sporadik.keep-pieces``
chooses either way. When ``sporadik.spill-bytes`` is negative (nothing goes to disk), nothing
is kept and the write reads its input again, as does a write of an in-memory array or of a
stored layout, whose pieces cost less to read again than to keep.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from sporadik_dask.format.errors import SporadikError
from sporadik_dask.write.pieces import Piece
from sporadik_dask.write.spill import SpillTo, directory_for, write_file

__all__ = [
    "KEEP_PIECES",
    "Keeping",
    "KeptPiece",
    "NarrowPiece",
    "keep_piece",
    "keep_to",
    "keeping",
    "kept_piece",
    "narrowed",
    "widened",
]

#: Where pieces are kept: as files on disk, or persisted on a cluster's workers as results.
Keeping = Literal["files", "workers"]
#: The values of ``sporadik.keep-pieces``, its default first: files where every worker runs on
#: this host, else workers when every one spills; or either, always.
KEEP_PIECES = ("auto", "files", "workers")

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


class NarrowPiece(NamedTuple):
    """A piece as it is kept: its coordinates as int32 when every one fits, else int64."""

    coords: npt.NDArray[Any]
    data: npt.NDArray[Any]


def narrowed(piece: Piece) -> NarrowPiece:
    """``piece`` as it is kept, contiguous: int32 coordinates halve their bytes."""
    coords, data = piece
    narrow = coords.size == 0 or int(coords.max()) < 2**31
    return NarrowPiece(
        np.ascontiguousarray(coords, dtype=np.int32 if narrow else np.int64),
        np.ascontiguousarray(data),
    )


def widened(piece: NarrowPiece) -> Piece:
    """The piece :func:`narrowed` kept, as it was read (coordinates as int64, a copy)."""
    return Piece(piece.coords.astype(np.int64), piece.data)


def keeping(keep: bool, client: Any = None) -> Keeping | None:
    """Where the count pass keeps the pieces of an input that asks to be kept (``keep``),
    computed by ``client`` (None: a local scheduler), or None to keep nothing.

    ``sporadik.keep-pieces`` ``auto`` keeps files when every task can read them (a local
    scheduler, or a cluster whose workers all run on this host), else persists them on the
    workers when each has a memory limit to spill past (else keeps nothing); ``files`` (a
    ``temporary-directory`` every host shares) and ``workers`` choose. A local scheduler has no
    workers and keeps files. ``sporadik.spill-bytes`` negative says nothing goes to disk, and
    nothing is kept.
    """
    import dask.config

    chosen = dask.config.get("sporadik.keep-pieces", KEEP_PIECES[0])
    if chosen not in KEEP_PIECES:
        raise SporadikError(
            f"sporadik.keep-pieces is {chosen!r}: a write would not know where to keep the "
            f"pieces it reads. Set one of {', '.join(map(repr, KEEP_PIECES))}."
        )
    if not keep or int(dask.config.get("sporadik.spill-bytes", 0)) < 0:
        return None
    if client is None:
        return "files"
    if chosen == "auto":
        if _workers_here(client):
            return "files"
        return "workers" if _workers_spill(client) else None
    return "files" if chosen == "files" else "workers"


def _workers_spill(client: Any) -> bool:
    """Whether every worker of ``client``'s cluster has a memory limit, past which distributed
    spills what it holds to the worker's disk. A worker with none (``memory_limit=0``) would hold
    every persisted piece in memory, so ``auto`` reads the input again rather than risk it."""
    workers = client.scheduler_info().get("workers", {})
    return bool(workers) and all(info.get("memory_limit") for info in workers.values())


def keep_to() -> SpillTo:
    """A new directory for one write's kept pieces, under dask's ``temporary-directory``."""
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
    coords, data = narrowed(piece)
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
