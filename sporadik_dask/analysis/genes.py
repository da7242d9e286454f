"""Highly variable genes of a store, from one pass over its values.

scanpy's selection needs each gene's mean and variance of the log-normalized data (or of its
``expm1``): ``np.log1p(X / X.sum("gene") * 1e4)`` is recorded as steps on the store's read, and
the one pass that gives the variance gives the mean too
(:func:`~sporadik_dask.reduce.spans.moments_store_dask`), each batch of values transformed in
numpy as it is read. Only the selection's arithmetic (:mod:`.dispersion`) follows, per gene.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from sporadik_dask.analysis.dispersion import Flavor, dispersion_table
from sporadik_dask.analysis.source import as_dask, cells_axis, recorded_read, vector_arrays

__all__ = ["highly_variable_genes", "mean_and_variance"]


def highly_variable_genes(
    data: Any,
    *,
    n_top_genes: int | None = None,
    min_disp: float = 0.5,
    max_disp: float = np.inf,
    min_mean: float = 0.0125,
    max_mean: float = 3,
    n_bins: int = 20,
    flavor: Flavor = "seurat",
    dim: str | None = None,
) -> pd.DataFrame:
    """scanpy's ``pp.highly_variable_genes(adata, inplace=False)`` of a store's log-normalized
    values, one pass over the store.

    Parameters
    ----------
    data
        Cells by genes, log-normalized as scanpy expects: ``np.log1p(X / X.sum("gene") * 1e4)``
        of a variable opened from a store (lazily or with ``chunks=``), natural log.
    n_top_genes, min_disp, max_disp, min_mean, max_mean, n_bins, flavor
        As scanpy's (flavors ``"seurat"`` and ``"cell_ranger"``); the cutoffs apply only
        without ``n_top_genes``.
    dim
        The cells' dim (default: the first).

    Returns
    -------
    pandas.DataFrame
        One row per gene (indexed by the gene coordinate, if any): ``means``,
        ``dispersions``, ``mean_bin``, ``dispersions_norm``, ``highly_variable``.
    """
    axis = cells_axis(data, dim)
    data = as_dask(data)
    mean, variance = mean_and_variance(
        np.expm1(data) if flavor == "seurat" else data, data.dims[axis], ddof=1
    )
    genes = data.dims[1 - axis]
    index = data.coords[genes].to_index() if genes in data.coords else None
    return dispersion_table(
        mean,
        variance,
        flavor=flavor,
        n_top_genes=n_top_genes,
        n_bins=n_bins,
        min_disp=min_disp,
        max_disp=max_disp,
        min_mean=min_mean,
        max_mean=max_mean,
        index=index,
    )


def mean_and_variance(
    data: Any, dim: str, *, ddof: int = 0
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The mean and variance of ``data`` along ``dim``, in float64, computed: one pass over the
    store when ``data`` is a whole store's read with elementwise steps; else xarray's mean and
    variance (pushed down to the store as far as they can be), two passes."""
    import dask

    from sporadik_dask.read.blocks import reader_of
    from sporadik_dask.reduce.elementwise import Transformed
    from sporadik_dask.reduce.spans import moments_store_dask
    from sporadik_dask.reduce.target import Target

    data = as_dask(data)
    found = recorded_read(data)
    if found is None:
        wide = data.astype(np.result_type(data.dtype, np.float64))
        mean, var = dask.compute(wide.mean(dim), wide.var(dim, ddof=ddof))
        return np.asarray(mean), np.asarray(var)
    reader = Transformed(reader_of(found.source), found.steps)
    target = Target(tuple(data.shape), (data.get_axis_num(dim),))
    spans = math.prod(found.source.numblocks)
    both = moments_store_dask(
        reader, target, spans, skipna=False, ddof=ddof, vectors=vector_arrays(found)
    )
    (computed,) = dask.compute(both)
    return computed[0], computed[1]
