"""A sporadik variable handed to scipy, anndata and scanpy: a ``csr_matrix`` with int32 indices.

scanpy and anndata take ``scipy.sparse.csr_matrix``; ``sparse``'s ``tocsr`` gives a ``csr_array``
with int64 indices, which scanpy 1.11's ``normalize_total`` does not special-case: it tries a dense
broadcast, which runs out of memory even for a small matrix (docs/benchmarks.md, "Numbers behind the
code's choices"). A lazily opened variable is read straight from a layout's runs into CSR (no
``sparse.COO`` coordinates on the way); a chunked one band of rows at a time.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from sporadik_dask.backend.array import outer_selection
from sporadik_dask.format.errors import SporadikError
from sporadik_dask.format.spec import check_indices

__all__ = ["to_csr"]

#: The largest value an int32 index or index pointer holds.
INT32_MAX = np.iinfo(np.int32).max


def to_csr(variable: Any) -> sp.csr_matrix:
    """A rank-2 variable as a ``csr_matrix``, rows along its first dim, indices and ``indptr``
    int32 where they fit (else int64, as scipy keeps them).

    1. Lazily opened (a whole store, a selection of it, a transposed view): the runs of the
       selected positions along the axis with a layout selecting the smaller share of it, as
       stored, laid into CSR by their ``indptr``; the other axis selected in scipy, and a
       column layout's CSC converted once. Peak: the runs read and the result.
    2. Chunked, still a read of the store or of a window of it (a selection made after
       opening): as 1, from the positions the window reads.
    3. Chunked otherwise: each band of row blocks computed and converted in a task of its own,
       the bands stacked. Peak: the result twice, and the bands in flight.
    4. In memory (``sparse.COO``, numpy): converted by scipy.
    """
    if variable.ndim != 2:
        raise SporadikError(
            f"tocsr takes a rank-2 variable (cells x genes); this one has dims {variable.dims}. "
            "Select or reduce to two dims first: a CSR matrix has rows and columns only."
        )
    outer = _selected(variable._data)
    if outer is not None:
        csr = _from_runs(*outer)
    elif _is_dask(variable.data):
        csr = _from_bands(variable.data)
    else:
        csr = _scipy(variable.data)
    return _narrowed(csr.data, csr.indices, csr.indptr, variable.shape)


def _selected(held: Any) -> tuple[Any, tuple[Any, Any], tuple[int, int]] | None:
    """The reader of a rank-2 store with a layout, the positions along each of its axes the
    variable selects, and the store axis of its rows and columns; None for anything else."""
    from sporadik_dask.read import StoreReader
    from sporadik_dask.read.blocks import StoreWindow, reader_of
    from sporadik_dask.read.selection import as_array

    if _is_dask(held):
        source = reader_of(held)
        if isinstance(source, StoreReader):
            reader, positions = source, tuple(np.arange(n) for n in source.shape)
        elif isinstance(source, StoreWindow) and not source.dropped:
            reader, positions = source.reader, tuple(as_array(p) for p in source.positions)
        else:
            return None
        axes: tuple[int, ...] = (0, 1)
    else:
        outer = outer_selection(held)
        if outer is None:
            return None
        reader, axes = outer.backend.reader, outer.axes
        positions = tuple(as_array(p) for p in outer.positions)
    if len(reader.shape) != 2 or not reader.description.layouts:
        return None
    return reader, (positions[0], positions[1]), (axes[0], axes[1])


def _from_runs(reader: Any, positions: tuple[Any, Any], axes: tuple[int, int]) -> sp.csr_matrix:
    """The selection read as runs of the layout whose axis it selects the smaller share of.

    1. Pick the axis: of those with a layout, the one whose positions are the smaller fraction
       of its length (the rows' on a tie), so the fewest values are read.
    2. Brackets of its positions, then their runs, indices as stored and checked.
    3. CSR of those runs by ``indptr`` = the cumulated run lengths; the other axis's positions
       taken in scipy (any order, repeats).
    4. Read along the columns, that is the transpose: converted to CSR once.
    """
    layouts = reader.description.layouts
    shape = reader.shape
    share = {a: len(positions[a]) / max(shape[a], 1) for a in layouts}
    along = min(share, key=lambda a: (share[a], a != axes[0]))
    other = 1 - along
    layout = layouts[along]
    ((lo, hi),) = reader.brackets([(layout, np.asarray(positions[along], dtype=np.int64))])
    indices, data = reader.runs(layout, lo, hi, as_stored=True)
    check_indices(indices, shape[other], f"Layout {layout.path!r} in {reader.location}")
    indptr = np.concatenate(([0], np.cumsum(np.asarray(hi) - np.asarray(lo))))
    read = _narrowed(data, indices, indptr, (len(lo), shape[other]))
    taken = np.asarray(positions[other], dtype=np.int64)
    if taken.size != shape[other] or not np.array_equal(taken, np.arange(shape[other])):
        read = read[:, taken]
    if along == axes[0]:
        return read
    return sp.csr_matrix(read.T)


def _from_bands(data: Any) -> sp.csr_matrix:
    """A dask array's bands of row blocks, each computed and converted in a task of its own
    (the concatenation of a band's blocks is the only ``sparse.COO`` held), stacked. A band is
    a slice along its blocks' bounds: dask's expression model has no ``.blocks``."""
    import dask

    bounds = np.cumsum((0, *data.chunks[0]))
    bands = [dask.delayed(_scipy)(data[lo:hi]) for lo, hi in itertools.pairwise(bounds)]
    parts = dask.compute(*bands)
    if not parts:
        return sp.csr_matrix(data.shape, dtype=data.dtype)
    return sp.csr_matrix(sp.vstack(parts, format="csr"))


def _scipy(values: Any) -> sp.csr_matrix:
    """Values in memory (``sparse.COO``, scipy, numpy) as a ``csr_matrix``."""
    if hasattr(values, "tocsr"):
        return sp.csr_matrix(values.tocsr())
    return sp.csr_matrix(np.asarray(values))


def _is_dask(values: Any) -> bool:
    return hasattr(values, "dask") and hasattr(values, "numblocks")


def _narrowed(
    data: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    indptr: npt.NDArray[Any],
    shape: tuple[int, ...],
) -> sp.csr_matrix:
    """``csr_matrix`` of the arrays, ``indices`` and ``indptr`` int32 where they fit (scipy's
    own choice), left uncopied where they already are of the width chosen."""
    fits = len(data) <= INT32_MAX and max(shape, default=0) <= INT32_MAX
    width = np.int32 if fits else np.int64
    arrays = (data, indices.astype(width, copy=False), indptr.astype(width, copy=False))
    return sp.csr_matrix(arrays, shape=shape, copy=False)
