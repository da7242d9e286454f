"""A store to a Dataset: one lazy, sparse variable with the labels the writer stored.

Opening reads metadata documents only: the root, each layout's array documents (kept by the
reader, so none is fetched twice) and the coordinates.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import xarray as xr

from sporadik_dask.backend.accessor import READER_KEY
from sporadik_dask.backend.array import BoundedLazyArray, SporadikBackendArray
from sporadik_dask.backend.blocks import keep_auto_chunks_sparse, preferred_chunks
from sporadik_dask.backend.chunkmanager import keep_dask_chunks_sparse
from sporadik_dask.backend.pushdown import install_reductions
from sporadik_dask.describe import open_store
from sporadik_dask.labels import read_labels
from sporadik_dask.read import StoreReader
from sporadik_dask.storage import StoreLike

__all__ = ["open_store_dataset"]


def open_store_dataset(
    store: StoreLike,
    *,
    storage_options: dict[str, Any] | None = None,
    drop_variables: Iterable[str] | None = None,
) -> xr.Dataset:
    """The store as a Dataset of one lazy, sparse variable with the labels the writer stored."""
    keep_dask_chunks_sparse()
    keep_auto_chunks_sparse()
    install_reductions()
    opened = open_store(store, storage_options=storage_options)
    reader = StoreReader.from_opened(opened)
    labels = read_labels(opened.group, len(reader.shape), reader.location)
    name = labels.name or _default_name(store)
    data = BoundedLazyArray(SporadikBackendArray(reader))
    variable = xr.Variable(labels.dims, data, attrs=labels.attrs)
    variable.encoding["preferred_chunks"] = preferred_chunks(reader.description, labels.dims)
    variable.encoding[READER_KEY] = reader
    variables = {} if name in set(drop_variables or ()) else {name: variable}
    coords = {dim: (dim, values) for dim, values in labels.coords.items()}
    return xr.Dataset(variables, coords=coords)


def _default_name(store: StoreLike) -> str:
    if isinstance(store, (str, os.PathLike)):
        stem = Path(os.fspath(store).rstrip("/")).name
        return stem.removesuffix(".zarr") or "data"
    return "data"
