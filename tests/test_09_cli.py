"""The command line: converts files made by the real writing libraries, inspects and validates,
and says a user's mistake in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anndata
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import sporadik
import xarray as xr
import zarr

from sporadik_dask.cli import main
from tests.helpers import random_dense, write_reference


def read_back(path: Path) -> np.ndarray:
    with sporadik.open_array(path) as store:
        return store.to_array().to_dense()


@pytest.mark.parametrize("suffix", [".h5ad", ".zarr"])
@pytest.mark.parametrize("layout", ["csr", "csc", "dense"])
def test_anndata_files_convert_with_names_as_coordinates(
    tmp_path: Path, suffix: str, layout: str
) -> None:
    dense = random_dense(np.random.default_rng(0), (60, 25), 0.2)
    matrix = {"csr": sp.csr_matrix, "csc": sp.csc_matrix, "dense": np.asarray}[layout](dense)
    adata = anndata.AnnData(matrix)
    adata.obs_names = [f"cell{i}" for i in range(60)]
    adata.var_names = [f"gene{j}" for j in range(25)]
    source = tmp_path / f"in{suffix}"
    adata.write_h5ad(source) if suffix == ".h5ad" else adata.write_zarr(source)
    assert main(["convert", str(source), str(tmp_path / "out.zarr"), "--quiet"]) == 0
    np.testing.assert_array_equal(read_back(tmp_path / "out.zarr"), dense)
    root = zarr.open_group(tmp_path / "out.zarr", mode="r")
    assert root.attrs["xarray"]["dims"] == ["obs", "var"]
    assert list(root["coords/var"][:3]) == ["gene0", "gene1", "gene2"]


def test_anndata_obs_and_var_columns_become_coordinates_to_group_by(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    matrix = sp.random(90, 30, density=0.2, format="csr", random_state=4, dtype=np.float64)
    adata = anndata.AnnData(matrix.astype(np.float32))
    adata.obs_names = [f"cell{i}" for i in range(90)]
    kinds = rng.choice(["T", "B", "NK"], 90)
    adata.obs["cell_type"] = pd.Categorical(kinds, categories=["B", "NK", "T"])
    adata.obs["n_genes"] = np.diff(matrix.indptr)
    adata.obs["var"] = "clashes with a dim"  # kept, as obs_var
    adata.var["X"] = 1.0  # clashes with the array's name: kept, as var_X
    adata.obs["flag"] = pd.array([1, None] * 45, dtype="Int64")  # missing: left out, said so
    adata.var["highly_variable"] = rng.random(30) < 0.3
    adata.write_h5ad(tmp_path / "in.h5ad")
    with pytest.warns(UserWarning, match="column 'flag' left out"):
        assert (
            main(["convert", str(tmp_path / "in.h5ad"), str(tmp_path / "out.zarr"), "--quiet"]) == 0
        )
    ds = xr.open_dataset(tmp_path / "out.zarr", engine="sporadik")
    assert set(ds.coords) == {
        "obs",
        "var",
        "cell_type",
        "n_genes",
        "obs_var",
        "highly_variable",
        "var_X",
    }
    assert isinstance(ds["cell_type"].dtype, pd.CategoricalDtype)
    np.testing.assert_array_equal(ds["n_genes"].values, adata.obs["n_genes"].to_numpy())
    assert ds["highly_variable"].dims == ("var",) and ds["highly_variable"].dtype == bool
    pseudobulk = ds["X"].groupby("cell_type").sum()
    groups, codes = np.unique(kinds, return_inverse=True)
    indicator = sp.csr_matrix((np.ones(90), (codes, np.arange(90))), shape=(len(groups), 90))
    np.testing.assert_array_equal(pseudobulk["cell_type"].values, groups)
    np.testing.assert_allclose(pseudobulk.values, (indicator @ matrix).toarray(), rtol=1e-5)


def test_a_scipy_npz_converts(tmp_path: Path) -> None:
    matrix = sp.random(80, 30, density=0.1, format="csr", random_state=1, dtype=np.float64)
    sp.save_npz(tmp_path / "m.npz", matrix)
    assert main(["convert", str(tmp_path / "m.npz"), str(tmp_path / "out.zarr"), "--quiet"]) == 0
    np.testing.assert_array_equal(read_back(tmp_path / "out.zarr"), matrix.toarray())


def test_converting_a_store_adds_its_missing_layouts(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(2), (40, 30), 0.2)
    path = write_reference(tmp_path / "s.zarr", dense, {0: (1,)})
    assert main(["convert", str(path), str(path), "--quiet"]) == 0
    assert sporadik.describe(path).layouts.keys() == {0, 1}
    np.testing.assert_array_equal(read_back(path), dense)


def test_info_and_validate_describe_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dense = random_dense(np.random.default_rng(3), (40, 30), 0.2)
    path = write_reference(tmp_path / "s.zarr", dense, {0: (1,), 1: (0,)})
    assert main(["info", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["shape"] == [40, 30] and summary["nnz"] == np.count_nonzero(dense)
    assert [layout["indexed_axis"] for layout in summary["layouts"]] == [0, 1]
    assert main(["info", str(path)]) == 0
    assert "layouts/axis1" in capsys.readouterr().out
    assert main(["validate", str(path)]) == 0
    zarr.open_array(path / "layouts" / "axis1" / "indptr", mode="r+")[3] = 0
    assert main(["validate", str(path)]) == 2
    assert "indptr decreases" in capsys.readouterr().err


def test_a_mistake_is_one_line_and_exit_status_two() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sporadik_dask.cli", "info", "/nonexistent/store.zarr"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("sporadik-dask: No zarr v3 group at /nonexistent/store.zarr")


def test_the_demo_builds_a_store_and_reads_it_along_each_axis(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sporadik_dask.cli",
            "demo",
            "--output",
            str(tmp_path / "demo.zarr"),
            "--cells",
            "2000",
            "--genes",
            "300",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "positions along cell" in done.stdout and "positions along gene" in done.stdout
    assert "of COO; a sum per cell gives a ndarray (2000,), equal to the totals" in done.stdout
    assert sporadik.describe(tmp_path / "demo.zarr").shape == (2000, 300)


def test_progress_is_drawn_on_a_terminal_and_not_with_quiet(tmp_path: Path) -> None:
    from tests.helpers import run_on_terminal

    matrix = sp.random(200, 100, density=0.1, format="csr", random_state=8, dtype=np.float64)
    sp.save_npz(tmp_path / "m.npz", matrix)
    command = [sys.executable, "-m", "sporadik_dask.cli", "convert", str(tmp_path / "m.npz")]
    status, printed = run_on_terminal([*command, str(tmp_path / "a.zarr")])
    assert status == 0 and "100% Completed" in printed, printed
    status, printed = run_on_terminal([*command, str(tmp_path / "b.zarr"), "--quiet"])
    assert status == 0 and printed == "", printed
    np.testing.assert_array_equal(read_back(tmp_path / "b.zarr"), matrix.toarray())
