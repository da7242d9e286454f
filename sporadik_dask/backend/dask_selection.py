"""Selections with lists, masks and steps of a chunked sporadik variable read only their runs.

xarray hands an outer selection of a chunked variable to its dask indexing adapter, which would
slice the dask array as dask does: a list or a mask becomes a ``take`` over whole blocks, each
read in full. So opening a store wraps that adapter once: a selection of a dask array that is
still a plain read of a store becomes a new read of a window of the store
(:func:`sporadik_dask.read.window.select`). Every other dask array, and every other selection,
goes to xarray's adapter unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from sporadik_dask.backend.chunkmanager import plain_dask_array
from sporadik_dask.backend.ours import is_read_dask
from sporadik_dask.read.window import select, select_points

__all__ = ["install_dask_selection"]


def install_dask_selection() -> None:
    """Route outer selections of plain store reads through :class:`StoreWindow`; idempotent."""
    from xarray.core.indexing import DaskIndexingAdapter

    if getattr(DaskIndexingAdapter._oindex_get, "rereads_sporadik", False):
        return
    adapter: Any = DaskIndexingAdapter
    adapter._oindex_get = _rereading(adapter._oindex_get)  # outer keys: lists, arrays
    adapter.__getitem__ = _rereading(adapter.__getitem__)  # basic keys: stepped slices
    adapter._vindex_get = _reading_points(adapter._vindex_get)  # pointwise keys


def _reading_points(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _vindex_get(self: Any, indexer: Any) -> Any:
        if not is_read_dask(self.array):  # another's dask array: xarray's adapter as it was
            return original(self, indexer)
        read = select_points(self.array, indexer.tuple)
        return original(self, indexer) if read is None else read

    return _vindex_get


def _rereading(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _oindex_get(self: Any, indexer: Any) -> Any:
        if not is_read_dask(self.array):  # another's dask array: xarray's adapter as it was
            return original(self, indexer)
        reread = select(self.array, indexer.tuple)
        return original(self, indexer) if reread is None else plain_dask_array(reread)

    _oindex_get.rereads_sporadik = True  # type: ignore[attr-defined]
    return _oindex_get
