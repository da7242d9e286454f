"""``from_sporadik``: a store as a dask array of sparse chunks, each task reading only its runs.

The graph is dask's own ``from_array`` over a :class:`~sporadik_dask.read.reader.StoreReader`
fixed to one layout, so dask's getter reads each block and fuses later slices into the read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sporadik_dask.describe import LayoutDescription
from sporadik_dask.errors import LayoutError
from sporadik_dask.read.reader import Format, StoreReader, describe_store
from sporadik_dask.storage import StoreLike, location_of

__all__ = ["from_sporadik"]


def from_sporadik(
    store: StoreLike,
    *,
    chunks: Any = "auto",
    axis: int | None = None,
    storage_options: dict[str, Any] | None = None,
    format: Format = "coo",
) -> Any:
    """A dask array of ``sparse.COO`` chunks over the store, each task reading only its runs.

    Parameters
    ----------
    store
        A local path, a URL (with ``storage_options``), or a zarr store object.
    chunks
        ``"auto"`` cuts the layout's indexed axis into blocks of about dask's
        ``array.chunk-size`` worth of values (from ``indptr``), whole along the other axes;
        anything else is taken as dask's ``chunks=`` and reads no chunk to build the array.
    axis
        The layout to read from; default the lowest axis the store makes contiguous.
    format
        ``"coo"`` for ``sparse.COO`` chunks, or ``"gcxs"`` for ``sparse.GCXS`` chunks compressed
        along ``axis``: built from the layout's own arrays without sorting, so reductions along
        the layout's runs (``sum`` over the other axes) are several times cheaper.
    """
    import dask.array as da
    import sparse
    from dask.base import tokenize

    description, opened = describe_store(store, storage_options)
    layouts = description.layouts
    chosen = min(layouts) if axis is None else int(axis)
    if chosen not in layouts:
        raise LayoutError(
            f"{location_of(store)} has no layout making axis {chosen} contiguous (it has "
            f"{sorted(layouts)}); reading along it would scan another. Pass one of those, or "
            f"write it with sporadik_dask.add_axis(store, {chosen})."
        )
    reader = StoreReader(
        store,
        storage_options=storage_options,
        description=description,
        axis=chosen,
        format=format,
    )
    reader.adopt(opened)
    if isinstance(chunks, str) and chunks == "auto":
        chunks = _balanced_chunks(reader, layouts[chosen])
    meta = sparse.COO.from_numpy(np.zeros((0,) * reader.ndim, dtype=reader.dtype))
    if format == "gcxs":
        meta = meta.asformat("gcxs", compressed_axes=(chosen,))
    name = f"from-sporadik-{tokenize(reader, chunks)}"
    return da.from_array(reader, chunks=chunks, meta=meta, asarray=False, name=name)


def _balanced_chunks(reader: StoreReader, layout: LayoutDescription) -> tuple[tuple[int, ...], ...]:
    """Blocks along the indexed axis holding about ``array.chunk-size`` of values each.

    The target is a whole number of zarr chunks of ``data``, so block edges fall within one run
    of a chunk edge and few chunks are read by two tasks.
    """
    import dask
    from dask.utils import parse_bytes

    from sporadik_dask.plan import partition_bounds

    budget = parse_bytes(dask.config.get("array.chunk-size"))
    per_value = layout.dtype.itemsize + 8 * len(reader.shape)
    chunk = layout.chunks["data"]
    target = max(budget // per_value // chunk, 1) * chunk
    indptr = np.concatenate(([0], np.cumsum(reader.counts(layout.indexed_axis))))
    bounds = partition_bounds(indptr, target)
    along = tuple(np.diff(bounds).tolist()) or (0,)
    return tuple(
        along if a == layout.indexed_axis else (size,) for a, size in enumerate(reader.shape)
    )
