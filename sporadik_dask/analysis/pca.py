"""PCA of a store's log-normalized values over a selection of genes, out of core.

Centered implicitly, as scanpy's sparse paths do, so no block is made dense: each piece of cells
(consecutive spans of the runs of the store's layout along the cells, read straight from the
reader; or, for any other dask array, each block of cells) reads its spans one at a time,
selects the genes from their coordinates, applies the recorded elementwise steps to their values
in numpy, and adds their column sums and Gram matrix ``Xᵀ X`` into one genes-by-genes matrix
(its upper triangle, packed); each piece gives its count, its mean per gene and its co-moment,
and pieces merge in a tree by Chan's formula (the matrix form of dask's ``moment_combine``). The
covariance's top eigenvectors are the components; each span is projected, ``X V - mean V``, from
its CSR matrix held by the first pass when the selected values fit :data:`HELD_VALUES`, else
from a second read. Memory per task: a span's values (or its piece's, held) and one or two
packed genes-by-genes matrices (16 MB each at 2,000 genes).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sporadik_dask.analysis.source import as_dask, cells_axis, recorded_read
from sporadik_dask.format.errors import SporadikError
from sporadik_dask.kernels.gram import add_gram, add_outer, diagonal, packed_size, unpacked
from sporadik_dask.kernels.runs import kept_of_runs
from sporadik_dask.read.blocks import reader_of
from sporadik_dask.read.dask_model import delayed_blocks, from_delayed
from sporadik_dask.reduce.elementwise import Steps, evaluate

__all__ = ["CoMoments", "Components", "Read", "pca"]

#: Pieces' co-moments one task merges: each holds a genes-by-genes matrix (16 MB packed at
#: 2,000 genes), and the leaves of a merge wait for it; 2 in place of 8 took the peak of HVG then
#: PCA of 23 M values from 0.89 to 0.68 GiB (benchmarks/analysis.py).
MERGE_FAN_IN = 2

#: Values a span of cells (one CSR part) holds at most: its indices, values and coordinates,
#: about 40 bytes a value (20 MB), while its pairs add into its piece's Gram matrix. Spans no
#: longer cost a genes-by-genes matrix each, so they were made 4 times shorter than the 2**21
#: before; 16 zarr chunks of the benchmark's store (not tuned further).
SPAN_VALUES = 2**19

#: Spans a piece (one task, one Gram matrix) adds up at most; pieces are at least one a core.
#: A piece's own cost is a few passes over its packed matrix (zeroed, centered, merged; an
#: outer product added 0.01 s at 2,000 genes, profiled), against 0.02 s of pairs a span of the
#: benchmark's (not tuned further).
PIECE_SPANS = 64

#: Values of the selected genes the first pass holds for the projection (in CSR, about 8 bytes
#: a value: 64 MB), each piece its share; a piece holding more is read again when projected. At
#: 23 M values, 2,000 of 10,000 genes selected held 4.5 M, and the second read cost 0.5 CPU
#: seconds of the 1.85 that PCA took (docs/benchmarks.md).
HELD_VALUES = 2**23

#: The top components come from ARPACK when the genes are at least this many times as many:
#: 50 of 2,000 in 1.0 s, where LAPACK's ``dsyevr`` of the whole matrix took 2.2 s (one BLAS
#: thread, the same answer to 1e-14).
ARPACK_GENES_PER_COMP = 4

#: Components when none are asked for, as scanpy's default.
N_COMPS = 50


class CoMoments(NamedTuple):
    """The co-moments of a block of cells over the selected genes."""

    #: Cells.
    cells: int
    #: Mean per gene, float64.
    mean: npt.NDArray[np.float64]
    #: Sum over cells of the outer product of each cell's deviation from ``mean``, float64, its
    #: upper triangle packed row by row (:mod:`sporadik_dask.kernels.gram`).
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
        ``X_pca`` (cells by ``pc``, a dask array: computed from the values the first pass held,
        or, where they were too many, a second pass computed when asked for), ``components``
        (``pc`` by the selected genes), ``variance`` and ``variance_ratio`` (per ``pc``), as
        scanpy's ``obsm["X_pca"]``, ``varm["PCs"]`` and ``uns["pca"]``; the variances with
        ddof 1, as scikit-learn's.
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
    reads = pieces.read()
    moments = pieces.merged([read.moments for read in reads])
    found, *held = dask.compute(
        dask.delayed(components_of, pure=True)(moments, n_comps), *[read.held for read in reads]
    )
    projected = pieces.projected(found, np.dtype(dtype), held)
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
    """Pieces of cells, each a call yielding its parts (cells by the selected genes) as CSR
    matrices, one at a time."""

    #: Per piece, ``(parts, *arguments)`` (some arguments delayed): ``parts(*arguments)``.
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
        spans = _span_bounds(reader, layouts[axis])
        whole = [dask.delayed(v, pure=True) for v in vectors]
        loads, cells = [], []
        for bounds in _pieces_of(spans):
            first, last = int(bounds[0]), int(bounds[-1])
            operands = [
                v[first:last] if a == axis else w
                for v, w, a in zip(vectors, whole, steps.axes, strict=True)
            ]
            loads.append((span_parts, reader, axis, bounds, steps, held, *operands))
            cells.append(last - first)
        return cls(loads, cells)

    @classmethod
    def _of_blocks(cls, data: Any, axis: int, columns: Any) -> _Pieces:
        read = data.data
        steps = Steps((), np.dtype(data.dtype), np.dtype(data.dtype))
        if read.numblocks[1 - axis] > 1:
            read = read.rechunk({1 - axis: -1}, method="tasks")
        blocks = delayed_blocks(read)
        blocks = blocks[:, 0] if axis == 0 else blocks[0, :]
        loads = [(block_parts, block, steps, axis, columns) for block in blocks]
        return cls(loads, list(read.chunks[axis]))

    def read(self) -> list[Any]:
        """Each piece's :class:`Read` (delayed), holding its parts within its share of
        :data:`HELD_VALUES`."""
        import dask

        read = dask.delayed(piece_read, pure=True)
        share = HELD_VALUES // max(len(self.loads), 1)
        return [read(share, *load) for load in self.loads]

    @staticmethod
    def merged(moments: list[Any]) -> Any:
        """The pieces' co-moments (delayed), merged in a tree."""
        import dask

        merge = dask.delayed(merge_moments, pure=True)
        level = moments
        while len(level) > 1:
            level = [
                merge(*level[i : i + MERGE_FAN_IN]) for i in range(0, len(level), MERGE_FAN_IN)
            ]
        return level[0]

    def projected(self, found: Components, dtype: np.dtype[Any], held: list[Any]) -> Any:
        """Each piece's cells on the components, as a dask array (cells by components): from
        its parts now where they were held, else from a second read when computed."""
        import dask
        import dask.array as da

        comps = found.components.shape[0]
        if all(parts is not None for parts in held):  # one block, written in place
            out = np.empty((sum(self.cells), comps), dtype=dtype)
            project_parts(found, [x for parts in held for x in parts], out)
            return da.from_array(out, chunks=-1)
        project = dask.delayed(project_piece, pure=True)
        axes = dask.delayed(found, pure=True, traverse=False)
        blocks = []
        for load, cells, parts in zip(self.loads, self.cells, held, strict=True):
            if parts is not None:
                block = project_parts(found, parts, np.empty((cells, comps), dtype=dtype))
                blocks.append(da.from_array(block, chunks=-1))
                continue
            meta = np.empty((0, 0), dtype=dtype)
            blocks.append(from_delayed(project(axes, dtype, *load), (cells, comps), meta))
        return da.concatenate(blocks, axis=0)


