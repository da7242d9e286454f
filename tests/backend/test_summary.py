"""A store's line in a Dataset's repr says what is stored, not the dense size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import sparse
import xarray as xr
from xarray.core.formatting import render_human_readable_nbytes

import sporadik_dask as sd
from tests.helpers import random_dense


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dense = random_dense(np.random.default_rng(2), (400, 300), 0.01, np.float32)
    path = tmp_path_factory.mktemp("summary") / "s.zarr"
    sd.to_sporadik(xr.DataArray(sparse.COO.from_numpy(dense), dims=("obs", "var"), name="X"), path)
    return path


def _line(dataset: xr.Dataset, name: str) -> str:
    return next(line for line in repr(dataset).splitlines() if line.strip().startswith(name))


@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "chunks={}"])
def test_a_whole_store_shows_its_stored_values_and_bytes(store: Path, chunks: Any) -> None:
    opened = xr.open_dataset(store, engine="sporadik", chunks=chunks)
    nnz = int(opened["X"].sporadik.nnz("var").sum())
    line = _line(opened, "X")
    # float32 values and int32 indices: 8 bytes a value, where the dense array is 480 kB
    assert f"float32 {nnz * 8 / 1e3:.0f}kB stored [{nnz:,} of 120,000 values stored, sparse]" in (
        line
    ), line
    assert "480kB" not in line
    stored = render_human_readable_nbytes(nnz * 8)  # no coordinate: the store's bytes alone
    assert repr(opened).startswith(f"<xarray.Dataset> Size: {stored}\n")


def test_selections_other_variables_and_the_switch_keep_xarrays_line(store: Path) -> None:
    opened = xr.open_dataset(store, engine="sporadik")
    opened["other"] = ("var", np.zeros(300))
    assert "stored" not in _line(opened, "other")
    assert "stored" not in _line(opened.isel(obs=slice(0, 10)), "X")
    with dask.config.set({"sporadik.patches": False}):
        assert "480kB" in _line(opened, "X")
        assert repr(opened).startswith("<xarray.Dataset> Size: 482kB\n")
