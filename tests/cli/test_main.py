"""The command line: converts files made by the real writing libraries, inspects and validates,
and says a user's mistake in one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anndata
import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
import scipy.sparse as sp
import sporadik
import xarray as xr
import zarr

import sporadik_dask as sd
from sporadik_dask.cli.main import main
from tests.helpers import S3Bucket, mount_tmpfs, random_dense, stored, unmount, write_reference


def read_back(path: Path) -> npt.NDArray[Any]:
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
    xarray_attrs = root.attrs["xarray"]
    assert isinstance(xarray_attrs, dict) and xarray_attrs["dims"] == ["obs", "var"]
    assert list(stored(root, "coords/var")[:3]) == ["gene0", "gene1", "gene2"]


def test_anndata_layers_are_named_as_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dense = random_dense(np.random.default_rng(1), (30, 20), 0.2)
    adata = anndata.AnnData(sp.csr_matrix(dense))
    adata.layers["counts"] = sp.csr_matrix(dense * 2)
    adata.layers["spliced"] = sp.csr_matrix(dense * 3)
    adata.write_h5ad(tmp_path / "in.h5ad")
    assert main(["convert", str(tmp_path / "in.h5ad"), str(tmp_path / "out.zarr")]) == 0
    note = "also holds layers counts, spliced; convert writes X (and obs, var) only."
    assert note in capsys.readouterr().err
    np.testing.assert_array_equal(read_back(tmp_path / "out.zarr"), dense)


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


def test_codecs_chosen_per_array_are_the_ones_written_the_reference_reads_and_info_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix = sp.random(80, 30, density=0.1, format="csr", random_state=1, dtype=np.float64)
    sp.save_npz(tmp_path / "m.npz", matrix)
    out = tmp_path / "out.zarr"
    command = ["convert", str(tmp_path / "m.npz"), str(out), "--quiet"]
    assert main([*command, "--codecs", "data=blosc-lz4", "indices=blosc-zstd"]) == 0
    layout = zarr.open_group(out / "layouts" / "axis0", mode="r")
    chains = {
        name: [codec.to_dict()["name"] for codec in layout[name].metadata.codecs]  # type: ignore[union-attr]
        for name in ("data", "indices", "indptr")
    }
    assert chains == {
        "data": ["bytes", "blosc"],
        "indices": ["bytes", "blosc"],
        "indptr": ["bytes", "zstd"],
    }
    np.testing.assert_array_equal(read_back(out), matrix.toarray())
    assert main(["info", str(out), "--json"]) == 0
    (layout, _) = json.loads(capsys.readouterr().out)["layouts"]
    assert layout["codecs"] == {
        "data": "blosc-lz4/bitshuffle",
        "indices": "blosc-zstd/shuffle",
        "indptr": "zstd",
    }
    on_disk = {
        name: sum(
            p.stat().st_size for p in (out / "layouts" / "axis0" / name).rglob("*") if p.is_file()
        )
        for name in ("data", "indices", "indptr")
    }
    assert layout["bytes_per_value"] == {
        name: round(size / matrix.nnz, 3) for name, size in on_disk.items()
    }
    assert main(["info", str(out)]) == 0
    assert "data blosc-lz4/bitshuffle" in capsys.readouterr().out


def test_counts_kept_as_floats_convert_to_the_narrowest_integer_dtype_holding_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix = sp.random(80, 30, density=0.1, format="csr", random_state=1, dtype=np.float32)
    matrix.data[:] = np.arange(matrix.nnz) % 9 + 1
    matrix.data[0] = 300  # needs uint16
    sp.save_npz(tmp_path / "m.npz", matrix)
    out = tmp_path / "out.zarr"
    command = ["convert", str(tmp_path / "m.npz"), str(out), "--quiet"]
    assert main([*command, "--dtype", "smallest-integer", "--codecs", "blosc-zstd"]) == 0
    assert stored(zarr.open_group(out / "layouts" / "axis1", mode="r"), "data").dtype == "u2"
    np.testing.assert_array_equal(read_back(out), matrix.toarray())
    assert main(["info", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dtype"] == "uint16"
    assert main(["convert", str(out), str(out), "--dtype", "uint8", "--quiet"]) == 2
    assert "--dtype applies to a new store" in capsys.readouterr().err


def test_converting_a_store_adds_its_missing_layouts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dense = random_dense(np.random.default_rng(2), (40, 30), 0.2)
    path = write_reference(tmp_path / "s.zarr", dense, {0: (1,)})
    assert main(["convert", str(path), str(path), "--quiet"]) == 0
    assert sporadik.describe(path).layouts.keys() == {0, 1}
    np.testing.assert_array_equal(read_back(path), dense)
    capsys.readouterr()
    assert main(["convert", str(path), str(path)]) == 0  # again: nothing is missing
    out = capsys.readouterr().out
    assert (
        out
        == f"{path} has layouts [0, 1] already; nothing to write (--axes names others to add).\n"
    )


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
    assert main(["validate", str(path)]) == 1
    assert "invalid: " in capsys.readouterr().err
    assert main(["validate", str(tmp_path / "missing.zarr")]) == 2


def test_validate_fails_on_a_deleted_chunk_unless_absent_chunks_are_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.zarr"
    sd.to_sporadik(random_dense(np.random.default_rng(8), (80, 50), 0.3), path, chunk=64)
    (path / "layouts" / "axis0" / "indices" / "c" / "2").unlink()
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "invalid: " in err and "'indices' (ids 2)" in err
    assert main(["validate", "--allow-absent-chunks", str(path)]) == 0
    assert "warning: " in capsys.readouterr().err


@pytest.mark.slow
def test_a_mistake_is_one_line_and_exit_status_two() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sporadik_dask.cli.main", "info", "/nonexistent/store.zarr"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("sporadik-dask: No zarr v3 group at /nonexistent/store.zarr")


@pytest.mark.slow
def test_the_demo_builds_a_store_and_reads_it_along_each_axis(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sporadik_dask.cli.main",
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


@pytest.mark.slow
def test_progress_is_drawn_on_a_terminal_and_not_with_quiet(tmp_path: Path) -> None:
    from tests.helpers import run_on_terminal

    matrix = sp.random(200, 100, density=0.1, format="csr", random_state=8, dtype=np.float64)
    sp.save_npz(tmp_path / "m.npz", matrix)
    command = [sys.executable, "-m", "sporadik_dask.cli.main", "convert", str(tmp_path / "m.npz")]
    status, printed = run_on_terminal([*command, str(tmp_path / "a.zarr")])
    assert status == 0 and "100% Completed" in printed, printed
    status, printed = run_on_terminal([*command, str(tmp_path / "b.zarr"), "--quiet"])
    assert status == 0 and printed == "", printed
    np.testing.assert_array_equal(read_back(tmp_path / "b.zarr"), matrix.toarray())


# Nothing destroyed: the overwrite rule at the command line.


def _adata(rows: int = 60, columns: int = 25) -> anndata.AnnData:
    dense = random_dense(np.random.default_rng(5), (rows, columns), 0.2)
    return anndata.AnnData(sp.csr_matrix(dense))


@pytest.mark.parametrize("flags", [[], ["--overwrite"]], ids=["plain", "--overwrite"])
def test_a_directory_of_other_files_is_refused_as_output_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    _adata().write_h5ad(tmp_path / "in.h5ad")
    results = tmp_path / "results"
    results.mkdir()
    (results / "notes.txt").write_text("x")
    assert main(["convert", str(tmp_path / "in.h5ad"), str(results), "--quiet", *flags]) == 2
    err = capsys.readouterr().err
    assert f"{results} already holds something other than a sporadik store ('notes.txt')" in err
    assert "never replaced, even with --overwrite" in err and err.count("\n") == 1
    assert [p.name for p in results.iterdir()] == ["notes.txt"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging


def test_an_anndata_zarr_store_is_refused_as_output_even_with_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    adata = _adata()
    adata.write_h5ad(tmp_path / "in.h5ad")
    adata.write_zarr(tmp_path / "other.zarr")  # anndata's default: zarr format 2
    command = ["convert", str(tmp_path / "in.h5ad"), str(tmp_path / "other.zarr"), "--quiet"]
    assert main([*command, "--overwrite"]) == 2
    assert "other.zarr already holds something other" in capsys.readouterr().err
    assert (anndata.read_zarr(tmp_path / "other.zarr").X != adata.X).nnz == 0


def test_the_input_is_refused_as_output_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    adata = _adata()
    adata.write_zarr(tmp_path / "in.zarr")
    for output in ("in.zarr", "in.zarr/out.zarr"):
        command = ["convert", str(tmp_path / "in.zarr"), str(tmp_path / output), "--overwrite"]
        assert main(command) == 2
        assert "writing there would delete the input" in capsys.readouterr().err
    assert (anndata.read_zarr(tmp_path / "in.zarr").X != adata.X).nnz == 0


def test_a_store_is_replaced_only_with_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _adata(60, 25).write_h5ad(tmp_path / "a.h5ad")
    _adata(30, 40).write_h5ad(tmp_path / "b.h5ad")
    out = str(tmp_path / "out.zarr")
    assert main(["convert", str(tmp_path / "a.h5ad"), out, "--quiet"]) == 0
    assert main(["convert", str(tmp_path / "b.h5ad"), out, "--quiet"]) == 2
    assert "already holds a sporadik store; pass --overwrite to replace it" in (
        capsys.readouterr().err
    )
    assert sporadik.describe(out).shape == (60, 25)
    assert main(["convert", str(tmp_path / "b.h5ad"), out, "--quiet", "--overwrite"]) == 0
    assert sporadik.describe(out).shape == (30, 40)


def test_the_demo_refuses_a_directory_that_is_not_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("x")
    assert main(["demo", "--output", str(tmp_path), "--cells", "50", "--genes", "20"]) == 2
    printed = capsys.readouterr()
    assert "already holds something other than a sporadik store" in printed.err
    assert printed.out == ""
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


# Nothing silently accepted: a mistake is one line naming the flags, and exit status 2.


def _truncated_h5ad(tmp_path: Path) -> list[str]:
    _adata().write_h5ad(tmp_path / "in.h5ad")
    data = (tmp_path / "in.h5ad").read_bytes()
    (tmp_path / "in.h5ad").write_bytes(data[: len(data) * 9 // 10])
    return [str(tmp_path / "in.h5ad"), str(tmp_path / "out.zarr")]


def _truncated(tmp_path: Path, name: str) -> list[str]:
    """A scipy .npz or a Parquet table, cut to half its bytes, and an output path."""
    import pandas as pd
    import scipy.sparse

    path = tmp_path / name
    if name.endswith(".npz"):
        scipy.sparse.save_npz(path, scipy.sparse.random(400, 300, density=0.1, format="csr"))
    else:
        table = pd.DataFrame({"cell": [f"c{i % 97}" for i in range(5_000)], "gene": "g"})
        table.to_parquet(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    columns = [] if name.endswith(".npz") else ["--columns", "cell", "gene"]
    return [str(path), str(tmp_path / "out.zarr"), *columns]


def _table(tmp_path: Path, text: str) -> str:
    (tmp_path / "t.csv").write_text(text)
    return str(tmp_path / "t.csv")


MISTAKES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "a truncated .h5ad": (_truncated_h5ad, r"in\.h5ad cannot be opened as HDF5 \(.*truncated"),
    "a truncated .npz": (
        lambda p: _truncated(p, "in.npz"),
        r"in\.npz cannot be read \(BadZipFile: .*\); a truncated or damaged file",
    ),
    "a truncated Parquet table": (
        lambda p: _truncated(p, "in.parquet"),
        r"in\.parquet cannot be read \(ArrowInvalid: .*\); a truncated or damaged file",
    ),
    "a misspelled --columns": (
        lambda p: [_table(p, "cell,gene\nc1,g1\n"), str(p / "o.zarr"), "--columns", "cell", "gen"],
        r"t\.csv has no column 'gen'; it has 'cell', 'gene'",
    ),
    "an empty CSV": (
        lambda p: [_table(p, "cell,gene\n"), str(p / "o.zarr"), "--columns", "cell", "gene"],
        r"t\.csv has a header and no rows",
    ),
    "a CSV of nothing": (
        lambda p: [_table(p, ""), str(p / "o.zarr"), "--columns", "cell", "gene"],
        r"t\.csv cannot be read as a table: No columns to parse",
    ),
    "an output that is a file": (
        lambda p: [*_truncated_h5ad(p)[:1], _table(p, "x")],
        r"t\.csv is a file, and a store is a directory",
    ),
    "--chunk with --byte-addressable": (
        lambda p: [*_truncated_h5ad(p), "--chunk", "64", "--byte-addressable"],
        r"--chunk and --byte-addressable contradict each other",
    ),
    "a chain no reader knows": (
        lambda p: [*_truncated_h5ad(p), "--codecs", "gzip"],
        r"--codecs 'gzip' for data; choose one of 'zstd', 'blosc-zstd', 'blosc-lz4'",
    ),
    "counts past a named integer dtype": (
        lambda p: [
            _table(p, "r,c,v\n0,0,1\n1,2,300\n"),
            str(p / "o.zarr"),
            *["--columns", "r", "c", "--values", "v", "--shape", "9", "9"],
            *["--dtype", "uint8"],
        ],
        r"--dtype 'uint8' holds 0\.\.255, but the values run from 1 to 300",
    ),
    "values that are no whole numbers as integers": (
        lambda p: [
            _table(p, "r,c,v\n0,0,1.5\n"),
            str(p / "o.zarr"),
            *["--columns", "r", "c", "--values", "v", "--shape", "9", "9"],
            *["--dtype", "smallest-integer"],
        ],
        r"--dtype 'smallest-integer' stores every value as an integer, but the values "
        r"\(dtype float64\) hold 1\.5, which is no whole number",
    ),
    "a float dtype": (
        lambda p: [*_truncated_h5ad(p), "--dtype", "float16"],
        r"--dtype 'float16' is neither 'smallest-integer'",
    ),
    "one chain and chains by name": (
        lambda p: [*_truncated_h5ad(p), "--codecs", "blosc-lz4", "data=zstd"],
        r"--codecs blosc-lz4 data=zstd: give one chain for every array, or NAME=CHAIN",
    ),
    "a shape for names": (
        lambda p: [
            _table(p, "a,b\nx,y\n"),
            str(p / "o.zarr"),
            *["--columns", "a", "b", "--shape", "3", "3"],
        ],
        r"--shape gives its axis length 3; the names decide the axis, so give None for it in "
        r"--shape\.",
    ),
    "a CSV row with a field too many": (
        lambda p: [
            _table(p, "r,c,v\n0,0,1\n3,4,7,8\n"),
            str(p / "o.zarr"),
            *["--columns", "r", "c", "--values", "v", "--shape", "9", "9"],
        ],
        r"t\.csv cannot be read \(ParserError: .*Expected 3 columns, got 4: 3,4,7,8\)",
    ),
    "a CSV row with its value missing": (
        lambda p: [
            _table(p, "r,c,v\n0,0,1\n1,2\n3,4,5\n"),
            str(p / "o.zarr"),
            *["--columns", "r", "c", "--values", "v", "--shape", "9", "9"],
        ],
        r"t\.csv cannot be read \(ParserError: .*Expected 3 columns, got 2: 1,2\)",
    ),
    "a CSV value column of words": (
        lambda p: [
            _table(p, "r,c,v\n0,0,1\n1,2,abc\n"),
            str(p / "o.zarr"),
            *["--columns", "r", "c", "--values", "v", "--shape", "9", "9"],
        ],
        r"Values of dtype string cannot be stored",
    ),
    "one column on two axes": (
        lambda p: [_table(p, "a,b\nx,y\n"), str(p / "o.zarr"), "--columns", "a", "a"],
        r"--columns names 'a' more than once",
    ),
    "an .npz of dense arrays": (
        lambda p: [_dense_npz(p), str(p / "o.zarr")],
        r"m\.npz holds no scipy sparse matrix \(arrays saved by np\.savez are not one\)",
    ),
}


def _dense_npz(tmp_path: Path) -> str:
    np.savez(tmp_path / "m.npz", x=np.eye(3))
    return str(tmp_path / "m.npz")


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_mistake_is_one_line_naming_the_file_and_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mistake: str
) -> None:
    make, message = MISTAKES[mistake]
    arguments = make(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["convert", *arguments, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sporadik-dask: "), err
    assert re.search(message, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written or staged


def test_an_unreachable_scheduler_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import dask
    from distributed.utils import open_port

    _adata().write_h5ad(tmp_path / "in.h5ad")
    address = f"tcp://127.0.0.1:{open_port()}"
    command = ["convert", str(tmp_path / "in.h5ad"), str(tmp_path / "o.zarr")]
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        assert main([*command, "--scheduler", address, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sporadik-dask: Cannot reach the dask scheduler at '{address}'")
    assert err.count("\n") == 1


def test_a_chunk_of_zero_is_refused_and_every_argument_says_what_it_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import argparse

    from sporadik_dask.cli.arguments import parser

    with pytest.raises(SystemExit) as refused:
        main(["convert", "in.h5ad", "out.zarr", "--chunk", "0"])
    assert refused.value.code == 2
    assert "argument --chunk: must be at least 1, not 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as shown:
        main(["--version"])
    assert shown.value.code == 0 and capsys.readouterr().out.startswith("sporadik-dask 0.")
    made = parser()
    (commands,) = [a for a in made._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in commands.choices.items():
        for action in command._actions:
            assert action.help, f"{name} {action.dest} has no help text"


def test_a_failed_fetch_is_a_sporadik_error_and_an_oserror() -> None:
    from sporadik_dask.format.errors import FetchError, SporadikError

    assert issubclass(FetchError, SporadikError) and issubclass(FetchError, OSError)


def _cli() -> list[str]:
    return [str(Path(sys.executable).parent / "sporadik-dask")]


@pytest.mark.slow
@pytest.mark.parametrize("when", ["staging", "laid out", "writing chunks"])
def test_ctrl_c_says_nothing_was_committed(tmp_path: Path, when: str) -> None:
    import signal
    import time

    # 150 values a row at sorted columns, one in each run of 20 (sp.random takes 10 s at 3 M)
    rng = np.random.default_rng(9)
    columns = np.arange(0, 3_000, 20) + rng.integers(0, 20, (20_000, 150))
    values = rng.random(columns.size, dtype=np.float32)
    matrix = sp.csr_matrix(
        (values, columns.ravel(), np.arange(0, columns.size + 1, 150)), shape=(20_000, 3_000)
    )
    sp.save_npz(tmp_path / "m.npz", matrix, compressed=False)
    command = [*_cli(), "convert", str(tmp_path / "m.npz"), str(tmp_path / "out.zarr"), "--quiet"]
    # among chunk writes: partitions of ~170,000 values, so chunks are written from early on
    # and the write is far from done when the first appear
    small = {"DASK_SPORADIK__PARTITION_BYTES": "2000000"} if when == "writing chunks" else {}
    running = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **small},
        # a shell runs a background job with SIGINT ignored, and Python keeps an ignored SIGINT:
        # give the child the terminal's default, as a user's Ctrl-C finds it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120

    def started() -> bool:
        if when == "staging":  # the conversion's first step
            return any(p.name.startswith(".sporadik-staging") for p in tmp_path.iterdir())
        if when == "laid out":
            return (tmp_path / "out.zarr" / "zarr.json").exists()  # the write's first task ran
        layouts = tmp_path / "out.zarr" / "layouts"  # the first chunks of either layout
        return any((layouts / f"axis{k}" / "data" / "c").exists() for k in (0, 1))

    while not started():
        assert running.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.05)  # interrupt it early, while it runs
    running.send_signal(signal.SIGINT)
    _, err = running.communicate(timeout=120)
    assert running.returncode == 130, err
    assert err == "sporadik-dask: interrupted; nothing was committed\n"
    # where nothing was, nothing is left: not a torn store to be refused without --overwrite,
    # nor chunks written by tasks still running when the store was removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]
    time.sleep(0.5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]
    assert subprocess.run(command, capture_output=True, timeout=120).returncode == 0


@pytest.mark.slow
def test_info_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    path = write_reference(tmp_path / "s.zarr", np.eye(30), {0: (1,), 1: (0,)})
    running = subprocess.Popen(
        [*_cli(), "info", str(path), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert running.stdout is not None and running.stderr is not None
    running.stdout.close()  # as `| head -1` does once it has its line; here before any
    err = running.stderr.read()
    assert running.wait(timeout=120) == 141
    assert err == b""


# Object stores: --storage-options reaches inputs and outputs alike.


@pytest.mark.slow
def test_convert_info_and_validate_reach_an_s3_bucket(
    tmp_path: Path, s3: S3Bucket, capsys: pytest.CaptureFixture[str]
) -> None:
    options = ["--storage-options", json.dumps(s3["storage_options"])]
    prefix = f"s3://{s3['bucket']}/{uuid.uuid4().hex}"
    adata = _adata()
    adata.write_h5ad(tmp_path / "in.h5ad")
    store = f"{prefix}/counts.zarr"
    assert main(["convert", str(tmp_path / "in.h5ad"), store, "--axes", "0", *options]) == 0
    assert main(["convert", store, store, "--quiet", *options]) == 0  # adds the other layout
    assert main(["info", store, "--json", *options]) == 0
    assert "layouts/axis1" in capsys.readouterr().out
    remote = zarr.storage.FsspecStore.from_url(
        f"{prefix}/in.zarr", storage_options=s3["storage_options"]
    )
    adata.write_zarr(remote)
    assert main(["convert", f"{prefix}/in.zarr", f"{prefix}/in.zarr", *options]) == 2
    assert "writing there would delete the input" in capsys.readouterr().err
    assert main(["convert", f"{prefix}/in.zarr", f"{prefix}/b.zarr", "--quiet", *options]) == 0
    assert main(["validate", f"{prefix}/b.zarr", *options]) == 0
    dense = adata.X.toarray()
    for written in (store, f"{prefix}/b.zarr"):
        y = sd.from_sporadik(written, storage_options=s3["storage_options"], axis=1)
        np.testing.assert_array_equal(y.compute().todense(), dense)


def test_s3_without_credentials_is_one_line(
    s3: S3Bucket, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    no_keys = {k: v for k, v in s3["storage_options"].items() if k not in ("key", "secret")}
    store = f"s3://{s3['bucket']}/{uuid.uuid4().hex}/counts.zarr"
    assert main(["info", store, "--storage-options", json.dumps(no_keys)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sporadik-dask: NoCredentialsError: Unable to locate credentials")
    assert "--storage-options" in err and err.count("\n") == 1


def test_an_interrupt_after_a_commit_reports_what_was_committed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C can land between a write's commit and the command's end (or between the layouts
    `convert` adds one after another): the message says what is complete, not that nothing is."""
    import argparse

    import sparse

    from sporadik_dask.cli.commands import reported
    from sporadik_dask.cli.main import _run

    dense = random_dense(np.random.default_rng(4), (30, 20), 0.3)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(xr.DataArray(sparse.COO.from_numpy(dense), dims=("a", "b")), path, axes=[0])

    def commit_then_interrupted(write: Any) -> None:
        write.compute()
        raise KeyboardInterrupt  # what Python raises on SIGINT, just after the commit

    def interrupted(write: Any) -> None:
        raise KeyboardInterrupt

    def add_layout(args: argparse.Namespace) -> None:
        reported(args, sd.add_axis(path, 1, compute=False), commit_then_interrupted, "axis1")

    assert _run(argparse.Namespace(run=add_layout)) == 130
    assert "interrupted; axis1 committed, complete" in capsys.readouterr().err
    assert sorted(sd.describe(path).layouts) == [0, 1]

    def write_new(args: argparse.Namespace) -> None:
        new = xr.DataArray(sparse.COO.from_numpy(dense), dims=("a", "b"))
        reported(args, sd.to_sporadik(new, tmp_path / "t.zarr", compute=False), interrupted, "t")

    assert _run(argparse.Namespace(run=write_new)) == 130
    assert "interrupted; nothing was committed" in capsys.readouterr().err


