"""PCA of a store's log-normalized values over a selection of genes, out of core.

Centered implicitly, as scanpy's sparse paths do, so no block is made dense: each block of
cells (a read of the selected genes only, the recorded elementwise steps applied to its values
in numpy) gives its count, its mean per gene and its genes-by-genes co-moment, from the sparse
Gram matrix ``Xᵀ X`` of the block; blocks merge in a tree by Chan's formula (the matrix form of
dask's ``moment_combine``). The covariance's top eigenvectors are the components; a second pass
projects each block, ``X V - mean V``. Memory per task: a block's values and a few genes-by-genes
matrices (32 MB each at 2,000 genes).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sporadik_dask.analysis.source import as_dask, cells_axis, recorded_read
from sporadik_dask.format.errors import SporadikError
from sporadik_dask.reduce.elementwise import Steps, evaluate

__all__ = ["CoMoments", "Components", "pca"]

#: Blocks' co-moments one task merges.
MERGE_FAN_IN = 8

#: Components when none are asked for, as scanpy's default.
N_COMPS = 50


class CoMoments(NamedTuple):
    """The co-moments of a block of cells over the selected genes."""

    #: Cells.
    cells: int
    #: Mean per gene, float64.
    mean: npt.NDArray[np.float64]
    #: Sum over cells of the outer product of each cell's deviation from ``mean``, float64.
    m2: npt.NDArray[np.float64]


class Components(NamedTuple):
    """The principal axes of a covariance, largest variance first."""

    mean: npt.NDArray[np.float64]
    #: One row per component, one column per gene; each row's largest entry (in absolute
    #: value) positive, scikit-learn's sign convention.
    components: npt.NDArray[np.float64]
    variance: npt.NDArray[np.float64]
    variance_ratio: npt.NDArray[np.float64]


def pca(
    data: Any,
    n_comps: int | None = None,
    *,
    mask_var: Any = None,
    dim: str | None = None,
    dtype: Any = np.float32,
) -> Any:
    """scanpy's ``pp.pca`` (zero-centered, ``return_info=True``) of a store's values, out of core.

    Parameters
    ----------
    data
        Cells by genes: a variable opened from a store, lazily or with ``chunks=``, or the
        elementwise steps of one (``np.log1p(X / X.sum("gene") * 1e4)``).
    n_comps
        Components (default: 50, or fewer than the cells or genes).
    mask_var
        Which genes (booleans, one per gene; e.g. ``highly_variable_genes(...)
        ["highly_variable"]``); all genes if None. Only the selected genes are read.
    dim
        The cells' dim (default: the first).
    dtype
        The projection's dtype (scanpy's default, float32).

    Returns
    -------
    xarray.Dataset
        ``X_pca`` (cells by ``pc``, a dask array: the projection is a second pass, computed
        when asked for), ``components`` (``pc`` by the selected genes), ``variance`` and
        ``variance_ratio`` (per ``pc``), as scanpy's ``obsm["X_pca"]``, ``varm["PCs"]`` and
        ``uns["pca"]``; the variances with ddof 1, as scikit-learn's.
    """
    import dask
    import xarray as xr

    axis = cells_axis(data, dim)
    data = as_dask(data)
    cells_dim, genes_dim = data.dims[axis], data.dims[1 - axis]
    genes = _selected(mask_var, data.shape[1 - axis])
    if genes.size == 0:
        raise SporadikError(
            "mask_var selects no gene, so there is nothing to decompose; pass a mask with "
            "some gene True (or None for all genes)."
        )
    cells = data.shape[axis]
    if n_comps is None:
        n_comps = min(N_COMPS, genes.size - 1, cells - 1)
    if not 0 < n_comps <= min(genes.size, cells):
        raise SporadikError(
            f"n_comps={n_comps!r} components of {cells} cells by {genes.size} genes: there "
            f"are at most {min(genes.size, cells)}; ask for fewer."
        )
    blocks = _Blocks.of(data, axis, genes)
    moments = blocks.merged()
    (found,) = dask.compute(dask.delayed(components_of, pure=True)(moments, n_comps))
    projected = blocks.projected(found, np.dtype(dtype))
    gene_coords = {}
    if genes_dim in data.coords:
        gene_coords = {genes_dim: data.coords[genes_dim].isel({genes_dim: genes})}
    cell_coords = {cells_dim: data.coords[cells_dim]} if cells_dim in data.coords else {}
    return xr.Dataset(
        {
            "X_pca": xr.DataArray(projected, dims=(cells_dim, "pc"), coords=cell_coords),
            "components": xr.DataArray(
                found.components, dims=("pc", genes_dim), coords=gene_coords
            ),
            "variance": ("pc", found.variance),
            "variance_ratio": ("pc", found.variance_ratio),
        }
    )


def _selected(mask_var: Any, genes: int) -> npt.NDArray[np.int64]:
    """The positions of the genes selected by a boolean mask (or all)."""
    if mask_var is None:
        return np.arange(genes, dtype=np.int64)
    mask = np.asarray(mask_var)
    if mask.dtype != bool or mask.shape != (genes,):
        raise SporadikError(
            f"mask_var is {mask.dtype} of shape {mask.shape}, not one boolean per gene "
            f"({genes}); positions or labels would select other genes than meant. Pass a "
            "boolean mask, e.g. the highly_variable column."
        )
    return np.flatnonzero(mask).astype(np.int64)


class _Blocks(NamedTuple):
    """The blocks of cells of a read, whole along the genes, with the steps' operands of each."""

    #: dask array of the read (the store's raw values, or any dask array of values).
    read: Any
    steps: Steps
    axis: int
    #: Each gene's column among the selected genes, -1 for a gene left out (delayed).
    columns: Any
    #: Per block of cells, the vector operands (delayed) in the order the steps number them.
    operands: list[list[Any]]

    @classmethod
    def of(cls, data: Any, axis: int, genes: npt.NDArray[np.int64]) -> _Blocks:
        """The store's own read beneath ``data`` when ``data`` is a whole store's read with
        recorded steps, else ``data``'s blocks; either joined along the genes.

        The genes are selected in each block's task, from the block's coordinates: a read of
        a list of genes is cut into blocks of genes, not of cells, and dask's own selection of
        ``sparse.COO`` blocks scans every coordinate once per gene (12 s where the whole read
        took 0.2 s)."""
        import dask
        import dask.array as da

        found = recorded_read(data)
        if found is None:
            read, vectors = data.data, ()
            steps = Steps((), np.dtype(data.dtype), np.dtype(data.dtype))
        else:  # the vectors (a total per cell) computed once, not again in each pass
            read, steps = found.source, found.steps
            vectors = dask.compute(*found.vectors)
        if read.numblocks[1 - axis] > 1:
            read = read.rechunk({1 - axis: -1}, method="tasks")
        columns = np.full(read.shape[1 - axis], -1, dtype=np.int64)
        columns[genes] = np.arange(genes.size)
        pieces = []
        vector: Any
        for vector, vector_axis in zip(vectors, steps.axes, strict=True):
            v = da.from_array(np.asarray(vector))
            if vector_axis == axis:
                pieces.append(list(v.rechunk((read.chunks[axis],)).to_delayed()))
            else:
                (whole,) = v.rechunk(-1).to_delayed()
                pieces.append([whole] * read.numblocks[axis])
        operands = [[p[i] for p in pieces] for i in range(read.numblocks[axis])]
        return cls(read, steps, axis, dask.delayed(columns, pure=True), operands)

    def _delayed_blocks(self) -> list[Any]:
        blocks = self.read.to_delayed()
        return list(blocks[:, 0] if self.axis == 0 else blocks[0, :])

    def merged(self) -> Any:
        """The co-moments of every block, merged in a tree (delayed)."""
        import dask

        moments = dask.delayed(block_moments, pure=True)
        merge = dask.delayed(merge_moments, pure=True)
        level = [
            moments(block, self.steps, self.axis, self.columns, *operands)
            for block, operands in zip(self._delayed_blocks(), self.operands, strict=True)
        ]
        while len(level) > 1:
            level = [
                merge(*level[i : i + MERGE_FAN_IN]) for i in range(0, len(level), MERGE_FAN_IN)
            ]
        return level[0]

    def projected(self, found: Components, dtype: np.dtype[Any]) -> Any:
        """Each block's cells on the components, as a dask array (cells by components)."""
        import dask
        import dask.array as da

        project = dask.delayed(project_block, pure=True)
        axes = dask.delayed(found, pure=True, traverse=False)
        parts = [
            da.from_delayed(
                project(block, self.steps, self.axis, self.columns, dtype, axes, *operands),
                shape=(rows, found.components.shape[0]),
                dtype=dtype,
            )
            for block, operands, rows in zip(
                self._delayed_blocks(), self.operands, self.read.chunks[self.axis], strict=True
            )
        ]
        return da.concatenate(parts, axis=0)


