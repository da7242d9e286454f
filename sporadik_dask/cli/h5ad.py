"""An .h5ad's sparse matrix as a dask array of scipy blocks, its compressed chunks decoded on
every core.

h5py decodes a dataset's chunks under its one global lock, so anndata's lazy blocks of a gzip
.h5ad inflate one at a time however many threads ask. Here a block's task reads its HDF5 chunks
raw (``read_direct_chunk``: a copy of stored bytes under the lock) and undoes deflate and shuffle
itself, with zlib, which releases the GIL: dask's threads decode side by side. A dataset with
any other filter is read by h5py as it is.
"""

from __future__ import annotations

import itertools
import os
import zlib
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["sparse_matrix"]

#: Values per block: what the writer's own pieces of an in-memory array hold (a few tens of MB
#: of coordinates and values).
BLOCK_VALUES = 2**22

#: HDF5's filter codes (``H5Z_FILTER_DEFLATE``, ``H5Z_FILTER_SHUFFLE``): the two undone here.
DEFLATE, SHUFFLE = 1, 2


def sparse_matrix(path: str, group: Any, values: int = BLOCK_VALUES) -> Any:
    """The CSR or CSC matrix of the h5py ``group`` in the file at ``path``, as a dask array of
    scipy blocks of whole rows (CSR) or columns (CSC) holding about ``values`` values each; None
    when ``group`` is not a sparse matrix anndata wrote.

    The file's size and time of change are in the blocks' names, so a file rewritten since gives
    other keys.
    """
    import scipy.sparse
    from dask.base import tokenize

    from sporadik_dask.planning.plan import partition_bounds
    from sporadik_dask.read.dask_model import from_graph

    encoding = group.attrs.get("encoding-type")
    if encoding not in ("csr_matrix", "csc_matrix"):
        return None
    shape = tuple(int(n) for n in group.attrs["shape"])
    compressed = 0 if encoding == "csr_matrix" else 1
    indptr = np.asarray(group["indptr"][:], dtype=np.int64)
    dtype = group["data"].dtype
    bounds = partition_bounds(indptr, values).tolist()
    if len(bounds) == 1:  # an empty axis: one block of nothing
        bounds = [0, 0]
    stat = os.stat(path)
    token = tokenize(os.path.abspath(path), stat.st_size, stat.st_mtime_ns, group.name, bounds)
    name = f"h5ad-{encoding.replace('_', '-')}-{token}"
    graph: dict[Any, Any] = {}
    for i, (start, stop) in enumerate(itertools.pairwise(bounds)):
        key = (name, i, 0) if compressed == 0 else (name, 0, i)
        graph[key] = (read_block, path, group.name, encoding, start, stop, shape)
    sizes = tuple(np.diff(bounds).tolist())
    chunks = (sizes, (shape[1],)) if compressed == 0 else ((shape[0],), sizes)
    kind = scipy.sparse.csr_matrix if compressed == 0 else scipy.sparse.csc_matrix
    return from_graph(graph, name, chunks, kind((0, 0), dtype=dtype))


def read_block(
    path: str, group: str, encoding: str, start: int, stop: int, shape: tuple[int, int]
) -> Any:
    """Rows (CSR) or columns (CSC) ``start:stop`` of the matrix at ``group`` of the file."""
    import h5py
    import scipy.sparse

    with h5py.File(path, "r") as file:
        matrix = file[group]
        indptr = np.asarray(matrix["indptr"][start : stop + 1], dtype=np.int64)
        lo, hi = int(indptr[0]), int(indptr[-1])
        data = elements(matrix["data"], lo, hi)
        indices = elements(matrix["indices"], lo, hi)
    indptr -= lo
    if encoding == "csr_matrix":
        return scipy.sparse.csr_matrix((data, indices, indptr), shape=(stop - start, shape[1]))
    return scipy.sparse.csc_matrix((data, indices, indptr), shape=(shape[0], stop - start))


def elements(dataset: Any, lo: int, hi: int) -> npt.NDArray[Any]:
    """Elements ``lo:hi`` of a one-axis HDF5 dataset, its chunks inflated outside h5py's lock.

    1. A dataset stored whole, or with a filter other than deflate and shuffle, is read by h5py.
    2. Otherwise each chunk ``lo:hi`` reaches is read raw, under h5py's lock (one never written
       is read by h5py, which gives its fill value).
    3. Its filters are undone in reverse order, skipping those its filter mask says were not
       applied: zlib inflates (releasing the GIL), numpy undoes the byte shuffle.
    4. The chunk's share of ``lo:hi`` is copied into the result.
    """
    filters = _filters(dataset)
    if filters is None or hi <= lo:
        return np.asarray(dataset[lo:hi])
    step = int(dataset.chunks[0])
    out = np.empty(hi - lo, dtype=dataset.dtype)
    for first in range(lo - lo % step, hi, step):
        start, stop = max(lo, first), min(hi, first + step)
        try:
            mask, raw = dataset.id.read_direct_chunk((first,))
        except RuntimeError:  # a chunk never written: h5py gives its fill value
            out[start - lo : stop - lo] = dataset[start:stop]
            continue
        chunk = _decoded(raw, mask, filters, dataset.dtype)
        out[start - lo : stop - lo] = chunk[start - first : stop - first]
    return out


def _filters(dataset: Any) -> tuple[int, ...] | None:
    """The dataset's filter codes in the order they were applied, or None when h5py must read
    it (stored whole, not one axis, or a filter not undone here)."""
    if dataset.chunks is None or dataset.ndim != 1:
        return None
    plist = dataset.id.get_create_plist()
    codes = tuple(plist.get_filter(i)[0] for i in range(plist.get_nfilters()))
    return codes if set(codes) <= {DEFLATE, SHUFFLE} else None


def _decoded(
    raw: bytes, mask: int, filters: tuple[int, ...], dtype: np.dtype[Any]
) -> npt.NDArray[Any]:
    """A chunk's stored bytes with ``filters`` undone, last applied first, as ``dtype``."""
    buffer: bytes = raw
    for i in reversed(range(len(filters))):
        if mask & (1 << i):  # not applied to this chunk
            continue
        if filters[i] == DEFLATE:
            buffer = zlib.decompress(buffer)
        else:
            planes = np.frombuffer(buffer, dtype=np.uint8).reshape(dtype.itemsize, -1)
            buffer = planes.T.tobytes()
    return np.frombuffer(buffer, dtype=dtype)
