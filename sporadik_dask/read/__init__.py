"""Reading selections of a store as ``sparse.COO``, each routed to the layout that answers it.

Any selection costs two read waves: the ``indptr`` brackets of the positions asked for, then every
run they name, together (every zarr chunk they touch fetched once, in one batch). The layout is
the one whose runs touch the fewest zarr chunks, which the brackets tell before any value is
read; a selection no present layout narrows is a scan, with a warning.

Modules, one job each: ``selection`` (keys to positions), ``routing`` (pure: which layout),
``fetch`` (the two waves), ``assembly`` (runs to the result, no I/O), ``statistics``
(per-position counts and totals), ``checked`` (a read returns the state opened), ``reader`` (the
:class:`StoreReader` front), ``dask_array`` (:func:`from_sporadik`), ``window`` (selections of
such a dask array as new reads), ``reductions`` (its reductions as one pass over the store) and
``transport`` (blocks sent between processes keep their fill value).
"""

from __future__ import annotations

from sporadik_dask.kernels.numba_cache import cache_sparse_kernels
from sporadik_dask.read.dask_array import from_sporadik
from sporadik_dask.read.reader import StoreReader
from sporadik_dask.read.selection import Selection, normalize_key, normalize_points
from sporadik_dask.read.transport import keep_fill_values_in_transit

__all__ = ["Selection", "StoreReader", "from_sporadik", "normalize_key", "normalize_points"]

cache_sparse_kernels()  # the blocks a read gives meet sparse's kernels: load them, compiled once
keep_fill_values_in_transit()  # on a worker unpickling a read task: distributed is imported
