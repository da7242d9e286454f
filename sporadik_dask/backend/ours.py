"""Which data is a sporadik variable's, and which is anyone else's.

Every patch of xarray and dask (:mod:`sporadik_dask.backend.patches`) asks here first and hands
anything not ours to the original unchanged: opening a store must change nothing for any other
array in the process. Ours is

1. a dask array read from a store: a read made in this process is beneath it
   (:func:`~sporadik_dask.read.dask_model.reads_beneath`, in either of dask's array models) and
   its blocks are sparse;
2. a ``sparse.COO`` a store's reader gave (the backend, or dask, as a block), or a loaded
   variable's selection of one, or xarray's compute of (1): marked by
   :func:`~sporadik_dask.marks.mark_read` as it is made; the mark is an attribute of that one
   object, so anything computed from it is unmarked, as a user's array is;
3. a variable whose data is (1), (2), a lazily opened store behind xarray's wrappers, or values
   read from one (``encoding`` holds the store's reader).
"""

from __future__ import annotations

import sys
from typing import Any

from sporadik_dask.backend.accessor import READER_KEY
from sporadik_dask.backend.array import backend_under
from sporadik_dask.marks import is_read_sparse, mark_read

__all__ = ["is_read", "is_read_dask", "is_read_sparse", "is_sporadik_variable", "mark_read"]


def is_read_dask(array: Any) -> bool:
    """Whether ``array`` is a dask array of sparse blocks whose graph reads a store."""
    if "dask.array" not in sys.modules:
        return False
    import dask.array as da

    from sporadik_dask.read.dask_model import reads_beneath

    if not isinstance(array, da.Array) or not hasattr(array._meta, "coords"):
        return False
    return reads_beneath(array)


def is_read(array: Any) -> bool:
    """Whether ``array`` (a duck array, not a variable) was read from a store."""
    return is_read_sparse(array) or is_read_dask(array)


def is_sporadik_variable(variable: Any) -> bool:
    """Whether an xarray ``Variable`` holds a store's data: lazily, as dask blocks of a read, or
    read into memory."""
    held = variable._data
    return (
        is_read(held) or backend_under(held).backend is not None or READER_KEY in variable.encoding
    )
