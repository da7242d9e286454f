"""Parquet coordinate tables read by pyarrow: names as dictionary codes, repeats summed per block,
checked against pyarrow + scipy counting the same table in memory and against the dask
DataFrame route the package takes for any other DataFrame."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
import sporadik
import xarray as xr

import sporadik_dask as sd
from sporadik_dask.cli.main import main
from sporadik_dask.write import parquet


def transcripts(n: int, seed: int) -> pd.DataFrame:
    """Skewed names, in random order, with a few names repeated on many rows."""
    rng = np.random.default_rng(seed)
    cells = [f"cell-{i:05d}" for i in rng.permutation(n // 20)]
    genes = [f"G{j:03d}" for j in rng.permutation(60)]
    weights = 1.0 / np.arange(1, 61) ** 1.2
    return pd.DataFrame(
        {
            "cell_id": rng.choice(cells, n),
            "gene": rng.choice(genes, n, p=weights / weights.sum()),
            "umi": rng.integers(1, 5, n).astype(np.int32),
            "qv": rng.random(n).astype(np.float32),
        }
    )


def scipy_count(table: pd.DataFrame, values: str | None = None) -> tuple[np.ndarray, ...]:
    """What pyarrow + scipy make of the table: sorted names per axis and the dense sums."""
    cells, row = np.unique(table["cell_id"].to_numpy(str), return_inverse=True)
    genes, col = np.unique(table["gene"].to_numpy(str), return_inverse=True)
    data = np.ones(len(table), np.int64) if values is None else table[values].to_numpy()
    matrix = sp.coo_matrix((data, (row, col)), shape=(len(cells), len(genes))).toarray()
    return cells, genes, matrix


def read_back(path: Path, name: str) -> tuple[np.ndarray, ...]:
    array = xr.open_dataset(path, engine="sporadik")[name]
    with sporadik.open_array(path) as store:
        dense = store.to_array().to_dense()
    return array.cell_id.values, array.gene.values, dense


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Splits of one row group and blocks of a few hundred rows, so a small table spans many."""
    monkeypatch.setattr(parquet, "SPLIT_ROWS", 1)
    monkeypatch.setattr(parquet, "BLOCK_ROWS", 700)
    monkeypatch.setattr(parquet, "BLOCK_CELLS", 2_000)


@pytest.mark.slow
@pytest.mark.parametrize("values", [None, "umi", "qv"])
def test_a_table_of_many_row_groups_equals_the_pyarrow_and_scipy_count(
    tmp_path: Path, small_pieces: None, values: str | None
) -> None:
    table = transcripts(12_000, 1)
    path = tmp_path / "t.parquet"
    table.to_parquet(path, row_group_size=1_000)
    args = ["convert", str(path), str(tmp_path / "out.zarr"), "--columns", "cell_id", "gene"]
    assert main([*args, *(["--values", values] if values else []), "--quiet"]) == 0
    cells, genes, dense = read_back(tmp_path / "out.zarr", values or "count")
    expected_cells, expected_genes, expected = scipy_count(table, values)
    np.testing.assert_array_equal(cells, expected_cells)
    np.testing.assert_array_equal(genes, expected_genes)
    np.testing.assert_allclose(dense, expected, rtol=1e-5)
    assert dense.dtype == (np.int32 if values in (None, "umi") else np.float32)


def test_a_table_is_read_in_pieces_of_row_groups_not_as_one(
    tmp_path: Path, small_pieces: None
) -> None:
    path = tmp_path / "t.parquet"
    transcripts(6_000, 2).to_parquet(path, row_group_size=1_000)
    splits, _ = parquet.splits_of(path, None)
    assert [split.rows for split in splits] == [1_000] * 6
    source = parquet.parquet_source(path, ["cell_id", "gene"], None, None, tmp_path / "staged")
    assert len(source.pieces.keys) > 1
    assert source.labels is not None and source.labels.name == "count"


def test_labels_come_in_the_order_the_dataframe_route_gives(tmp_path: Path) -> None:
    table = transcripts(5_000, 3)
    table.loc[::7, "cell_id"] = "Zeta-é"  # past ASCII: byte order and code point order agree
    table.loc[::11, "cell_id"] = "alpha"
    path = tmp_path / "t.parquet"
    table.to_parquet(path, row_group_size=800)
    source = parquet.parquet_source(path, ["cell_id", "gene"], None, None, tmp_path / "staged")
    sd.to_sporadik(source, tmp_path / "ours.zarr")
    frame = dd.read_parquet(path)[["cell_id", "gene"]]
    sd.to_sporadik(frame, tmp_path / "frame.zarr", columns=("cell_id", "gene"))
    ours, theirs = (
        read_back(tmp_path / "ours.zarr", "count"),
        read_back(tmp_path / "frame.zarr", "count"),
    )
    for mine, other in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(mine, other)


