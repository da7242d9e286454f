"""Converting the files single-cell and spatial pipelines write: 10x Matrix Market directories,
Parquet and CSV coordinate tables, and AnnData and scipy files large enough to span many chunks.
Every input is made by the library that writes it in the wild; every store is read back by the
reference."""

from __future__ import annotations

import gzip
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anndata
import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
import scipy.io
import scipy.sparse as sp
import sporadik
import xarray as xr

import sporadik_dask as sd
from sporadik_dask.cli.main import main
from sporadik_dask.write import tables


def read_back(path: Path) -> npt.NDArray[Any]:
    with sporadik.open_array(path) as store:
        return store.to_array().to_dense()


def counts(shape: tuple[int, int], density: float, seed: int) -> sp.coo_matrix:
    """``density`` of the cells, each a count from 1 to 49, in C order (sp.random takes 2 s at
    360,000 values)."""
    rng = np.random.default_rng(seed)
    size = shape[0] * shape[1]
    cells = np.sort(rng.choice(size, round(size * density), replace=False))
    rows, columns = np.unravel_index(cells, shape)
    values = rng.integers(1, 50, cells.size).astype(np.int64)
    return sp.coo_matrix((values, (rows, columns)), shape=shape)


def gzipped(path: Path) -> None:
    with path.open("rb") as plain, gzip.open(f"{path}.gz", "wb") as packed:
        shutil.copyfileobj(plain, packed)
    path.unlink()


def write_10x(directory: Path, matrix: sp.coo_matrix, *, v3: bool = True) -> None:
    """A Cell Ranger directory: features x barcodes Matrix Market, gzip'd from version 3 on."""
    directory.mkdir()
    scipy.io.mmwrite(directory / "matrix.mtx", matrix, field="integer")
    n_features, n_barcodes = matrix.shape
    features = pd.DataFrame(
        {
            "id": [f"ENSG{i:011d}" for i in range(n_features)],
            "name": [f"GENE{i}" for i in range(n_features)],
            "type": "Gene Expression",
        }
    )
    barcodes = pd.DataFrame({"barcode": [f"BC{j:08d}-1" for j in range(n_barcodes)]})
    name = "features.tsv" if v3 else "genes.tsv"
    features.iloc[:, : 3 if v3 else 2].to_csv(directory / name, sep="\t", header=False, index=False)
    barcodes.to_csv(directory / "barcodes.tsv", sep="\t", header=False, index=False)
    if v3:
        for file in ("matrix.mtx", "features.tsv", "barcodes.tsv"):
            gzipped(directory / file)


@pytest.mark.parametrize("v3", [True, False], ids=["cellranger3-gz", "cellranger2-plain"])
def test_a_10x_directory_converts_to_cells_by_features_with_names(tmp_path: Path, v3: bool) -> None:
    matrix = counts((120, 400), 0.05, 0)
    write_10x(tmp_path / "filtered", matrix, v3=v3)
    assert main(["convert", str(tmp_path / "filtered"), str(tmp_path / "out.zarr"), "--quiet"]) == 0
    np.testing.assert_array_equal(read_back(tmp_path / "out.zarr"), matrix.toarray().T)
    counts_ = xr.open_dataset(tmp_path / "out.zarr", engine="sporadik")["X"]
    assert counts_.dims == ("obs", "var") and counts_.dtype == np.int32
    assert counts_.obs.values[3] == "BC00000003-1" and counts_["var"].values[2] == "ENSG00000000002"
    assert counts_["feature_name"].dims == ("var",) and counts_["feature_name"].values[2] == "GENE2"
    if v3:  # Cell Ranger 3 on: the feature type, a categorical to group by
        assert isinstance(counts_["feature_type"].dtype, pd.CategoricalDtype)
        assert list(counts_["feature_type"].dtype.categories) == ["Gene Expression"]
        by_type = counts_.groupby("feature_type").sum()
        np.testing.assert_array_equal(by_type.values[:, 0], matrix.toarray().sum(axis=0))
    else:
        assert "feature_type" not in counts_.coords
    assert sorted(p.name for p in tmp_path.iterdir()) == ["filtered", "out.zarr"]  # no staging


