"""Highly variable genes of a store equal scanpy's on the same matrix in memory, from one pass
over the store's values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import sporadik_dask as sd
from sporadik_dask.format.errors import SporadikError
from tests.analysis.conftest import MODES, STEPS_RECORDED, opened

# the small chunks split the store's zarr chunks on purpose
pytestmark = pytest.mark.filterwarnings("ignore:The specified chunks separate")

#: scanpy's options, each compared.
OPTIONS: dict[str, dict[str, Any]] = {
    "seurat, 30 top genes": {"flavor": "seurat", "n_top_genes": 30},
    "seurat, cutoffs": {"flavor": "seurat"},
    "seurat, cutoffs, 7 bins": {"flavor": "seurat", "n_bins": 7, "min_mean": 0.1},
    "cell_ranger, 30 top genes": {"flavor": "cell_ranger", "n_top_genes": 30},
    "cell_ranger, cutoffs": {"flavor": "cell_ranger", "min_disp": 0.2},
}


def _equal(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(got.columns) == list(expected.columns)
    assert list(got.index) == list(expected.index)
    for column in ("means", "dispersions", "dispersions_norm"):
        np.testing.assert_allclose(
            got[column], expected[column], rtol=1e-5, atol=1e-6, err_msg=column
        )
    assert (got["mean_bin"].cat.codes == expected["mean_bin"].cat.codes).all()
    assert got["highly_variable"].dtype == bool
    np.testing.assert_array_equal(got["highly_variable"], expected["highly_variable"])
    assert 0 < got["highly_variable"].sum() < len(got)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("options", OPTIONS)
def test_highly_variable_genes_equal_scanpys_on_the_matrix_in_memory(
    counts_store: tuple[Path, Any], log_normalized: Any, mode: str, options: str
) -> None:
    import scanpy as sc

    path, _ = counts_store
    got = sd.highly_variable_genes(opened(path, mode), **OPTIONS[options])
    expected = sc.pp.highly_variable_genes(log_normalized, inplace=False, **OPTIONS[options])
    _equal(got, expected)


def test_a_selection_of_cells_takes_xarrays_mean_and_variance_and_equals_scanpys(
    counts_store: tuple[Path, Any], log_normalized: Any
) -> None:
    """A selection carries no recorded steps: its mean and variance are xarray's (two passes),
    the answer the same."""
    import scanpy as sc

    path, _ = counts_store
    y = opened(path, "chunks={}").isel(cell=slice(100, 500))
    got = sd.highly_variable_genes(y, n_top_genes=25)
    expected = sc.pp.highly_variable_genes(
        log_normalized[100:500].copy(), n_top_genes=25, inplace=False
    )
    _equal(got, expected)


@STEPS_RECORDED
def test_the_mean_and_variance_per_gene_are_one_pass_over_the_store(
    counts_store: tuple[Path, Any], log_normalized: Any
) -> None:
    """The moments' graph reads the store: the steps' own blocks are not in it, and one task
    gives both."""
    import math

    from sporadik_dask.analysis.source import recorded_read, vector_arrays
    from sporadik_dask.read.blocks import reader_of
    from sporadik_dask.reduce.elementwise import Transformed
    from sporadik_dask.reduce.spans import moments_store_dask
    from sporadik_dask.reduce.target import Target

    path, _ = counts_store
    y = opened(path, "chunks={}")
    found = recorded_read(y)
    assert found is not None
    reader = Transformed(reader_of(found.source), found.steps)
    both = moments_store_dask(
        reader,
        Target(y.shape, (0,)),
        math.prod(found.source.numblocks),
        skipna=False,
        ddof=1,
        vectors=vector_arrays(found),
    )
    assert y.data.name not in both.dask.layers
    mean, var = both.compute()
    dense = log_normalized.X.toarray().astype(np.float64)
    np.testing.assert_allclose(mean, dense.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(var, dense.var(axis=0, ddof=1), rtol=1e-6)


def test_a_flavor_not_computed_here_is_refused_by_name(counts_store: tuple[Path, Any]) -> None:
    path, _ = counts_store
    with pytest.raises(SporadikError, match="seurat_v3"):
        sd.highly_variable_genes(opened(path, "lazy"), flavor="seurat_v3")  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_cluster_selects_the_same_genes(
    counts_store: tuple[Path, Any], log_normalized: Any, client: Any
) -> None:
    import scanpy as sc

    path, _ = counts_store
    got = sd.highly_variable_genes(opened(path, "small chunks"), n_top_genes=30)
    _equal(got, sc.pp.highly_variable_genes(log_normalized, n_top_genes=30, inplace=False))


def test_cells_along_the_second_dim_give_the_same_genes(
    counts_store: tuple[Path, Any], log_normalized: Any
) -> None:
    import scanpy as sc

    path, _ = counts_store
    y = opened(path, "chunks={}").transpose("gene", "cell")
    got = sd.highly_variable_genes(y, n_top_genes=30, dim="cell")
    _equal(got, sc.pp.highly_variable_genes(log_normalized, n_top_genes=30, inplace=False))