def _csr(
    block: Any,
    steps: Steps,
    axis: int,
    columns: npt.NDArray[np.int64],
    vectors: tuple[Any, ...],
) -> Any:
    """A block (``sparse.COO`` or anything ``sparse.as_coo`` takes) of the selected genes
    (``columns``), the steps applied to its values, as a float64 ``csr_matrix`` of cells by
    selected genes."""
    import scipy.sparse as sp
    import sparse

    coo = sparse.as_coo(block)
    column = columns[coo.coords[1 - axis]]
    kept = column >= 0
    coords = coo.coords[:, kept]
    at = [np.asarray(v)[coords[a]] for v, a in zip(vectors, steps.axes, strict=True)]
    values = evaluate(steps, coo.data[kept], at).astype(np.float64, copy=False)
    shape = (coo.shape[axis], int(columns.max(initial=-1)) + 1)
    return sp.csr_matrix((values, (coords[axis], column[kept])), shape=shape)


def block_moments(
    block: Any, steps: Steps, axis: int, columns: npt.NDArray[np.int64], *vectors: Any
) -> CoMoments:
    """A block's :class:`CoMoments`: the mean from the column sums, the co-moment as the
    sparse Gram matrix less ``cells * outer(mean, mean)`` (float64; log-normalized values lose
    no digit that matters there), merged across blocks without cancellation."""
    x = _csr(block, steps, axis, columns, vectors)
    cells, genes = x.shape
    if cells == 0:
        return CoMoments(0, np.zeros(genes), np.zeros((genes, genes)))
    mean = np.asarray(x.sum(axis=0)).ravel() / cells
    gram = (x.T @ x).toarray()
    gram -= cells * np.outer(mean, mean)
    return CoMoments(cells, mean, gram)


