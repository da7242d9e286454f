"""The xarray backend: ``xr.open_dataset(store, engine="sporadik")``.

Thin by design: an array wrapper that hands every selection to :class:`StoreReader` (which routes
it to a layout), and an entrypoint that builds one variable from the store's description and the
labels the writer stored. Opening reads metadata documents only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends import BackendArray, BackendEntrypoint
from xarray.core import indexing

from sporadik_dask.chunkmanager import keep_dask_chunks_sparse
from sporadik_dask.describe import describe_group_async
from sporadik_dask.errors import SporadikError
from sporadik_dask.read import StoreReader
from sporadik_dask.spec import BLOCK_KEY
from sporadik_dask.storage import StoreLike, location_of, open_group_async, run
from sporadik_dask.write import COORDS_GROUP, LABELS_KEY

__all__ = ["SporadikAccessor", "SporadikBackendArray", "SporadikBackendEntrypoint"]

#: Where an opened variable's encoding keeps the reader of the store it came from.
READER_KEY = "sporadik_reader"


class SporadikBackendArray(BackendArray):
    """A lazy view of the store; indexing returns ``sparse.COO`` read through the best layout."""

    def __init__(self, reader: StoreReader) -> None:
        self.reader = reader
        self.shape = reader.shape
        self.dtype = reader.description.dtype

    def __getitem__(self, key: indexing.ExplicitIndexer) -> Any:
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.OUTER, self.reader.read
        )


def _default_name(store: StoreLike) -> str:
    if isinstance(store, (str, os.PathLike)):
        stem = Path(os.fspath(store).rstrip("/")).name
        return stem.removesuffix(".zarr") or "data"
    return "data"


def open_store_dataset(
    store: StoreLike,
    *,
    storage_options: dict[str, Any] | None = None,
    drop_variables: Iterable[str] | None = None,
) -> xr.Dataset:
    """The store as a Dataset of one lazy, sparse variable with the labels the writer stored."""
    import zarr

    keep_dask_chunks_sparse()
    opened = run(open_group_async(store, mode="r", storage_options=storage_options))
    arrays: dict[str, Any] = {}
    description = run(describe_group_async(opened, location_of(store), arrays))
    reader = StoreReader(store, storage_options=storage_options, description=description)
    reader.adopt(arrays)
    root = zarr.Group(opened)
    labels: dict[str, Any] = dict(root.attrs).get(LABELS_KEY) or {}  # type: ignore[assignment]
    rank = len(reader.shape)
    dims = tuple(labels.get("dims") or (f"dim_{axis}" for axis in range(rank)))
    if len(dims) != rank:
        raise SporadikError(
            f"{reader.location} stores dims {list(dims)} for a rank-{rank} array; the labels "
            "and the block disagree, so the dims cannot be trusted. Rewrite the store."
        )
    name = labels.get("name") or _default_name(store)
    coords = {}
    for dim in labels.get("coords", []):
        values = root[f"{COORDS_GROUP}/{dim}"]
        if not isinstance(values, zarr.Array):
            raise SporadikError(f"{reader.location}: coords/{dim} is not an array.")
        coords[dim] = (dim, np.asarray(values[...]))
    data = indexing.LazilyIndexedArray(SporadikBackendArray(reader))
    variable = xr.Variable(dims, data, attrs=labels.get("attrs", {}))
    variable.encoding["preferred_chunks"] = _preferred_chunks(reader, dims)
    variable.encoding[READER_KEY] = reader
    variables = {} if name in set(drop_variables or ()) else {name: variable}
    return xr.Dataset(variables, coords=coords)


def _preferred_chunks(reader: StoreReader, dims: tuple[str, ...]) -> dict[str, int]:
    """Blocks along the first layout's axis of ~``array.chunk-size`` of values, from the
    description alone (the mean values per position), whole along the other axes."""
    import dask
    from dask.utils import parse_bytes

    description = reader.description
    axis = min(description.layouts)
    layout = description.layouts[axis]
    per_position = max(layout.nnz / max(layout.positions, 1), 1.0)
    budget = parse_bytes(dask.config.get("array.chunk-size"))
    values = budget / (layout.dtype.itemsize + 8 * len(reader.shape))
    along = int(min(max(values // per_position, 1), max(layout.positions, 1)))
    return {
        dim: (along if a == axis else max(size, 1))
        for a, (dim, size) in enumerate(zip(dims, reader.shape, strict=True))
    }


class SporadikBackendEntrypoint(BackendEntrypoint):
    """Opens sporadik stores: ``xr.open_dataset(path, engine="sporadik")``."""

    description = "Open sporadik sparse-array stores lazily, as sparse-backed variables"
    url = "https://pypi.org/project/sporadik-dask/"
    open_dataset_parameters = ("filename_or_obj", "drop_variables", "storage_options")

    def open_dataset(
        self,
        filename_or_obj: Any,
        *,
        drop_variables: Iterable[str] | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> xr.Dataset:
        return open_store_dataset(
            filename_or_obj, storage_options=storage_options, drop_variables=drop_variables
        )

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        """Yes only for a local store whose root document carries the block; never raises."""
        try:
            document = Path(os.fspath(filename_or_obj)) / "zarr.json"
            attributes = json.loads(document.read_text()).get("attributes", {})
            return isinstance(attributes, dict) and BLOCK_KEY in attributes
        except Exception:
            return False


@xr.register_dataarray_accessor("sporadik")
class SporadikAccessor:
    """Statistics per position along a dimension, from the layout making it contiguous.

    ``da.sporadik.nnz("gene")`` and ``da.sporadik.maxima("gene")`` read no value
    (``diff(indptr)`` and the stored ``maxima``); ``da.sporadik.totals("gene")`` reads the
    layout's values and nothing else (no index, no sort).
    """

    def __init__(self, array: xr.DataArray) -> None:
        self._array = array

    def _axis(self, dim: str) -> tuple[StoreReader, int]:
        reader = self._array.encoding.get(READER_KEY)
        if not isinstance(reader, StoreReader):
            raise SporadikError(
                "This DataArray was not opened from a sporadik store (or lost its encoding), so "
                "there is no store to read statistics from. Open it with engine='sporadik'."
            )
        axis = self._array.get_axis_num(dim)
        if self._array.shape != reader.shape:
            raise SporadikError(
                f"This DataArray has shape {self._array.shape}, not the store's {reader.shape}; "
                "the stored statistics describe the whole store. Ask before selecting."
            )
        return reader, int(axis)

    def nnz(self, dim: str) -> xr.DataArray:
        """Values stored per position along ``dim``."""
        reader, axis = self._axis(dim)
        return self._along(dim, reader.counts(axis), "nnz")

    def maxima(self, dim: str) -> xr.DataArray:
        """Largest absolute value per position along ``dim``, as stored at write time."""
        reader, axis = self._axis(dim)
        return self._along(dim, reader.maxima(axis), "maxima")

    def totals(self, dim: str) -> xr.DataArray:
        """Sum per position along ``dim`` over every other dimension, in 64 bits: total counts
        per gene, or per cell. The cheapest whole-store sum (see the benchmarks)."""
        reader, axis = self._axis(dim)
        return self._along(dim, reader.totals(axis), "totals")

    def _along(self, dim: str, values: Any, name: str) -> xr.DataArray:
        coords = {dim: self._array.coords[dim]} if dim in self._array.coords else {}
        return xr.DataArray(values, dims=(dim,), coords=coords, name=name)