def test_categorical_columns_and_a_directory_of_files_keep_only_the_names_used(
    tmp_path: Path,
) -> None:
    table = transcripts(4_000, 4)
    table["gene"] = pd.Categorical(table["gene"], categories=[*sorted(set(table["gene"])), "ZZ"])
    directory = tmp_path / "parts.parquet"
    directory.mkdir()
    table.iloc[:2_500].to_parquet(directory / "part-0.parquet")
    table.iloc[2_500:].to_parquet(directory / "part-1.parquet")
    (directory / "_SUCCESS").write_text("")
    args = ["convert", str(directory), str(tmp_path / "out.zarr"), "--columns", "cell_id", "gene"]
    assert main([*args, "--quiet"]) == 0
    cells, genes, dense = read_back(tmp_path / "out.zarr", "count")
    expected_cells, expected_genes, expected = scipy_count(table.astype({"gene": str}))
    assert "ZZ" not in genes
    np.testing.assert_array_equal(cells, expected_cells)
    np.testing.assert_array_equal(genes, expected_genes)
    np.testing.assert_array_equal(dense, expected)


def test_integer_positions_beside_names_are_checked_against_the_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(5)
    table = pd.DataFrame(
        {"gene": rng.choice(["a", "b", "c"], 900), "bin": rng.integers(0, 40, 900)}
    )
    pq.write_table(pa.Table.from_pandas(table), tmp_path / "t.parquet", row_group_size=300)
    args = ["convert", str(tmp_path / "t.parquet"), str(tmp_path / "out.zarr")]
    args += ["--columns", "gene", "bin", "--quiet"]
    assert main([*args, "--shape", "3", "40"]) == 0
    with sporadik.open_array(tmp_path / "out.zarr") as store:
        dense = store.to_array().to_dense()
    expected = pd.crosstab(table["gene"], table["bin"]).reindex(columns=range(40), fill_value=0)
    np.testing.assert_array_equal(dense, expected.to_numpy())
    assert main([*args, "--shape", "3", "30", "--overwrite"]) == 2
    assert "outside an axis of length 30" in capsys.readouterr().err
    capsys.readouterr()
    assert main([*args, "--overwrite"]) == 2  # refused before any pass over the table
    assert "Pass --shape None <bin length>" in capsys.readouterr().err
    assert main([*args, "--shape", "none", "40", "--overwrite"]) == 0
    with sporadik.open_array(tmp_path / "out.zarr") as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), expected.to_numpy())


def test_missing_names_and_float_coordinates_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = transcripts(600, 6)
    table.loc[9, "gene"] = None
    table.to_parquet(tmp_path / "t.parquet")
    args = ["convert", str(tmp_path / "t.parquet"), str(tmp_path / "out.zarr"), "--quiet"]
    assert main([*args, "--columns", "cell_id", "gene"]) == 2
    assert "'gene' holds a missing or unknown label" in capsys.readouterr().err
    assert main([*args, "--columns", "cell_id", "qv"]) == 2
    assert "'qv' (axis 1) has type float" in capsys.readouterr().err
    assert main([*args, "--columns", "cell_id", "gen"]) == 2
    assert "has no column 'gen'" in capsys.readouterr().err


@pytest.mark.slow
def test_the_passes_graphs_stay_small_whatever_the_number_of_names(
    tmp_path: Path, small_pieces: None
) -> None:
    """Every graph the label and bucket passes hand the scheduler is a few KiB (1.1 and 5.9 kB
    here): the names stay in staging, where each split's lookup table had been put into the bucket
    pass's graph (1.7 MB for 8 splits of 40,000 cells). The scheduler is dask's threaded one,
    measuring the graph it is given."""
    import pickle

    import dask
    import dask.threaded

    rng = np.random.default_rng(8)
    rows = 320_000
    table = pd.DataFrame(
        {
            "cell_id": [f"cell-{i:06d}" for i in rng.permutation(rows) % 40_000],
            "gene": rng.choice([f"G{j}" for j in range(30)], rows),
        }
    )
    path = tmp_path / "t.parquet"
    table.to_parquet(path, row_group_size=rows // 8)
    sizes: list[int] = []

    def measuring_get(graph: Any, keys: list[Any], **kwargs: Any) -> Any:
        tasks = graph if isinstance(graph, Mapping) else graph.__dask_graph__()
        sizes.append(len(pickle.dumps(dict(tasks))))
        return dask.threaded.get(graph, keys, **kwargs)

    with dask.config.set(scheduler=measuring_get):
        source = parquet.parquet_source(path, ["cell_id", "gene"], None, None, tmp_path / "s")
    assert len(sizes) == 2 and max(sizes) < 64 * 1024, sizes
    sd.to_sporadik(source, tmp_path / "out.zarr")
    for ours, expected in zip(
        read_back(tmp_path / "out.zarr", "count"), scipy_count(table), strict=True
    ):
        np.testing.assert_array_equal(ours, expected)
