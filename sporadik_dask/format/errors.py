"""What sporadik_dask refuses, in the reference's names so callers catch the same things.

Every message says what was found, why it would have gone wrong *silently*, and what to do: a
sparse store is a pile of integers, and read along the wrong axis or half-uploaded it returns real
numbers from the wrong cells, or the right count of zeros, without raising anything.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AbsentChunkError",
    "AbsentChunkWarning",
    "FetchError",
    "IncompleteError",
    "LayoutError",
    "ScanWarning",
    "SpecError",
    "SporadikError",
    "StoreAccessError",
    "StoreExistsError",
    "StoreNotFoundError",
    "StoreReplacedError",
]


class SporadikError(ValueError):
    """Base for everything refused here; a `ValueError`, as in the reference."""

    def __reduce__(self) -> tuple[Any, ...]:
        """Rebuilt by calling the class with its message, as ``pickle`` does by default.

        Spelled out, so the reducer distributed installs for exceptions (``tblib``'s) rebuilds
        it the same way: without one, tblib makes an exception through ``ValueError.__new__``,
        which a child of an `OSError` refuses, and a `FetchError` raised on a worker reached
        the client as a plain `Exception` that ``except FetchError`` did not catch.
        """
        return (type(self), self.args, self.__dict__ or None)


class SpecError(SporadikError):
    """The store declares a spec version this does not read, so its bytes cannot be interpreted."""


class IncompleteError(SporadikError):
    """The store has no finished block: its upload did not finish, and its chunks may be missing."""


class LayoutError(SporadikError):
    """A layout contradicts itself or the store around it, or input cannot become one."""


class StoreNotFoundError(SporadikError, FileNotFoundError):
    """Nothing is stored at the location given."""


class StoreAccessError(SporadikError, PermissionError):
    """The store refused these credentials (an object store's Access Denied).

    Its own class, so that neither a user nor the CLI takes it for a missing or damaged store:
    what is stored there may be fine, and retrying does not help; other credentials do.
    """


class StoreExistsError(SporadikError, FileExistsError):
    """Something is already stored where a write was asked to create a store."""


class StoreReplacedError(SporadikError):
    """The store was rewritten (or is being rewritten) since it was opened.

    Read on, an open array would return the new write's values at the old one's positions, or
    zeros where chunks are missing, with no error; so a read of it raises this instead.
    """


class ScanWarning(UserWarning):
    """A selection was answered by scanning a layout, since the one that compresses it is absent."""


class AbsentChunkError(LayoutError):
    """A chunk inside an array's extent has no object, and the layout does not prove it zeros.

    zarr reads such a chunk as the fill value, so every reader would return wrong values there
    without an error; :func:`~sporadik_dask.validate` refuses it unless told ``absent="warn"``.
    """


class AbsentChunkWarning(UserWarning):
    """A chunk inside an array's extent has no object, so zarr reads it as the fill value.

    Writers leave out chunks holding only zeros, so this can be legitimate; it is also what a lost
    object looks like, after the block was written, to every zarr reader.
    """


class FetchError(SporadikError, OSError):
    """A chunk could not be fetched from the store, after the store's own retries.

    The read stops here: a chunk that could not be fetched is never read as zeros. Both a
    `SporadikError` (one thing to catch for what this package refuses) and an `OSError` (what
    a failed I/O is everywhere else).
    """
