"""The xarray layer: a cheap entry point, the accessor wherever a variable travels, and
coordinates as plain numpy strings."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sparse
import xarray as xr
from distributed import Client

import sporadik_dask as sd
from tests.helpers import labelled, random_dense

#: Loads both entry points as xarray does (after importing xarray), and says which heavy modules
#: came with them (what loading costs is measured in docs/reading.md, not asserted here).
LOAD_ENTRY_POINTS = """
import sys
import xarray
from importlib.metadata import entry_points

for group in ("xarray.backends", "xarray.chunkmanagers"):
    entry_points(group=group)["sporadik"].load()
print(",".join(m for m in ("numba", "dask.array", "sparse", "zarr") if m in sys.modules))
"""


def test_loading_the_entry_points_imports_none_of_numba_dask_array_sparse_or_zarr() -> None:
    done = subprocess.run(
        [sys.executable, "-c", LOAD_ENTRY_POINTS], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == ""


def test_the_entry_point_opens_a_store_from_a_fresh_process(tmp_path: Path) -> None:
    sd.to_sporadik(labelled(sparse.COO.from_numpy(np.eye(6, 4))), tmp_path / "s.zarr")
    script = (
        "import sys, xarray as xr\n"
        f"ds = xr.open_dataset({str(tmp_path / 's.zarr')!r}, engine='sporadik', chunks={{}})\n"
        "counts = ds['counts']\n"
        "print(type(counts.data._meta).__name__, int(counts.sporadik.nnz('gene').sum()))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["COO", "4"]


@pytest.mark.parametrize("chunks", [None, {}])
def test_the_accessor_works_on_a_dask_worker(
    tmp_path: Path, client: Client, chunks: dict[str, int] | None
) -> None:
    dense = random_dense(np.random.default_rng(5), (6, 4), 0.5)
    sd.to_sporadik(labelled(sparse.COO.from_numpy(dense)), tmp_path / "s.zarr")
    opened = xr.open_dataset(tmp_path / "s.zarr", engine="sporadik", chunks=chunks)
    nnz = client.submit(lambda ds: ds["counts"].sporadik.nnz("gene").values, opened, pure=False)
    np.testing.assert_array_equal(nnz.result(), np.count_nonzero(dense, axis=0))


def test_string_coordinates_come_back_as_numpy_str_that_np_save_takes(tmp_path: Path) -> None:
    genes = np.array(["CD3E", "MS4A1", "", "ÉPÉE-1"])
    written = xr.DataArray(
        sparse.COO.from_numpy(np.eye(3, 4)), dims=("cell", "gene"), coords={"gene": genes}
    )
    sd.to_sporadik(written, tmp_path / "s.zarr")
    coords = xr.open_dataset(tmp_path / "s.zarr", engine="sporadik").coords["gene"].values
    assert coords.dtype.kind == "U", coords.dtype
    np.testing.assert_array_equal(coords.astype(str), genes)
    saved = io.BytesIO()
    np.save(saved, coords)
    saved.seek(0)
    np.testing.assert_array_equal(np.load(saved), genes)  # no pickle needed to load them


def test_numeric_coordinates_keep_their_dtype(tmp_path: Path) -> None:
    sd.to_sporadik(labelled(sparse.COO.from_numpy(np.eye(6, 4))), tmp_path / "s.zarr")
    cells = xr.open_dataset(tmp_path / "s.zarr", engine="sporadik").coords["cell"].values
    assert cells.dtype == np.arange(1).dtype
    np.testing.assert_array_equal(cells, np.arange(10, 16))
