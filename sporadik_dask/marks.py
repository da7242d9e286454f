"""Which ``sparse.COO`` a read of a store made: a mark on that one object.

A read's results and the blocks dask reads from a store carry it, so what acts only on a store's
data (every patch of :mod:`~sporadik_dask.backend.patches`, asking
:mod:`~sporadik_dask.backend.ours`, and dask's join of sparse blocks,
:func:`~sporadik_dask.backend.concatenation.concatenate_in_order`) tells them from a user's own
``sparse.COO``. The mark is an attribute of that one object: anything computed from it is
unmarked, as a user's array is.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["is_read_sparse", "mark_read"]

_MARK = "_sporadik_read"


def mark_read(array: Any) -> Any:
    """``array``, marked as read from a store when it is a ``sparse.COO``; returned as given."""
    sparse = sys.modules.get("sparse")
    if sparse is not None and type(array) is sparse.COO:
        setattr(array, _MARK, True)
    return array


def is_read_sparse(array: Any) -> bool:
    """Whether ``array`` is a ``sparse.COO`` made by a read of a store (see :func:`mark_read`)."""
    return getattr(array, _MARK, False) is True
