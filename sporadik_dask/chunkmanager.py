"""An xarray chunk manager that keeps a lazily opened sparse variable sparse when chunked.

xarray's own dask manager gives every lazily indexed backend array a numpy ``meta``, and dask's
getter then densifies each chunk. This one is dask in every other respect: it hands dask the same
lazy wrapper with a ``sparse.COO`` meta and ``asarray=False``, so dask's own getter (and its slice
fusion) stays, and chunks stay sparse. It never claims an array as its own, so it never competes
with dask's manager: ask for it with ``chunked_array_type="sporadik"``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xarray.namedarray.daskmanager import DaskManager

__all__ = ["SporadikChunkManager"]


class SporadikChunkManager(DaskManager):
    """dask, with sparse meta for lazily indexed backend arrays."""

    def is_chunked_array(self, data: Any) -> bool:
        return False

    def from_array(self, data: Any, chunks: Any, **kwargs: Any) -> Any:
        import dask.array as da
        import sparse

        kwargs["meta"] = sparse.COO.from_numpy(np.zeros((0,) * data.ndim, dtype=data.dtype))
        kwargs["asarray"] = False
        reader = _reader_under(data)
        if reader is None:
            kwargs["getitem"] = _getter
            return da.from_array(data, chunks, **kwargs)
        return da.from_array(reader, chunks, **kwargs)


def _reader_under(data: Any) -> Any:
    """The store reader beneath xarray's lazy wrappers, if they select the whole array."""
    from xarray.core.indexing import LazilyIndexedArray

    from sporadik_dask.xarray_backend import SporadikBackendArray

    while True:
        if isinstance(data, SporadikBackendArray):
            return data.reader
        if isinstance(data, LazilyIndexedArray) and any(k != slice(None) for k in data.key.tuple):
            return None
        data = getattr(data, "array", None)
        if data is None:
            return None


def _getter(array: Any, key: Any, **kwargs: Any) -> Any:
    """dask's getter for a lazily indexed view: index, then unwrap xarray's lazy result."""
    result = array[key]
    return result.get_duck_array() if hasattr(result, "get_duck_array") else result