def merge_moments(*parts: CoMoments) -> CoMoments:
    """Blocks' co-moments combined by Chan's formula: counts add, the mean moves by each part's
    distance from it weighted by its share, and that distance's outer product adds to ``m2``."""
    cells, mean, m2 = parts[0].cells, parts[0].mean, parts[0].m2.copy()
    for part in parts[1:]:
        if part.cells == 0:
            continue
        total = cells + part.cells
        delta = part.mean - mean
        mean = mean + delta * (part.cells / total)
        m2 += part.m2 + np.outer(delta, delta) * (cells * part.cells / total)
        cells = total
    return CoMoments(cells, mean, m2)


def components_of(moments: CoMoments, n_comps: int) -> Components:
    """The ``n_comps`` principal axes of the covariance (ddof 1), by a symmetric eigensolver."""
    import scipy.linalg

    genes = moments.mean.size
    covariance = moments.m2 / max(moments.cells - 1, 1)
    variance, vectors = scipy.linalg.eigh(covariance, subset_by_index=[genes - n_comps, genes - 1])
    order = np.argsort(variance)[::-1]
    axes = vectors[:, order].T
    largest = np.abs(axes).argmax(axis=1)
    axes *= np.sign(axes[np.arange(n_comps), largest])[:, None]
    variance = variance[order]
    total = float(np.trace(covariance))
    return Components(moments.mean, axes, variance, variance / total)


def project_block(
    block: Any,
    steps: Steps,
    axis: int,
    columns: npt.NDArray[np.int64],
    dtype: np.dtype[Any],
    found: Components,
    *vectors: Any,
) -> npt.NDArray[Any]:
    """A block's cells, centered, on the components: ``X V - mean V``, X kept sparse."""
    x = _csr(block, steps, axis, columns, vectors)
    axes = found.components.T
    out: npt.NDArray[Any] = (x @ axes - found.mean @ axes).astype(dtype)
    return out