@pytest.mark.slow
def test_a_10x_matrix_spanning_many_chunks_and_staged_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tables, "STAGE_ROWS", 40_000)  # many staged parts from a small file
    matrix = counts((3_000, 4_000), 0.03, 1)  # 360,000 values: 11 chunks of int32 data
    write_10x(tmp_path / "raw", matrix)
    assert main(["convert", str(tmp_path / "raw"), str(tmp_path / "out.zarr"), "--quiet"]) == 0
    description = sporadik.describe(tmp_path / "out.zarr")
    assert description.layouts.keys() == {0, 1}
    assert -(-matrix.nnz // description.layouts[0].chunks["data"]) > 10
    np.testing.assert_array_equal(read_back(tmp_path / "out.zarr"), matrix.toarray().T)


def test_a_matrix_market_file_that_is_not_a_general_coordinate_matrix_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "sym"
    write_10x(directory, counts((30, 30), 0.1, 2), v3=False)
    symmetric = sp.coo_matrix(np.triu(np.ones((30, 30), dtype=np.int64)))
    symmetric = symmetric + symmetric.T
    scipy.io.mmwrite(directory / "matrix.mtx", symmetric, symmetry="symmetric")
    assert main(["convert", str(directory), str(tmp_path / "out.zarr"), "--quiet"]) == 2
    assert "symmetric" in capsys.readouterr().err
    assert not (tmp_path / "out.zarr").exists()


def _edited_10x(directory: Path, edit: Callable[[list[str]], list[str]], *, gz: bool) -> None:
    """A Cell Ranger 2 directory whose matrix.mtx had its lines edited, gzip'd if asked."""
    write_10x(directory, counts((40, 300), 0.2, 4), v3=False)
    lines = (directory / "matrix.mtx").read_text().splitlines(keepends=True)
    (directory / "matrix.mtx").write_text("".join(edit(lines)))
    if gz:
        gzipped(directory / "matrix.mtx")


def _first_entry(lines: list[str]) -> int:
    return next(i for i, line in enumerate(lines) if not line.startswith("%")) + 1


def _zero_row(lines: list[str]) -> list[str]:
    at = _first_entry(lines) + 9
    return [*lines[:at], "0" + lines[at][lines[at].index(" ") :], *lines[at + 1 :]]


def _huge_value(lines: list[str]) -> list[str]:
    at = _first_entry(lines) + 4
    row, column, _ = lines[at].split()
    return [*lines[:at], f"{row} {column} 3000000000\n", *lines[at + 1 :]]


EDITS: dict[str, tuple[Callable[[list[str]], list[str]], str]] = {
    "cut after whole lines": (
        lambda lines: lines[:1000],
        r"matrix\.mtx(\.gz)? declares 2,400 entries in its header and holds 997",
    ),
    "cut mid-line": (
        lambda lines: [*lines[:1000], lines[1000].split()[0] + " "],
        r"matrix\.mtx(\.gz)?, line 1001: the entry has fewer than 3 numbers",
    ),
    "a 0 in a 1-based file": (
        _zero_row,
        r"matrix\.mtx(\.gz)?, line 13: row 0 is not a whole number in 1\.\.40",
    ),
    "a value past int32": (
        _huge_value,
        r"matrix\.mtx(\.gz)?, line 8: value 3e\+09 is not a 32-bit integer",
    ),
    "extra entries": (
        lambda lines: [*lines, lines[-1]],
        r"declares 2,400 entries in its header and holds 2,401",
    ),
}


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
@pytest.mark.parametrize("edit", EDITS)
def test_a_matrix_market_file_that_is_cut_or_wrong_is_refused_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: str, gz: bool
) -> None:
    change, message = EDITS[edit]
    _edited_10x(tmp_path / "raw", change, gz=gz)
    assert main(["convert", str(tmp_path / "raw"), str(tmp_path / "out.zarr"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"]  # no store, no staging


def test_a_gzip_stream_cut_short_is_refused_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _edited_10x(tmp_path / "raw", lambda lines: lines, gz=True)
    packed = (tmp_path / "raw" / "matrix.mtx.gz").read_bytes()
    (tmp_path / "raw" / "matrix.mtx.gz").write_bytes(packed[: len(packed) // 2])
    assert main(["convert", str(tmp_path / "raw"), str(tmp_path / "out.zarr"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "matrix.mtx.gz ends before its gzip stream does" in err and err.count("\n") == 1
    table = tmp_path / "t.csv.gz"
    transcripts(5_000, 5).to_csv(table, index=False)
    table.write_bytes(table.read_bytes()[:20_000])
    command = ["convert", str(table), str(tmp_path / "t.zarr"), "--columns", "cell_id", "qv"]
    assert main([*command, "--quiet"]) == 2
    assert "t.csv.gz ends before its gzip stream does" in capsys.readouterr().err


def test_a_plain_table_cut_inside_its_last_row_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "t.csv"
    pd.DataFrame({"row": [0, 1, 2], "col": [1, 2, 0], "value": [5, 6, 17]}).to_csv(
        table, index=False
    )
    whole = table.read_bytes()
    assert whole.endswith(b"17\n")
    table.write_bytes(whole[:-2])  # the last count cut from 17 to 1: it still parses
    command = ["convert", str(table), str(tmp_path / "t.zarr"), "--columns", "row", "col"]
    command += ["--values", "value", "--shape", "3", "3", "--quiet"]
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "t.csv does not end with a line end" in err and err.count("\n") == 1
    assert not (tmp_path / "t.zarr").exists()
    table.write_bytes(whole)
    assert main(command) == 0
    np.testing.assert_array_equal(
        read_back(tmp_path / "t.zarr"), [[0, 5, 0], [0, 0, 6], [17, 0, 0]]
    )


def transcripts(n: int, seed: int) -> pd.DataFrame:
    """A spatial transcript table: one row per detected molecule, named cell and gene."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "cell_id": rng.choice([f"cell-{i:05d}" for i in range(n // 40)], n),
            "feature_name": rng.choice([f"Gene{j:03d}" for j in range(300)], n),
            "x_location": rng.random(n) * 1000,
            "qv": rng.random(n) * 40,
        }
    )


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".csv.gz"])
@pytest.mark.parametrize("n", [2_000, 400_000], ids=["small", "many-chunks"])
def test_a_transcript_table_becomes_counts_per_cell_and_gene(
    tmp_path: Path, suffix: str, n: int
) -> None:
    table = transcripts(n, 3)
    path = tmp_path / f"transcripts{suffix}"
    table.to_parquet(path) if suffix == ".parquet" else table.to_csv(path, index=False)
    out = tmp_path / "out.zarr"
    assert main(["convert", str(path), str(out), "--columns", "cell_id", "feature_name"]) == 0
    # molecules per (cell, gene), names sorted as ours are (pd.crosstab takes 7 s at 400,000)
    cells, cell_at = np.unique(table["cell_id"].to_numpy(), return_inverse=True)
    genes, gene_at = np.unique(table["feature_name"].to_numpy(), return_inverse=True)
    expected = np.zeros((cells.size, genes.size), dtype=np.int64)
    np.add.at(expected, (cell_at, gene_at), 1)
    array = xr.open_dataset(out, engine="sporadik")["count"]
    assert array.dims == ("cell_id", "feature_name")
    assert list(array.cell_id.values) == list(cells)
    assert list(array.feature_name.values) == list(genes)
    np.testing.assert_array_equal(read_back(out), expected)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # staging gone


def test_a_table_of_integer_positions_and_values_needs_a_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(4)
    table = pd.DataFrame(
        {
            "row": rng.integers(0, 90, 3_000),
            "col": rng.integers(0, 70, 3_000),
            "w": rng.random(3_000).astype(np.float32),
        }
    )
    table.to_parquet(tmp_path / "edges.parquet")
    args = ["convert", str(tmp_path / "edges.parquet"), str(tmp_path / "g.zarr")]
    args += ["--columns", "row", "col", "--values", "w", "--quiet"]
    assert main(args) == 2
    assert "needs --shape with their axes' lengths" in capsys.readouterr().err
    assert main([*args, "--shape", "100", "80"]) == 0
    expected = np.zeros((100, 80), dtype=np.float32)
    np.add.at(expected, (table["row"], table["col"]), table["w"])
    np.testing.assert_allclose(read_back(tmp_path / "g.zarr"), expected, rtol=1e-6)
    assert main([*args[:3], "--quiet"]) == 2
    assert "--columns" in capsys.readouterr().err


def test_float_coordinates_and_missing_names_are_refused(tmp_path: Path) -> None:
    import dask.dataframe as dd

    table = transcripts(500, 5)
    frame = dd.from_pandas(table, npartitions=3)
    with pytest.raises(sd.LayoutError, match=r"x_location.*float64"):
        sd.to_sporadik(frame, tmp_path / "a.zarr", columns=("cell_id", "x_location"))
    table.loc[7, "cell_id"] = None
    with pytest.raises(sd.LayoutError, match="missing or unknown label"):
        sd.to_sporadik(
            dd.from_pandas(table, npartitions=3),
            tmp_path / "b.zarr",
            columns=("cell_id", "feature_name"),
        )
    with pytest.raises(sd.LayoutError, match="distinct names but shape="):
        sd.to_sporadik(
            frame, tmp_path / "c.zarr", columns=("cell_id", "feature_name"), shape=(3, 3)
        )


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["h5ad-csr", "h5ad-csc", "anndata-zarr-csr", "npz"])
def test_files_spanning_many_chunks_convert(tmp_path: Path, kind: str) -> None:
    matrix = counts((2_500, 3_000), 0.05, 6).astype(np.float32)  # 375,000 values
    if kind == "npz":
        path = tmp_path / "m.npz"
        sp.save_npz(path, matrix.tocsr())
    elif kind == "anndata-zarr-csr":
        path = tmp_path / "m.zarr"
        anndata.AnnData(matrix.tocsr()).write_zarr(path)
    else:
        path = tmp_path / "m.h5ad"
        x = matrix.tocsr() if kind == "h5ad-csr" else matrix.tocsc()
        anndata.AnnData(x).write_h5ad(path)
    assert main(["convert", str(path), str(tmp_path / "out.zarr"), "--quiet"]) == 0
    description = sporadik.describe(tmp_path / "out.zarr")
    assert -(-matrix.nnz // description.layouts[1].chunks["data"]) > 10
    np.testing.assert_array_equal(read_back(tmp_path / "out.zarr"), matrix.toarray())
