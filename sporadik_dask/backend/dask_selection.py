"""Selections with lists, masks and steps of a chunked sporadik variable read only their runs.

xarray hands an outer selection of a chunked variable to its dask indexing adapter, which would
slice the dask array as dask does: a list or a mask becomes a ``take`` over whole blocks, each
read in full. So that adapter is wrapped: a selection of a dask array that is
still a plain read of a store becomes a new read of a window of the store
(:func:`sporadik_dask.read.window.select`). Every other dask array, and every other selection,
goes to xarray's adapter unchanged. Installed by :mod:`sporadik_dask.backend.patches`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from sporadik_dask.backend.chunkmanager import plain_dask_array
from sporadik_dask.backend.ours import is_read_dask
from sporadik_dask.read.window import select, select_points

__all__ = ["reading_points", "rereading"]


def reading_points(original: Callable[..., Any]) -> Callable[..., Any]:
    """``DaskIndexingAdapter._vindex_get``, with points of a plain store read read afresh."""

    @functools.wraps(original)
    def _vindex_get(self: Any, indexer: Any) -> Any:
        if not is_read_dask(self.array):  # another's dask array: xarray's adapter as it was
            return original(self, indexer)
        read = select_points(self.array, indexer.tuple)
        return original(self, indexer) if read is None else read

    return _vindex_get


def rereading(original: Callable[..., Any]) -> Callable[..., Any]:
    """``DaskIndexingAdapter._oindex_get`` or ``__getitem__``, with a selection of a plain
    store read read afresh (:func:`~sporadik_dask.read.window.select`)."""

    @functools.wraps(original)
    def _oindex_get(self: Any, indexer: Any) -> Any:
        if not is_read_dask(self.array):  # another's dask array: xarray's adapter as it was
            return original(self, indexer)
        reread = select(self.array, indexer.tuple)
        return original(self, indexer) if reread is None else plain_dask_array(reread)

    return _oindex_get
