"""A sporadik variable handed to scipy, anndata and scanpy: a ``csr_matrix`` with int32 indices.

scanpy and anndata take ``scipy.sparse.csr_matrix``; ``sparse``'s ``tocsr`` gives a ``csr_array``
with int64 indices, which scanpy 1.11's ``normalize_total`` does not special-case: it tried a
dense broadcast, held 1.5 GiB for a 0.4 MiB matrix and failed. A lazily opened variable is
read straight from a layout's runs into CSR (no ``sparse.COO`` coordinates on the way); a chunked
one band of rows at a time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from sporadik_dask.backend.array import Outer, outer_selection
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
    2. Chunked: each band of row blocks computed and converted in a task of its own, the bands
       stacked. Peak: the result twice, and the bands in flight.
    3. In memory (``sparse.COO``, numpy): converted by scipy.
    """
    if variable.ndim != 2:
        raise SporadikError(
            f"tocsr takes a rank-2 variable (cells x genes); this one has dims {variable.dims}. "
            "Select or reduce to two dims first: a CSR matrix has rows and columns only."
        )
    outer = outer_selection(variable._data)
    if outer is not None and outer.backend.ndim == 2 and outer.backend.reader.description.layouts:
        csr = _from_runs(outer)
    elif _is_dask(variable.data):
        csr = _from_bands(variable.data)
    else:
        csr = _scipy(variable.data)
    return _narrowed(csr.data, csr.indices, csr.indptr, variable.shape)


def _from_runs(outer: Outer) -> sp.csr_matrix:
    """The selection read as runs of the layout whose axis it selects the smaller share of.

    1. Pick the axis: of those with a layout, the one whose positions are the smaller fraction
       of its length (the rows' on a tie), so the fewest values are read.
    2. Brackets of its positions, then their runs, indices as stored and checked.
    3. CSR of those runs by ``indptr`` = the cumulated run lengths; the other axis's positions
       taken in scipy (any order, repeats).
    4. Read along the columns, that is the transpose: converted to CSR once.
    """
    reader = outer.backend.reader
    layouts = reader.description.layouts
    shape = reader.shape
    share = {a: len(outer.positions[a]) / max(shape[a], 1) for a in layouts}
    along = min(share, key=lambda a: (share[a], a != outer.axes[0]))
    other = 1 - along
    layout = layouts[along]
    ((lo, hi),) = reader.brackets([(layout, outer.positions[along])])
    indices, data = reader.runs(layout, lo, hi, as_stored=True)
    check_indices(indices, shape[other], f"Layout {layout.path!r} in {reader.location}")
    indptr = np.concatenate(([0], np.cumsum(np.asarray(hi) - np.asarray(lo))))
    read = _narrowed(data, indices, indptr, (len(lo), shape[other]))
    if not outer.whole(other):
        read = read[:, outer.positions[other]]
    if along == outer.axes[0]:
        return read
    return sp.csr_matrix(read.T)


def _from_bands(data: Any) -> sp.csr_matrix:
    """A dask array's bands of row blocks, each computed and converted in a task of its own
    (the concatenation of a band's blocks is the only ``sparse.COO`` held), stacked."""
    import dask

    bands = [dask.delayed(_scipy)(data.blocks[i]) for i in range(data.numblocks[0])]
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