def test_an_object_store_that_does_not_answer_is_called_down_not_a_credential_problem(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import socket

    with socket.socket() as closed:  # a port that was free a moment ago: nothing listens there
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    options = {
        "key": "k",
        "secret": "s",
        "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"},
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1},
    }
    assert main(["info", "s3://bucket/x.zarr", "--storage-options", json.dumps(options)]) == 2
    err = capsys.readouterr().err
    assert "did not answer" in err and "credentials" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_full_disk_is_named_with_its_path_and_the_torn_store_is_replaced_after(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real file system (tmpfs, 1 MiB) fills up during convert: one line saying the disk is
    full and where, exit 2, and once there is room the same location takes --overwrite."""
    disk = tmp_path / "disk"
    if not mount_tmpfs(disk, "1m"):
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    try:
        rng = np.random.default_rng(5)
        dense = rng.random((1000, 500)) * (rng.random((1000, 500)) < 0.5)  # ~4 MB of chunks
        source = tmp_path / "m.npz"
        sp.save_npz(source, sp.csr_matrix(dense))
        output = disk / "s.zarr"
        assert main(["convert", str(source), str(output), "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"sporadik-dask: disk full at {output}"), err
        assert "\n" not in err and "--overwrite" in err
        with pytest.raises(sd.IncompleteError):
            sd.describe(output)
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        assert main(["convert", str(source), str(output), "--quiet", "--overwrite"]) == 0
        np.testing.assert_array_equal(read_back(output), dense)
    finally:
        unmount(disk)
