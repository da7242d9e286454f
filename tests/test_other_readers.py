"""Other readers of our stores: anndata's ``read_elem`` and zarrita, the JavaScript zarr reader,
each reading the layouts we write and getting our values."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anndata
import numpy as np
import pytest
import scipy.sparse as sp
import zarr

import sporadik_dask as sd

ZARRITA = Path(__file__).parent / "zarrita"


def written(
    tmp_path: Path, dtype: str, byte_addressable: bool, codecs: Any = "zstd"
) -> tuple[Path, sp.csr_matrix]:
    matrix = sp.random(70, 50, density=0.2, format="csr", random_state=3, dtype=np.float64)
    matrix = matrix.astype(dtype)
    if dtype == "int64":
        matrix.data[:] = np.arange(1, matrix.nnz + 1)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(
        matrix,
        path,
        chunk=None if byte_addressable else 64,
        byte_addressable=byte_addressable,
        codecs=codecs,
    )
    return path, matrix


@pytest.mark.parametrize("layout", ["axis0", "axis1"])
def test_anndata_read_elem_returns_the_matrix(tmp_path: Path, layout: str) -> None:
    path, matrix = written(tmp_path, "float32", False)
    read = anndata.io.read_elem(zarr.open_group(path / "layouts" / layout, mode="r"))
    assert read.format == ("csr" if layout == "axis0" else "csc")
    np.testing.assert_array_equal(read.toarray(), matrix.toarray())


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not on this machine")
# float64 is slow only: float32 holds floats, int64 holds blosc's 8-byte shuffle
@pytest.mark.parametrize(
    "dtype", ["float32", pytest.param("float64", marks=pytest.mark.slow), "int64"]
)
@pytest.mark.parametrize(
    "codecs", ["zstd", "blosc-zstd", "blosc-lz4", None], ids=lambda c: c or "byte-addressable"
)
def test_zarrita_reads_each_layout_as_we_wrote_it(
    tmp_path: Path, dtype: str, codecs: str | None
) -> None:
    assert (ZARRITA / "node_modules" / "zarrita").is_dir(), "run scripts/setup to install zarrita"
    byte_addressable = codecs is None
    path, matrix = written(tmp_path, dtype, byte_addressable, codecs or "zstd")
    for layout, compressed in (("axis0", matrix.tocsr()), ("axis1", matrix.tocsc())):
        done = subprocess.run(
            ["node", str(ZARRITA / "read_layout.mjs"), str(path), f"layouts/{layout}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        read = json.loads(done.stdout)
        assert read["attrs"]["shape"] == [70, 50]
        assert read["data"]["dtype"] == dtype
        if not byte_addressable:
            assert read["data"]["chunks"] == [64] and len(read["data"]["values"]) > 64
        np.testing.assert_array_equal(
            np.array(read["data"]["values"], dtype=dtype), compressed.data
        )
        np.testing.assert_array_equal(read["indices"]["values"], compressed.indices)
        np.testing.assert_array_equal(read["indptr"]["values"], compressed.indptr)


def test_the_reference_and_validate_read_a_store_carrying_every_kind_of_coordinate(
    tmp_path: Path,
) -> None:
    import pandas as pd
    import sparse
    import sporadik
    import xarray as xr

    matrix = sp.random(6, 4, density=0.5, format="csr", random_state=5, dtype=np.float64)
    array = xr.DataArray(
        sparse.COO.from_scipy_sparse(matrix),
        dims=("cell", "gene"),
        name="X",
        coords={
            "gene": ["a", "b", "c", "d"],
            "kind": ("cell", pd.Categorical(["t", "b", "t", None, "b", "t"])),
            "depth": ("gene", [1.0, np.nan, 2.0, 3.0]),
            "when": ("cell", pd.date_range("2024-01-01", periods=6)),
            "batch": 3,
        },
    )
    sd.to_sporadik(array, tmp_path / "s.zarr")
    with sporadik.open_array(tmp_path / "s.zarr") as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), matrix.toarray())
    assert sd.validate(tmp_path / "s.zarr").nnz == matrix.nnz
