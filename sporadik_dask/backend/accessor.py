"""``.sporadik`` on DataArrays opened from a store: statistics per position, read from its layouts.

Registered when the package is imported, which every process holding a sporadik variable has
done (unpickling a reader or a backend array imports the package), dask workers included. Imports
xarray and the standard library only, so the entry point stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import xarray as xr

from sporadik_dask.format.errors import SporadikError

if TYPE_CHECKING:
    from sporadik_dask.read import StoreReader

__all__ = ["READER_KEY", "SporadikAccessor"]

#: Where an opened variable's encoding keeps the reader of the store it came from.
READER_KEY = "sporadik_reader"


@xr.register_dataarray_accessor("sporadik")
class SporadikAccessor:
    """Statistics per position along a dimension, from the layout making it contiguous.

    ``da.sporadik.nnz("gene")`` and ``da.sporadik.maxima("gene")`` read no value
    (``diff(indptr)`` and the stored ``maxima``); ``da.sporadik.totals("gene")`` reads the
    layout's values and nothing else (no index, no sort). ``da.sporadik.tocsr()`` hands the
    values to scipy, anndata and scanpy as the ``csr_matrix`` they take.
    """

    def __init__(self, array: xr.DataArray) -> None:
        self._array = array

    def _axis(self, dim: str) -> tuple[StoreReader, int]:
        from sporadik_dask.read import StoreReader

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
        _refuse_long(dim, int(reader.shape[axis]), [d for d in self._array.dims if d != dim])
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

    def tocsr(self) -> Any:
        """The variable (cells x genes) as a ``scipy.sparse.csr_matrix`` with int32 indices
        where they fit: what anndata and scanpy take. A whole store is its row layout's own
        arrays; a selection or a chunked variable is read (computed) first."""
        from sporadik_dask.backend.handoff import to_csr

        return to_csr(self._array.variable)

    def _along(self, dim: str, values: Any, name: str) -> xr.DataArray:
        coords = {dim: self._array.coords[dim]} if dim in self._array.coords else {}
        return xr.DataArray(values, dims=(dim,), coords=coords, name=name)


def _refuse_long(dim: str, length: int, others: list[Any]) -> None:
    """Refuse a dense statistic per position of an axis past ``sporadik.max-positions`` (a
    genome's 3.1e9 positions: 23 GiB of int64), naming the sparse reductions that give it."""
    from sporadik_dask.store.describe import max_positions

    limit = max_positions()
    if length <= limit:
        return
    over = repr(others[0]) if len(others) == 1 else repr(others)
    raise SporadikError(
        f"Dimension {dim!r} has {length:,} positions: a statistic per position would be a "
        f"dense array of {8 * length / 2**30:,.1f} GiB, past the limit of {limit:,} positions. "
        f"Reduce lazily instead, for a sparse.COO holding only the positions with values: "
        f"(da != 0).sum({over}) for nnz, da.sum({over}) for totals, abs(da).max({over}) for "
        "maxima. To build the dense array anyway, raise dask.config "
        "'sporadik.max-positions'."
    )
