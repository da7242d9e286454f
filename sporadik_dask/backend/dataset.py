"""A store to a Dataset: one lazy, sparse variable with the labels the writer stored.

Opening reads metadata documents only: the root, each layout's array documents (kept by the
reader, so none is fetched twice) and the coordinates.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import xarray as xr

from sporadik_dask.backend import patches
from sporadik_dask.backend.accessor import READER_KEY
from sporadik_dask.backend.array import BoundedLazyArray, SporadikBackendArray
from sporadik_dask.backend.blocks import preferred_chunks
from sporadik_dask.read import StoreReader
from sporadik_dask.read.transport import keep_fill_values_in_transit
from sporadik_dask.store.as_opened import check_as_opened
from sporadik_dask.store.describe import open_store
from sporadik_dask.store.labels import Coordinate, Range, read_labels
from sporadik_dask.store.storage import StoreLike

__all__ = ["open_store_dataset"]


def open_store_dataset(
    store: StoreLike,
    *,
    storage_options: dict[str, Any] | None = None,
    drop_variables: Iterable[str] | None = None,
) -> xr.Dataset:
    """The store as a Dataset of one lazy, sparse variable with the labels the writer stored.

    Every coordinate along one dim gets a pandas index, so it stays in memory as read (it is
    read whole on open) under ``chunks=`` too, where xarray would chunk it: a mask made of it
    (``X.gene_symbols.str.startswith("MT-")``) is then numpy, which ``isel`` takes (xarray
    refuses a boolean dask array), and ``sel(cell_type="B")`` selects a group's cells. A
    categorical one keeps its categories (xarray's ``open_dataset`` cannot chunk a categorical
    coordinate at all: ``chunks={}`` fails in dask's ``normalize_chunks``).
    """
    patches.install()
    keep_fill_values_in_transit()  # a client made before the store was opened
    opened = open_store(store, storage_options=storage_options)
    reader = StoreReader.from_opened(opened)
    dropped = {str(name) for name in drop_variables or ()}
    labels = read_labels(opened.root, reader.shape, reader.location, skip=dropped)
    if labels.nodes():  # read from chunks after the root: of the store it described, or refused
        check_as_opened(opened)
    name = labels.name or _default_name(store, taken={*labels.dims, *labels.coords})
    data = BoundedLazyArray(SporadikBackendArray(reader))
    variable = xr.Variable(labels.dims, data, attrs=labels.attrs)
    variable.encoding["preferred_chunks"] = preferred_chunks(reader.description, labels.dims)
    variable.encoding[READER_KEY] = reader
    variables = {} if name in dropped else {name: variable}
    coords = {
        key: xr.Variable(c.dims, c.values, attrs=c.attrs)
        for key, c in labels.nodes().items()
        if key not in dropped
    }
    dataset = xr.Dataset(variables, coords=coords)
    for key, c in labels.coords.items():
        if isinstance(c.values, Range) and key not in dropped:
            dataset = dataset.assign_coords(_range_coordinates(key, c))
    for key, coord in coords.items():
        if coord.ndim != 1 or coord.dims == (key,):
            continue  # a dim's own coordinate is indexed by xarray already
        if isinstance(coord.dtype, pd.CategoricalDtype):
            dataset = dataset.assign_coords(_categorical_index(key, coord))
        else:
            dataset = dataset.set_xindex(key)
    return dataset


def _range_coordinates(key: str, coordinate: Coordinate) -> xr.Coordinates:
    """A range's coordinate with the index it was written with, its values never made."""
    from xarray.indexes import PandasIndex

    ((dim,), values) = coordinate.dims, coordinate.values
    if values.index == "pandas":
        index = PandasIndex(values.pandas_index(key), dim)
    else:
        index = values.xarray_index(key, dim)
    made = index.create_variables()
    for variable in made.values():
        variable.attrs.update(coordinate.attrs)
    return xr.Coordinates(made, indexes=dict.fromkeys(made, index))


def _categorical_index(key: str, coord: xr.Variable) -> xr.Coordinates:
    """``coord`` with a pandas index that keeps its categories: ``set_xindex`` would make an
    object index, and groups would come in sorted order, not the categories' own."""
    from xarray.indexes import PandasIndex

    (dim,) = coord.dims
    values = pd.Categorical(coord.to_index_variable().to_index())
    index = PandasIndex(pd.CategoricalIndex(values, name=key), dim)
    variables = index.create_variables()
    return xr.Coordinates(variables, indexes=dict.fromkeys(variables, index))


def _default_name(store: StoreLike, taken: set[str]) -> str:
    """An unnamed array's name: its store's, unless a dim or coordinate is called so (xarray
    would then take the data for that coordinate, and the Dataset would hold no variable)."""
    stem = "data"
    if isinstance(store, (str, os.PathLike)):
        stem = Path(os.fspath(store).rstrip("/")).name.removesuffix(".zarr") or "data"
    name = stem if stem not in taken else "data"
    while name in taken:
        name = f"{name}_"
    return name
