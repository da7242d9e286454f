"""Input recognition: every kind of input becomes pieces holding each of its cells once, with its
values, and what cannot be written is refused before any graph runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import numpy.typing as npt
import pytest
import scipy.sparse as sp
import sparse
import xarray as xr
import zarr

import sporadik_dask as sd
from sporadik_dask.read.dask_model import EXPRESSIONS
from sporadik_dask.write import frame_pieces, pieces
from sporadik_dask.write.sources import PIECE_VALUES, Source, source_of, source_of_layout
from tests.helpers import labelled, random_dense


def assembled(source: Source) -> npt.NDArray[Any]:
    """The dense array the source's pieces hold, refusing a cell held twice."""
    dense = np.zeros(source.shape, dtype=source.dtype)
    seen = np.zeros(source.shape, dtype=int)
    for piece in dask.get(dict(source.pieces.graph), list(source.pieces.keys)):
        assert isinstance(piece, pieces.Piece)
        np.add.at(seen, tuple(piece.coords), 1)
        dense[tuple(piece.coords)] = piece.data
    assert seen.max(initial=0) <= 1
    return dense


def _columns(dense: npt.NDArray[Any]) -> tuple[da.Array, tuple[da.Array, ...]]:
    found = np.nonzero(dense)
    return da.from_array(dense[found], chunks=7), tuple(da.from_array(c, chunks=5) for c in found)


KINDS: dict[str, Callable[[npt.NDArray[Any]], Any]] = {
    "numpy": lambda d: d,
    "dask numpy chunks": lambda d: da.from_array(d, chunks=(4, 5)),
    "dask sparse chunks": lambda d: da.from_array(
        sparse.COO.from_numpy(d), chunks=(4, 5), asarray=False
    ),
    "dask scipy chunks": lambda d: da.from_array(d, chunks=(4, 5)).map_blocks(
        sp.csr_matrix, dtype=d.dtype
    ),
    "scipy": sp.csc_matrix,
    "sparse": sparse.COO.from_numpy,
    "coordinate columns": _columns,
    "xarray": lambda d: xr.DataArray(d),
}


@pytest.mark.parametrize("kind", KINDS, ids=list(KINDS))
def test_every_input_kind_becomes_pieces_holding_each_cell_once(kind: str) -> None:
    dense = random_dense(np.random.default_rng(1), (13, 11), 0.3)
    shape = dense.shape if kind == "coordinate columns" else None
    source = source_of(KINDS[kind](dense), shape=shape)
    assert source.shape == dense.shape and source.dtype == dense.dtype
    np.testing.assert_array_equal(assembled(source), dense)
    assert len(source.pieces.repeats) == (len(source.pieces.keys) if shape else 0)


def test_an_in_memory_array_is_cut_into_pieces_of_bounded_size() -> None:
    n = PIECE_VALUES + 10
    coo = sparse.COO(np.stack([np.arange(n), np.zeros(n, int)]), np.ones(n), shape=(n, 1))
    source = source_of(coo)
    assert len(source.pieces.keys) == 2


def test_a_dataarray_keeps_its_labels() -> None:
    dense = random_dense(np.random.default_rng(2), (6, 4), 0.5)
    source = source_of(labelled(dense))
    assert source.labels is not None
    assert source.labels.dims == ("cell", "gene") and source.labels.name == "counts"
    assert list(source.labels.coords["gene"].values) == ["a", "b", "c", "d"]


def test_a_dataframe_of_names_becomes_labelled_axes_and_counts() -> None:
    import dask.dataframe as dd
    import pandas as pd

    table = pd.DataFrame({"cell": ["b", "a", "b", "b"], "gene": ["x", "y", "x", "z"]})
    source = source_of(dd.from_pandas(table, npartitions=2), columns=("cell", "gene"))
    assert source.shape == (2, 3) and source.dtype == frame_pieces.COUNT_DTYPE
    assert source.labels is not None
    assert list(source.labels.coords["cell"].values) == ["a", "b"]
    np.testing.assert_array_equal(assembled(source), [[0, 1, 0], [2, 0, 1]])


@pytest.mark.parametrize("kind", ["object", "string[pyarrow]", "category"])
def test_names_of_every_column_kind_are_found_per_partition_in_numpy_s_order(kind: str) -> None:
    import dask.dataframe as dd
    import pandas as pd

    rng = np.random.default_rng(5)
    names = rng.choice(["b", "é", "a", "Z", "a-1", "ß"], 60)
    genes = rng.choice(["x", "y"], 60)
    if kind == "category":  # an unused category names no position
        cells = pd.Series(pd.Categorical(names, categories=[*sorted(set(names)), "unused"]))
    else:
        cells = pd.Series(names, dtype=kind)
    frame = dd.from_pandas(pd.DataFrame({"cell": cells, "gene": genes}), npartitions=5)
    source = source_of(frame, columns=("cell", "gene"))
    expected_cells, row = np.unique(names.astype(str), return_inverse=True)
    expected_genes, col = np.unique(genes.astype(str), return_inverse=True)
    assert source.labels is not None
    np.testing.assert_array_equal(source.labels.coords["cell"].values, expected_cells)
    expected = np.zeros((len(expected_cells), len(expected_genes)), dtype=np.int64)
    np.add.at(expected, (row, col), 1)
    np.testing.assert_array_equal(assembled(source), expected)


def test_a_stored_layout_becomes_pieces_of_its_positions(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(3), (20, 9), 0.3)
    description = sd.to_sporadik(dense, tmp_path / "s.zarr", axes=(1,), chunk=8)
    assert isinstance(description, sd.StoreDescription)
    layout = description.layouts[1]
    group = zarr.open_group(tmp_path / "s.zarr", mode="r+")[layout.path]
    source = source_of_layout(group, layout, str(tmp_path))
    np.testing.assert_array_equal(assembled(source), dense)


REFUSED: dict[str, tuple[Callable[[], Any], dict[str, Any], str]] = {
    "a dask array of unknown chunk sizes": (
        lambda: da.from_array(np.eye(4), chunks=2)[da.from_array(np.eye(4), chunks=2)[:, 0] > 0],
        {},
        "compute_chunk_sizes",
    ),
    "a dask array of sparse chunks filled with ones": (
        lambda: da.from_array(sparse.COO.from_numpy(np.eye(3), fill_value=1.0), asarray=False),
        {},
        "fill_value 1.0",
    ),
    "a shape that disagrees with the input's": (lambda: np.eye(3), {"shape": (3, 4)}, "disagrees"),
    "two-dimensional values beside coordinate columns": (
        lambda: (np.ones((2, 2)), (np.array([0, 1]), np.array([0, 1]))),
        {"shape": (3, 3)},
        "one column",
    ),
    "a dataframe without columns=": (
        lambda: __import__("dask.dataframe").dataframe.from_dict({"a": [1]}, npartitions=1),
        {},
        "columns=",
    ),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_what_cannot_be_written_is_refused_before_any_graph_runs(case: str) -> None:
    make, options, message = REFUSED[case]
    if EXPRESSIONS and case == "a dask array of unknown chunk sizes":
        pytest.skip("dask's expression model makes no array of unknown chunks from a boolean mask")
    with pytest.raises(sd.SporadikError, match=message):
        source_of(make(), **options)
