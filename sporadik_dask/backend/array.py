"""The lazy array under an opened variable: every selection goes to the store's reader."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xarray.backends import BackendArray
from xarray.core import indexing

if TYPE_CHECKING:
    from sporadik_dask.read import StoreReader

__all__ = ["SporadikBackendArray"]


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
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.OUTER, self.reader.read
        )
