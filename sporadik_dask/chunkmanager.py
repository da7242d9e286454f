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
    """dask, with sparse meta for lazily opened sporadik variables and dask's own for the rest.

    Only arrays read from a sporadik store are treated differently, so it is also safe as the
    default for a whole session: ``xr.set_options(chunk_manager="sporadik")``, after which a bare
    ``chunks={}`` keeps sporadik variables sparse and leaves every other backend as dask does.
    """

    def is_chunked_array(self, data: Any) -> bool:
        return False

    def from_array(self, data: Any, chunks: Any, **kwargs: Any) -> Any:
        import dask.array as da
        import sparse

        backend, whole = _backend_under(data)
        if backend is None:
            return super().from_array(data, chunks, **kwargs)
        kwargs["meta"] = sparse.COO.from_numpy(np.zeros((0,) * data.ndim, dtype=data.dtype))
        kwargs["asarray"] = False
        if whole:  # dask's own getter over the reader: blocks are sparse, slices fuse
            return da.from_array(backend.reader, chunks, **kwargs)
        kwargs["getitem"] = _getter
        return da.from_array(data, chunks, **kwargs)


def _backend_under(data: Any) -> tuple[Any, bool]:
    """The sporadik backend array beneath xarray's lazy wrappers (or None), and whether the
    wrappers select the whole of it."""
    from xarray.core.indexing import LazilyIndexedArray

    from sporadik_dask.xarray_backend import SporadikBackendArray

    whole = True
    while data is not None:
        if isinstance(data, SporadikBackendArray):
            return data, whole
        if isinstance(data, LazilyIndexedArray) and any(k != slice(None) for k in data.key.tuple):
            whole = False
        data = getattr(data, "array", None)
    return None, False


def _getter(array: Any, key: Any, **kwargs: Any) -> Any:
    """dask's getter for a lazily indexed view: index, then unwrap xarray's lazy result."""
    result = array[key]
    return result.get_duck_array() if hasattr(result, "get_duck_array") else result
