"""A small single-cell-like store (counts, genes labelled) and scanpy's log-normalized AnnData of
the same matrix in memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import scipy.sparse as sp
import xarray as xr

import sporadik_dask as sd
from sporadik_dask.read.dask_model import EXPRESSIONS
from sporadik_dask.synthetic import counts_matrix

#: Tests of the one pass over the store's runs that a read's recorded steps allow: dask's
#: expression model records no steps (docs/reading.md), so there the blocks are read instead.
STEPS_RECORDED = pytest.mark.skipif(
    EXPRESSIONS, reason="a read's elementwise steps are recorded in dask's graph model only"
)

#: The ways a scientist opens the store.
MODES: dict[str, dict[str, Any]] = {
    "lazy": {},
    "chunks={}": {"chunks": {}},
    "small chunks": {"chunks": {"cell": 97, "gene": 50}},
}


@pytest.fixture(scope="package")
def counts_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """600 cells x 150 genes of skewed counts, the genes labelled; and the matrix as CSR."""
    x = counts_matrix(cells=600, genes=150, density=0.08, seed=3).compute()
    names = np.array([f"g{i}" for i in range(150)])
    path = tmp_path_factory.mktemp("analysis") / "counts.zarr"
    sd.to_sporadik(xr.DataArray(x, dims=("cell", "gene"), coords={"gene": names}, name="x"), path)
    return path, sp.csr_matrix(x.tocsr())


@pytest.fixture(scope="package")
def log_normalized(counts_store: tuple[Path, Any]) -> Any:
    """scanpy's ``normalize_total(target_sum=1e4)`` then ``log1p``, in memory."""
    import anndata
    import pandas as pd
    import scanpy as sc

    _, csr = counts_store
    names = pd.Index([f"g{i}" for i in range(csr.shape[1])])
    adata = anndata.AnnData(csr.copy(), var=pd.DataFrame(index=names))
    sc.pp.normalize_total(adata, target_sum=1e4)
    sc.pp.log1p(adata)
    return adata


def opened(path: Path, mode: str) -> xr.DataArray:
    """The store's variable, opened as ``mode`` says, log-normalized lazily."""
    x = xr.open_dataset(path, engine="sporadik", **MODES[mode])["x"]
    return cast(xr.DataArray, np.log1p(x / x.sum("gene") * 1e4))
