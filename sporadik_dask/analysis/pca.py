"""PCA of a store's log-normalized values over a selection of genes, out of core.

Centered implicitly, as scanpy's sparse paths do, so no block is made dense: each span of cells
(the runs of the store's layout along the cells, read straight from the reader; or, for any other
dask array, each block of cells) selects the genes from its coordinates, applies the recorded
elementwise steps to their values in numpy, and gives its count, its mean per gene and its
genes-by-genes co-moment, from the sparse Gram matrix ``Xᵀ X``; pieces merge in a tree by Chan's
formula (the matrix form of dask's ``moment_combine``). The covariance's top eigenvectors are the
components; a second pass projects each piece, ``X V - mean V``. Memory per task: a piece's
values and a few genes-by-genes matrices (32 MB each at 2,000 genes).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sporadik_dask.analysis.source import as_dask, cells_axis, recorded_read
from sporadik_dask.format.errors import SporadikError
from sporadik_dask.kernels.gram import gram as dense_gram
from sporadik_dask.read.blocks import reader_of
from sporadik_dask.reduce.elementwise import Steps, evaluate

__all__ = ["CoMoments", "Components", "pca"]

#: Pieces' co-moments one task merges: each holds a genes-by-genes matrix (32 MB at 2,000
#: genes), and the leaves of a merge wait for it; 2 in place of 8 took the peak of HVG then PCA
#: of 23 M values from 0.89 to 0.68 GiB (benchmarks/analysis.py).
MERGE_FAN_IN = 2

#: Values a span of cells holds at most: a task holds its indices, values and coordinates
#: (about 40 bytes a value) besides the genes-by-genes matrices.
SPAN_VALUES = 2**21

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
    pieces = _Pieces.of(data, axis, genes)
    moments = pieces.merged()
    (found,) = dask.compute(dask.delayed(components_of, pure=True)(moments, n_comps))
    projected = pieces.projected(found, np.dtype(dtype))
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


class _Pieces(NamedTuple):
    """Pieces of cells, each a call giving its cells by the selected genes as a CSR matrix."""

    #: Per piece, ``(load, *arguments)`` (some arguments delayed): ``load(*arguments)``.
    loads: list[tuple[Any, ...]]
    #: Cells per piece.
    cells: list[int]

    @classmethod
    def of(cls, data: Any, axis: int, genes: npt.NDArray[np.int64]) -> _Pieces:
        """Spans of the runs of the store's layout along the cells when ``data`` is a whole
        store's read with recorded steps, else ``data``'s blocks joined along the genes.

        The genes are selected in each piece's task, from its coordinates: a read of a list of
        genes is cut into blocks of genes, not of cells, and dask's own selection of
        ``sparse.COO`` blocks scans every coordinate once per gene. A span's runs come straight
        from the reader, with no ``sparse.COO`` made, which took half of a pass
        (docs/benchmarks.md, "Numbers behind the code's choices")."""
        import dask

        columns = np.full(data.shape[1 - axis], -1, dtype=np.int64)
        columns[genes] = np.arange(genes.size)
        held = dask.delayed(columns, pure=True)
        found = recorded_read(data)
        reader = None if found is None else reader_of(found.source)
        layouts = getattr(getattr(reader, "description", None), "layouts", {})
        if found is None or axis not in layouts:
            return cls._of_blocks(data, axis, held)
        steps = found.steps
        vectors = [np.asarray(v) for v in dask.compute(*found.vectors)]  # once, not per pass
        spans = _span_bounds(reader, layouts[axis], found.source.numblocks[axis])
        whole = [dask.delayed(v, pure=True) for v in vectors]
        loads = []
        for first, last in zip(spans[:-1].tolist(), spans[1:].tolist(), strict=True):
            operands = [
                v[first:last] if a == axis else w
                for v, w, a in zip(vectors, whole, steps.axes, strict=True)
            ]
            loads.append((span_csr, reader, axis, (first, last), steps, held, *operands))
        return cls(loads, np.diff(spans).tolist())

    @classmethod
    def _of_blocks(cls, data: Any, axis: int, columns: Any) -> _Pieces:
        read = data.data
        steps = Steps((), np.dtype(data.dtype), np.dtype(data.dtype))
        if read.numblocks[1 - axis] > 1:
            read = read.rechunk({1 - axis: -1}, method="tasks")
        blocks = read.to_delayed()
        blocks = blocks[:, 0] if axis == 0 else blocks[0, :]
        loads = [(block_csr, block, steps, axis, columns) for block in blocks]
        return cls(loads, list(read.chunks[axis]))

    def merged(self) -> Any:
        """The co-moments of every piece, merged in a tree (delayed)."""
        import dask

        moments = dask.delayed(piece_moments, pure=True)
        merge = dask.delayed(merge_moments, pure=True)
        level = [moments(*load) for load in self.loads]
        while len(level) > 1:
            level = [
                merge(*level[i : i + MERGE_FAN_IN]) for i in range(0, len(level), MERGE_FAN_IN)
            ]
        return level[0]

    def projected(self, found: Components, dtype: np.dtype[Any]) -> Any:
        """Each piece's cells on the components, as a dask array (cells by components)."""
        import dask
        import dask.array as da

        project = dask.delayed(project_piece, pure=True)
        axes = dask.delayed(found, pure=True, traverse=False)
        parts = [
            da.from_delayed(
                project(axes, dtype, *load),
                shape=(cells, found.components.shape[0]),
                dtype=dtype,
            )
            for load, cells in zip(self.loads, self.cells, strict=True)
        ]
        return da.concatenate(parts, axis=0)


