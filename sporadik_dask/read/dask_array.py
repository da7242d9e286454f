"""``from_sporadik``: a store as a dask array of sparse chunks, each task reading only its runs.

The graph is dask's own ``from_array`` over a :class:`~sporadik_dask.read.reader.StoreReader`
fixed to one layout, so dask's getter reads each block and fuses later slices into the read. The
array is a :class:`~sporadik_dask.read.window.SporadikArray`: its selections, and chains of them,
are new reads of the positions they resolve to (numpy's values, only the selected runs read).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import dask.array as da

from sporadik_dask.format.errors import LayoutError
from sporadik_dask.planning.budgets import balanced_blocks
from sporadik_dask.read.reader import Format, StoreReader
from sporadik_dask.read.transport import keep_fill_values_in_transit
from sporadik_dask.store.describe import LayoutDescription, open_store
from sporadik_dask.store.storage import StoreLike, location_of

__all__ = ["from_sporadik"]


def from_sporadik(
    store: StoreLike,
    *,
    chunks: Any = "auto",
    axis: int | None = None,
    storage_options: dict[str, Any] | None = None,
    format: Format = "coo",
) -> da.Array:
    """A dask array of ``sparse.COO`` chunks over the store, each task reading only its runs.

    ``x[key]`` gives numpy's ``dense[key]``: a key of integers, slices and one list, integer
    array or 1-D mask at most is a new read of the positions it selects, in ``sparse.COO``
    blocks (with ``format="gcxs"``, keys of integers and step-1 slices only are dask's, fused
    into the read in its format), and so is a selection of that; any other key is dask's.

    Parameters
    ----------
    store
        A local path, a URL (with ``storage_options``), or a zarr store object.
    chunks
        ``"auto"`` cuts the layout's indexed axis by its values (from ``indptr``) into blocks
        of at most dask's ``array.chunk-size`` in sparse bytes, enough of them to keep every
        core busy (:mod:`sporadik_dask.planning.budgets`), whole along the other axes; anything else
        is taken as dask's ``chunks=`` and reads no chunk to build the array.
    axis
        The layout to read from; default the lowest axis the store makes contiguous.
    format
        ``"coo"`` for ``sparse.COO`` chunks, or ``"gcxs"`` for ``sparse.GCXS`` chunks compressed
        along ``axis``: built from the layout's own arrays without sorting, so reductions along
        the layout's runs (``sum`` over the other axes) are several times cheaper.
    """
    keep_fill_values_in_transit()  # a client made after this package's reads were imported
    import sparse
    from dask.base import tokenize

    from sporadik_dask.read.blocks import read_blocks
    from sporadik_dask.read.window import as_sporadik_array

    opened = open_store(store, storage_options=storage_options)
    layouts = opened.description.layouts
    chosen = min(layouts) if axis is None else int(axis)
    if chosen not in layouts:
        raise LayoutError(
            f"{location_of(store)} has no layout making axis {chosen} contiguous (it has "
            f"{sorted(layouts)}); reading along it would scan another. Pass one of those, or "
            f"write it with sporadik_dask.add_axis(store, {chosen})."
        )
    reader = StoreReader.from_opened(opened, axis=chosen, format=format)
    if isinstance(chunks, str) and chunks == "auto":
        chunks = _balanced_chunks(reader, layouts[chosen])
    meta = sparse.COO.from_numpy(np.zeros((0,) * reader.ndim, dtype=reader.dtype))
    if format == "gcxs":
        meta = meta.asformat("gcxs", compressed_axes=(chosen,))
    name = f"from-sporadik-{tokenize(reader, chunks)}"
    return as_sporadik_array(read_blocks(reader, chunks, meta, name=name))


def _balanced_chunks(reader: StoreReader, layout: LayoutDescription) -> tuple[tuple[int, ...], ...]:
    """Blocks along the indexed axis sized by
    :func:`~sporadik_dask.planning.budgets.balanced_blocks` from the layout's real counts (all of
    ``indptr``), whole along the other axes."""
    indptr = np.concatenate(([0], np.cumsum(reader.counts(layout.indexed_axis))))
    along = balanced_blocks(layout, indptr)
    return tuple(
        along if a == layout.indexed_axis else (size,) for a, size in enumerate(reader.shape)
    )
