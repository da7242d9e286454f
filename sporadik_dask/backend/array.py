"""The lazy array under an opened variable: every selection goes to the store's reader."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from xarray.backends import BackendArray
from xarray.core import indexing

if TYPE_CHECKING:
    from sporadik_dask.read import StoreReader

__all__ = ["BoundedLazyArray", "SporadikBackendArray", "backend_under"]


class SporadikBackendArray(BackendArray):
    """A lazy view of the store; indexing returns ``sparse.COO`` read through the best layout.

    It holds the reader, which pickles as a location, so a variable travels to dask workers.
    """

    __slots__ = ("dtype", "reader", "shape")

    def __init__(self, reader: StoreReader) -> None:
        self.reader = reader
        self.shape = reader.shape
        self.dtype = reader.dtype

    def __getitem__(self, key: indexing.ExplicitIndexer) -> Any:
        """Outer keys go to the reader as xarray gives them (unsorted, repeated, negative), so
        it builds the caller's order while assembling; pointwise keys of arrays go to
        :meth:`~sporadik_dask.read.StoreReader.read_points`."""
        if not isinstance(key, indexing.VectorizedIndexer):
            return self.reader.read(key.tuple)  # slices of any step, arrays in any order
        if all(isinstance(part, np.ndarray) for part in key.tuple):
            return self.reader.read_points(key.tuple)
        return indexing.explicit_indexing_adapter(  # arrays mixed with slices: xarray's path
            key, self.shape, indexing.IndexingSupport.OUTER, self.reader.read
        )


class BoundedLazyArray(indexing.LazilyIndexedArray):
    """xarray's lazy view of a store, refusing positions past either end.

    xarray's own composes a new integer key by adding the axis length to a negative one, with no
    bounds check, so ``v.isel(gene=-8001)`` of 8,000 genes would read gene 7,999 where numpy
    raises ``IndexError``; this view checks each key against the axes it indexes first.
    """

    __slots__ = ()

    def _updated_key(self, new_key: indexing.ExplicitIndexer) -> Any:
        parts = indexing.expanded_indexer(new_key.tuple, self.ndim)
        for axis, (part, size) in enumerate(zip(parts, self.shape, strict=True)):
            if isinstance(part, slice):
                continue
            positions = np.asarray(part)
            if positions.dtype.kind == "b" or positions.size == 0:
                continue
            if positions.min() < -size or positions.max() >= size:
                raise IndexError(
                    f"index {positions.min() if positions.min() < -size else positions.max()} "
                    f"is out of bounds for axis {axis} with size {size}"
                )
        return super()._updated_key(new_key)


def backend_under(data: Any) -> tuple[SporadikBackendArray | None, bool]:
    """The sporadik backend array beneath xarray's lazy wrappers (or None), and whether the
    wrappers select the whole of it; None too once xarray holds the values in memory."""
    whole = True
    while data is not None:
        if isinstance(data, SporadikBackendArray):
            return data, whole
        if isinstance(data, indexing.LazilyIndexedArray) and not all(
            isinstance(k, slice) and k == slice(None) for k in data.key.tuple
        ):
            whole = False
        data = getattr(data, "array", None)
    return None, False