def _span_bounds(reader: Any, layout: Any, spans: int) -> npt.NDArray[np.int64]:
    """Bounds of ``spans`` spans (or more, of :data:`SPAN_VALUES` each) of the layout's
    positions, about equal in values."""
    from sporadik_dask.planning.plan import partition_bounds

    ((lo, hi),) = reader.brackets([(layout, np.arange(layout.positions, dtype=np.int64))])
    indptr = np.concatenate(([0], np.cumsum(hi - lo)))
    per_span = min(SPAN_VALUES, -(-int(indptr[-1]) // max(spans, 1)))
    bounds = partition_bounds(indptr, max(1, per_span))
    if bounds.size < 2:
        bounds = np.array([0, layout.positions], dtype=np.int64)
    return np.asarray(bounds, dtype=np.int64)


def span_csr(
    reader: Any,
    axis: int,
    span: tuple[int, int],
    steps: Steps,
    columns: npt.NDArray[np.int64],
    *vectors: Any,
) -> Any:
    """The cells ``span`` of the layout along ``axis`` (a run each), as :func:`_csr` makes
    them: the runs' indices and values read, nothing else."""
    layout = reader.description.layouts[axis]
    first, last = span
    ((lo, hi),) = reader.brackets([(layout, np.arange(first, last, dtype=np.int64))])
    indices, values = reader.runs(layout, lo, hi)
    coords = [np.zeros(0, np.int64)] * 2
    coords[axis] = np.repeat(np.arange(last - first, dtype=np.int64), hi - lo)
    coords[1 - axis] = indices
    return _csr(np.stack(coords), values, last - first, steps, axis, columns, vectors)


def block_csr(
    block: Any, steps: Steps, axis: int, columns: npt.NDArray[np.int64], *vectors: Any
) -> Any:
    """A block (``sparse.COO`` or anything ``sparse.as_coo`` takes) as :func:`_csr` makes it."""
    import sparse

    coo = sparse.as_coo(block)
    return _csr(coo.coords, coo.data, coo.shape[axis], steps, axis, columns, vectors)


def _csr(
    coords: npt.NDArray[np.int64],
    values: npt.NDArray[Any],
    cells: int,
    steps: Steps,
    axis: int,
    columns: npt.NDArray[np.int64],
    vectors: tuple[Any, ...],
) -> Any:
    """Values at ``coords`` (cells along ``axis``) of the selected genes (``columns``), the steps
    applied, as a float64 ``csr_matrix`` of cells by selected genes."""
    import scipy.sparse as sp

    column = columns[coords[1 - axis]]
    kept = column >= 0
    coords = coords[:, kept]
    at = [np.asarray(v)[coords[a]] for v, a in zip(vectors, steps.axes, strict=True)]
    values = evaluate(steps, values[kept], at).astype(np.float64, copy=False)
    shape = (cells, int(columns.max(initial=-1)) + 1)
    return sp.csr_matrix((values, (coords[axis], column[kept])), shape=shape)


def piece_moments(load: Any, *arguments: Any) -> CoMoments:
    """A piece's :class:`CoMoments`: the mean from the column sums, the co-moment as the
    Gram matrix (:func:`~sporadik_dask.kernels.gram.gram`) less ``cells * outer(mean, mean)``
    (float64; log-normalized values lose no digit that matters there), merged across pieces
    without cancellation."""
    x = load(*arguments)
    cells, genes = x.shape
    if cells == 0:
        return CoMoments(0, np.zeros(genes), np.zeros((genes, genes)))
    mean = np.asarray(x.sum(axis=0)).ravel() / cells
    gram = dense_gram(x)
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


def project_piece(
    found: Components, dtype: np.dtype[Any], load: Any, *arguments: Any
) -> npt.NDArray[Any]:
    """A piece's cells, centered, on the components: ``X V - mean V``, X kept sparse."""
    x = load(*arguments)
    axes = found.components.T
    out: npt.NDArray[Any] = (x @ axes - found.mean @ axes).astype(dtype)
    return out
