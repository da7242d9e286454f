"""The lazy array under an opened variable: every selection goes to the store's reader."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xarray.backends import BackendArray
from xarray.core import indexing

if TYPE_CHECKING:
    from sporadik_dask.read import StoreReader

__all__ = ["SporadikBackendArray", "backend_under"]


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
