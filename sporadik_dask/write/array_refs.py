"""A zarr array named by its store and path: what a write's task holds instead of an open array.

It is opened inside the task (once per process), refused when its ``zarr.json`` changed since the
write was planned, and written only while the store's root still names the write it belongs to.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import zarr
from zarr.storage import StorePath

from sporadik_dask.format.errors import SporadikError
from sporadik_dask.store.storage import root_document

__all__ = [
    "ArrayRef",
]


#: Arrays one process keeps open: a write touches at most 4 per layout.
OPEN_ARRAYS = 64


@dataclass(frozen=True, slots=True)
class ArrayRef:
    """A zarr array named by its store and path: what a task holds instead of an open array.

    A task opens the array itself (once per process, see :meth:`open`), so a graph pickles no
    open handle and a retried task opens the same array. ``location`` and ``metadata`` make two
    references equal only when they name the same array with the same chunking, dtype and codecs,
    which is also what a write's token needs from its target.
    """

    #: The zarr store object; not compared, as stores are not hashable: ``location`` names it.
    store: Any = field(compare=False)
    #: ``str(store)``: its URL, or a ``memory://`` address unique to one in-memory store.
    location: str
    #: Path of the array inside the store.
    path: str
    #: SHA-1 of the array's ``zarr.json`` as it was when the reference was made.
    metadata: str
    #: For an array a write puts in place: the path of its store's root group and the root
    #: attributes (a JSON object) that say the store is still the one the write is for: the
    #: write's token until it commits, or the block and write ``add_axis`` extends (see
    #: :meth:`check_still_laid_out`).
    owner: tuple[str, str] | None = None

    @classmethod
    def of(cls, array: zarr.Array[Any]) -> ArrayRef:
        """A reference to an open array, as it stands now."""
        return cls.at(array.store, array.path, array, None)

    @classmethod
    def at(
        cls,
        store: Any,
        path: str,
        array: zarr.Array[Any],
        owner: tuple[str, Mapping[str, Any]] | None,
    ) -> ArrayRef:
        """A reference to the array at ``path`` in ``store`` that ``array``'s ``zarr.json``
        (made elsewhere, e.g. in memory) describes there, written only while the root group
        ``owner`` names holds its attributes (``(root, attributes)``)."""
        named = None if owner is None else (owner[0], json.dumps(owner[1], sort_keys=True))
        return cls(store, str(store), path, _digest(array), named)

    def check_still_laid_out(self) -> None:
        """Refuse to write when the root no longer names the write this array belongs to.

        A write cancelled on a cluster (``client.cancel``, a failed ``wait``, a closed client)
        leaves its running tasks running, and the same location may meanwhile be overwritten and
        committed by another write of the same documents: a chunk written then would land in
        that store, or stand where it writes no chunk (one of zeros), and read as its value.
        One small read of the root's document per region written.
        """
        if self.owner is None:
            return
        from sporadik_dask.store.storage import run

        root, owned = self.owner
        attributes = (run(root_document(StorePath(self.store, root))) or {}).get("attributes")
        if not isinstance(attributes, dict) or any(
            attributes.get(key) != value for key, value in json.loads(owned).items()
        ):
            raise SporadikError(
                f"{self.location}: the write this task belongs to no longer owns the store (its "
                "root is gone, or names another write or a finished store); its chunks would "
                "land in that store, or make a removed one again. Nothing was written by this "
                "task; the write it belongs to was cancelled or replaced."
            )

    def open(self) -> zarr.Array[Any]:
        """The array, opened in this process once and kept, refused if it changed since."""
        return _open(self)

    def check_unchanged(self) -> None:
        """Refuse the array if its ``zarr.json`` differs now from when the write was planned.

        What this process keeps open was checked once, when opened: a store overwritten since
        (another dtype, another length) is read through the kept metadata, and zarr's own error
        (``cannot reshape array``) would not say why. Asked when reading a kept array fails.
        """
        array = zarr.open_array(store=self.store, path=self.path, mode="r", zarr_format=3)
        if _digest(array) != self.metadata:
            raise _changed(self)

    def __dask_tokenize__(self) -> tuple[str, str, str]:
        return (self.location, self.path, self.metadata)


def _digest(array: zarr.Array[Any]) -> str:
    from sporadik_dask.store.zarr_adapter import metadata_document

    return hashlib.sha1(metadata_document(array)).hexdigest()


@functools.lru_cache(maxsize=OPEN_ARRAYS)
def _open(ref: ArrayRef) -> zarr.Array[Any]:
    array = zarr.open_array(store=ref.store, path=ref.path, mode="r+", zarr_format=3)
    if _digest(array) != ref.metadata:
        raise _changed(ref)
    return array


def _changed(ref: ArrayRef) -> SporadikError:
    return SporadikError(
        f"The array {ref.path!r} in {ref.location} changed after this write was planned (its "
        "zarr.json differs); writing into it would mix two layouts' chunks, and reading it would "
        "take another store's values. Build the write again, and give each pending write its "
        "own store."
    )