def _span_bounds(reader: Any, layout: Any) -> npt.NDArray[np.int64]:
    """Bounds of spans of the layout's positions of about :data:`SPAN_VALUES` values each."""
    from sporadik_dask.planning.plan import partition_bounds

    ((lo, hi),) = reader.brackets([(layout, range(layout.positions))])
    indptr = np.concatenate(([0], np.cumsum(hi - lo)))
    bounds = partition_bounds(indptr, SPAN_VALUES)
    if bounds.size < 2:
        bounds = np.array([0, layout.positions], dtype=np.int64)
    return np.asarray(bounds, dtype=np.int64)


def _pieces_of(spans: npt.NDArray[np.int64]) -> list[npt.NDArray[np.int64]]:
    """Consecutive spans in pieces (each piece's bounds): one a core, or more of at most
    :data:`PIECE_SPANS` spans each, about equal in spans."""
    from dask.system import CPU_COUNT

    count = spans.size - 1
    pieces = min(count, max(-(-count // PIECE_SPANS), int(CPU_COUNT)))
    edges = np.linspace(0, count, pieces + 1).round().astype(np.int64)
    return [spans[lo : hi + 1] for lo, hi in itertools.pairwise(edges.tolist())]


def span_parts(
    reader: Any,
    axis: int,
    bounds: npt.NDArray[np.int64],
    steps: Steps,
    columns: npt.NDArray[np.int64],
    *vectors: Any,
) -> Iterator[Any]:
    """The cells of each span ``bounds`` gives, of the layout along ``axis`` (a run each), as
    CSR matrices of the selected genes (``columns``) with the steps applied: the runs' indices
    and values read, nothing else, the rows the runs as they are."""
    import scipy.sparse as sp

    layout = reader.description.layouts[axis]
    genes = int(columns.max(initial=-1)) + 1
    start = int(bounds[0])
    for first, last in itertools.pairwise(bounds.tolist()):
        ((lo, hi),) = reader.brackets([(layout, range(first, last))])
        indices, values = reader.runs(layout, lo, hi)
        indptr, column, taken = kept_of_runs(hi - lo, indices, columns)
        at = [
            np.repeat(np.asarray(v)[first - start : last - start], np.diff(indptr))
            if a == axis
            else np.asarray(v)[indices[taken]]
            for v, a in zip(vectors, steps.axes, strict=True)
        ]
        data = _held(evaluate(steps, values[taken], at))
        yield sp.csr_matrix((data, column, indptr), shape=(last - first, genes))


def block_parts(
    block: Any, steps: Steps, axis: int, columns: npt.NDArray[np.int64], *vectors: Any
) -> Iterator[Any]:
    """A block (``sparse.COO`` or anything ``sparse.as_coo`` takes) as one CSR matrix of its
    cells by the selected genes (``columns``), the steps applied."""
    import scipy.sparse as sp
    import sparse

    coo = sparse.as_coo(block)
    coords = coo.coords
    column = columns[coords[1 - axis]]
    kept = column >= 0
    coords = coords[:, kept]
    at = [np.asarray(v)[coords[a]] for v, a in zip(vectors, steps.axes, strict=True)]
    values = _held(evaluate(steps, coo.data[kept], at))
    shape = (coo.shape[axis], int(columns.max(initial=-1)) + 1)
    yield sp.csr_matrix((values, (coords[axis], column[kept])), shape=shape)


def _held(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Values as the smallest float that holds them exactly (float32 values stay float32:
    their products are exact in the float64 the Gram matrix adds them in)."""
    return values.astype(np.result_type(values.dtype, np.float32), copy=False)


class Read(NamedTuple):
    """What the first pass keeps of a piece."""

    moments: CoMoments
    #: The piece's parts (CSR matrices of the selected genes, the steps applied), for the
    #: projection, when they hold no more values than the piece's share; else None.
    held: list[Any] | None


def piece_read(share: int, parts: Any, *arguments: Any) -> Read:
    """A piece's :class:`Read`: its parts' column sums and Gram matrix added up in place
    (:func:`~sporadik_dask.kernels.gram.add_gram`, float64, packed upper triangle), then the
    mean from the sums and the co-moment as the Gram matrix less ``cells * outer(mean, mean)``
    (log-normalized values lose no digit that matters there; pieces merge without
    cancellation); its parts kept while they hold at most ``share`` values."""
    cells, sums, gram = 0, np.zeros(0), np.zeros(0)
    held: list[Any] | None = []
    values = 0
    for x in parts(*arguments):
        if sums.size == 0:
            genes = x.shape[1]
            sums, gram = np.zeros(genes), np.zeros(packed_size(genes))
        add_gram(x.indptr, x.indices, x.data, sums, gram)
        cells += x.shape[0]
        values += x.nnz
        if held is not None and values <= share:
            held.append(x)
        else:
            held = None
    if cells == 0:
        return Read(CoMoments(0, sums, gram), held)
    mean = sums / cells
    add_outer(gram, mean, -cells)
    return Read(CoMoments(cells, mean, gram), held)


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
        m2 += part.m2
        add_outer(m2, delta, cells * part.cells / total)
        cells = total
    return CoMoments(cells, mean, m2)


def components_of(moments: CoMoments, n_comps: int) -> Components:
    """The ``n_comps`` principal axes of the covariance (ddof 1): by ARPACK's Lanczos
    iterations on the packed co-moment (BLAS's ``dspmv``) when they are few of the genes, else
    by a symmetric eigensolver of the whole matrix."""
    genes = moments.mean.size
    ddof = max(moments.cells - 1, 1)
    if genes >= ARPACK_GENES_PER_COMP * n_comps:
        values, vectors = _arpack(moments.m2, genes, n_comps)
    else:
        import scipy.linalg

        square = unpacked(moments.m2, genes)
        values, vectors = scipy.linalg.eigh(square, subset_by_index=[genes - n_comps, genes - 1])
    order = np.argsort(values)[::-1]
    axes = vectors[:, order].T
    largest = np.abs(axes).argmax(axis=1)
    axes *= np.sign(axes[np.arange(n_comps), largest])[:, None]
    variance = values[order] / ddof
    total = float(diagonal(moments.m2, genes).sum()) / ddof
    return Components(moments.mean, axes, variance, variance / total)


def _arpack(
    packed: npt.NDArray[np.float64], genes: int, n_comps: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The largest ``n_comps`` eigenpairs of a packed symmetric matrix, to machine precision,
    from a seeded start (the same answer each time)."""
    import scipy.linalg.blas as blas
    import scipy.sparse.linalg as sla

    def times(vector: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        product: npt.NDArray[np.float64] = blas.dspmv(genes, 1.0, packed, np.ravel(vector), lower=1)
        return product

    operator = sla.LinearOperator((genes, genes), matvec=times, dtype=np.float64)
    start = np.random.default_rng(0).uniform(-1, 1, genes)
    values, vectors = sla.eigsh(operator, k=n_comps, which="LA", tol=0, v0=start)
    return values, vectors


def project_piece(
    found: Components, dtype: np.dtype[Any], parts: Any, *arguments: Any
) -> npt.NDArray[Any]:
    """A piece's cells, read again, on the components (:func:`project_parts`)."""
    parts = list(parts(*arguments))
    out = np.empty((sum(x.shape[0] for x in parts), found.components.shape[0]), dtype=dtype)
    return project_parts(found, parts, out)


def project_parts(found: Components, parts: Any, out: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Parts' cells, centered, on the components, ``X V - mean V`` (X kept sparse), written
    into ``out`` part by part."""
    axes = np.ascontiguousarray(found.components.T)
    shift = found.mean @ axes
    row = 0
    for x in parts:
        out[row : row + x.shape[0]] = x @ axes - shift
        row += x.shape[0]
    return out
