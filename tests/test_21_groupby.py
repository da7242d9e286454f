"""groupby(coord) reductions of a store in one pass: equal to scipy's indicator-matrix product."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import scipy.sparse as sp
import sparse
import xarray as xr

import sporadik_dask as sd
from tests.helpers import random_dense


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, npt.NDArray[Any]]:
    dense = random_dense(np.random.default_rng(4), (60, 25), 0.3, np.float32)
    path = tmp_path_factory.mktemp("g") / "s.zarr"
    sd.to_sporadik(xr.DataArray(sparse.COO.from_numpy(dense), dims=("cell", "gene")), path)
    return path, dense


GROUPINGS: dict[str, Callable[[np.random.Generator, int], npt.NDArray[np.str_]]] = {
    "four groups": lambda rng, n: rng.choice(["b", "a", "d", "c"], n),
    "one group": lambda rng, n: np.full(n, "all"),
    "each its own": lambda rng, n: np.arange(n)[::-1].astype(str),
}


def _indicator(labels: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], sp.csr_matrix]:
    groups, codes = np.unique(labels, return_inverse=True)
    rows = sp.csr_matrix(
        (np.ones(len(labels)), (codes, np.arange(len(labels)))), shape=(len(groups), len(labels))
    )
    return groups, rows


@pytest.mark.parametrize("flox", [False, True], ids=["xarray", "flox"])
@pytest.mark.parametrize("chunks", [None, {}, {"cell": 7}], ids=["lazy", "chunks={}", "chunks=7"])
@pytest.mark.parametrize("grouping", GROUPINGS)
def test_group_sums_and_means_equal_the_indicator_matrix_product(
    store: tuple[Path, npt.NDArray[Any]], grouping: str, chunks: Any, flox: bool
) -> None:
    if flox:
        pytest.importorskip("flox")
    path, dense = store
    labels = GROUPINGS[grouping](np.random.default_rng(0), dense.shape[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # chunks separating stored ones
        counts = xr.open_dataset(path, engine="sporadik", chunks=chunks)["s"]
    counts = counts.assign_coords(kind=("cell", labels))
    groups, indicator = _indicator(labels)
    sums = indicator @ dense.astype(np.float64)
    for op, expected in (
        ("sum", sums),
        ("mean", sums / np.asarray(indicator.sum(axis=1))),
        ("count", np.asarray(indicator.sum(axis=1)) * np.ones((1, dense.shape[1]))),
    ):
        with xr.set_options(use_flox=flox):
            result = getattr(counts.groupby("kind"), op)()
        assert result.dims == ("kind", "gene")
        if chunks is None:  # one pass over the store, not xarray's read per group
            assert isinstance(result.data, np.ndarray)
        else:
            ours = ("sporadik-group-", f"sporadik-{op}-")  # blocks' fields, or the store's runs
            assert any(str(n).startswith(ours) for n in result.data.dask.layers)
        np.testing.assert_array_equal(result["kind"].values, groups)
        if op != "count":
            assert result.dtype == np.float32
        np.testing.assert_allclose(result.values, expected, rtol=1e-5)


def test_group_maxima_along_genes_equal_numpy_per_group(
    store: tuple[Path, npt.NDArray[Any]],
) -> None:
    path, dense = store
    counts = xr.open_dataset(path, engine="sporadik")["s"]
    family = np.random.default_rng(1).integers(0, 3, dense.shape[1])
    result = counts.assign_coords(family=("gene", family)).groupby("family").max()
    assert result.dims == ("cell", "family")
    expected = np.stack([dense[:, family == f].max(axis=1) for f in range(3)], axis=1)
    np.testing.assert_array_equal(result.values, expected)


@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "chunks={}"])
def test_past_the_dense_budget_group_sums_and_means_come_back_sparse_and_equal(
    store: tuple[Path, npt.NDArray[Any]], chunks: Any
) -> None:
    import dask

    path, dense = store
    labels = np.arange(dense.shape[0]) % 7
    counts = xr.open_dataset(path, engine="sporadik", chunks=chunks)["s"]
    counts = counts.assign_coords(kind=("cell", labels))
    _, indicator = _indicator(labels.astype(str))
    sums = indicator @ dense.astype(np.float64)
    with dask.config.set({"sporadik.dense-result-cells": 100}):  # 7 groups x 25 genes is past it
        for op, expected in (("sum", sums), ("mean", sums / np.asarray(indicator.sum(axis=1)))):
            result = getattr(counts.groupby("kind"), op)()
            data = result.data.compute() if chunks is not None else result.data
            assert isinstance(data, sparse.COO) and data.dtype == np.float32
            np.testing.assert_allclose(data.todense(), expected, rtol=1e-5)
