"""`to_sporadik` end to end: every input kind at ranks 2-4 reads back in the reference with the
input's values, rank-2 layouts are the reference's and anndata's bytes, and the block is last."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anndata
import dask
import dask.array as da
import numpy as np
import numpy.typing as npt
import pytest
import scipy.sparse as sp
import sparse
import sporadik
import xarray as xr
import zarr
from zarr.storage import LocalStore

import sporadik_dask as sd
from tests.helpers import (
    S3_SLOW,
    RecordingStore,
    StoreKind,
    labelled,
    layout_files,
    logged_dense,
    logged_input,
    random_dense,
    reads_logged,
    stored,
    zarr_array,
    zarr_group,
)


def read_back(path: Path) -> npt.NDArray[Any]:
    """The array the reference reads from ``path``, dense."""
    with sporadik.open_array(path) as store:
        return store.to_array().to_dense()


def assert_holds(kind: StoreKind, dense: npt.NDArray[Any]) -> None:
    """The store written at ``kind`` holds ``dense`` and is valid: read through each of its
    layouts by `from_sporadik` over that kind's store, and by the reference on local disk."""
    if kind.name in ("local", "sharded"):
        np.testing.assert_array_equal(read_back(kind.store), dense)
    for axis in sd.describe(kind.store, **kind.options).indexed_axes:
        read = sd.from_sporadik(kind.store, axis=axis, **kind.options).compute()
        np.testing.assert_array_equal(read.todense(), dense)
    sd.validate(kind.store, **kind.options)


def _dask_sparse(dense: npt.NDArray[Any], chunks: tuple[int, ...]) -> da.Array:
    array: da.Array = da.from_array(sparse.COO.from_numpy(dense), chunks=chunks, asarray=False)
    return array


def _columns(
    dense: npt.NDArray[Any], chunks: tuple[int, ...]
) -> tuple[da.Array, tuple[da.Array, ...]]:
    found = np.nonzero(dense)
    step = max(len(found[0]) // 3, 1)
    return (
        da.from_array(dense[found], chunks=step),
        tuple(da.from_array(c, chunks=step) for c in found),
    )


#: Each input kind ``to_sporadik`` takes, made from a dense array and dask chunks.
INPUTS: dict[str, Callable[[npt.NDArray[Any], tuple[int, ...]], Any]] = {
    "dask array of sparse.COO chunks": _dask_sparse,
    "dask array of GCXS chunks": lambda d, c: da.map_blocks(
        lambda b: b.asformat("gcxs"),
        _dask_sparse(d, c),
        meta=sparse.GCXS.from_numpy(np.zeros((0,) * d.ndim, d.dtype)),
    ),
    "dask array of numpy chunks": lambda d, c: da.from_array(d, chunks=c),
    "coordinate columns": _columns,
    "in-memory sparse.COO": lambda d, c: sparse.COO.from_numpy(d),
    "in-memory numpy": lambda d, c: d,
    "xarray DataArray": lambda d, c: xr.DataArray(_dask_sparse(d, c)),
}

SHAPES = {2: ((37, 23), (10, 9)), 3: ((9, 7, 5), (4, 3, 5)), 4: ((5, 4, 3, 6), (2, 3, 2, 4))}


#: Each input kind at each rank on a local directory, a memory store and a sharded store; on the
#: S3 server, where every chunk is a request, one input kind at each rank (the input kind
#: changes how pieces are made, the store kind how chunks reach the store). The quick set keeps
#: rank 3 alone of the sharded and S3 cases: the other ranks' pieces are those of the local ones.
INPUT_CASES = [
    pytest.param(
        kind,
        rank,
        store,
        marks=[pytest.mark.slow] if store in ("s3", "sharded") and rank != 3 else [],
    )
    for kind in INPUTS
    for rank in (2, 3, 4)
    for store in ("local", "memory", "sharded", "s3")
    if store != "s3" or kind == next(iter(INPUTS))
]


@pytest.mark.parametrize(("kind", "rank", "store_kind"), INPUT_CASES, indirect=["store_kind"])
def test_every_input_kind_reads_back_in_the_reference_with_its_values(
    store_kind: StoreKind, kind: str, rank: int
) -> None:
    shape, chunks = SHAPES[rank]
    dense = random_dense(np.random.default_rng(rank), shape, 0.3)
    shape_arg = shape if kind == "coordinate columns" else None
    description = sd.to_sporadik(
        INPUTS[kind](dense, chunks),
        store_kind.store,
        shape=shape_arg,
        **store_kind.writing(chunk=16),
        **store_kind.options,
    )
    assert isinstance(description, sd.StoreDescription)
    assert description.indexed_axes == tuple(range(rank))
    assert_holds(store_kind, dense)


def test_scipy_input_reads_back_in_the_reference(tmp_path: Path) -> None:
    matrix = sp.random(60, 40, density=0.1, format="csc", random_state=3, dtype=np.float64)
    sd.to_sporadik(matrix, tmp_path / "s.zarr")
    np.testing.assert_array_equal(read_back(tmp_path / "s.zarr"), matrix.toarray())


@pytest.mark.parametrize("byte_addressable", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_rank_two_layouts_are_byte_identical_to_the_references(
    tmp_path: Path, dtype: str, byte_addressable: bool
) -> None:
    dense = random_dense(np.random.default_rng(7), (400, 150), 0.2, dtype)
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "theirs.zarr"
    x = _dask_sparse(dense, (64, 50))
    sd.to_sporadik(x, ours, byte_addressable=byte_addressable)
    sporadik.SparseArray.from_dense(dense).write(theirs, byte_addressable=byte_addressable)
    mine, reference = layout_files(ours), layout_files(theirs)
    if np.dtype(dtype).kind == "i":  # maxima in uint64 (docs/format.md): the same bytes
        for axis in (0, 1):
            key = f"layouts/axis{axis}/maxima/zarr.json"
            assert json.loads(mine.pop(key))["data_type"] == "uint64"
            assert json.loads(reference.pop(key))["data_type"] == "int64"
    assert mine == reference


def test_rank_two_arrays_equal_what_anndata_writes(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(8), (120, 80), 0.15)
    sd.to_sporadik(da.from_array(dense, chunks=(50, 30)), tmp_path / "ours.zarr")
    group = zarr.open_group(tmp_path / "anndata.zarr", mode="w", zarr_format=3)
    matrix = sp.csr_matrix(dense)
    anndata.io.write_elem(group, "csr", matrix)
    anndata.io.write_elem(group, "csc", matrix.tocsc())
    ours = zarr.open_group(tmp_path / "ours.zarr", mode="r")
    for axis, name in ((0, "csr"), (1, "csc")):
        layout, written = zarr_group(ours, f"layouts/axis{axis}"), zarr_group(group, name)
        assert dict(layout.attrs) == dict(written.attrs)
        for array in ("data", "indices", "indptr"):
            mine, theirs = zarr_array(layout, array), zarr_array(written, array)
            assert mine.dtype == theirs.dtype, array
            np.testing.assert_array_equal(stored(layout, array), stored(written, array))
        read = anndata.io.read_elem(layout)
        np.testing.assert_array_equal(read.toarray(), dense)


@pytest.mark.parametrize("store_kind", S3_SLOW, indirect=True)
@pytest.mark.parametrize(
    ("shape", "density"),
    [((0, 10), 0.5), ((10, 0), 0.5), ((12, 9), 0.0), ((3, 0, 4), 0.5), ((30, 20), 0.02)],
    ids=["zero rows", "zero columns", "no values", "zero-length middle axis", "empty chunks"],
)
def test_degenerate_arrays_read_back_in_the_reference(
    store_kind: StoreKind, shape: tuple[int, ...], density: float
) -> None:
    dense = random_dense(np.random.default_rng(9), shape, density)
    chunks = tuple(max(size // 3, 1) for size in shape)
    where, options = store_kind.store, store_kind.options
    sd.to_sporadik(_dask_sparse(dense, chunks), where, **store_kind.writing(), **options)
    assert_holds(store_kind, dense)
    assert sd.describe(where, **options).shape == shape
    if store_kind.name in ("local", "sharded"):
        assert sporadik.describe(where).shape == shape


def test_only_the_layouts_asked_for_are_written(store_kind: StoreKind) -> None:
    dense = random_dense(np.random.default_rng(10), (8, 6, 4), 0.3)
    where, options = store_kind.store, store_kind.options
    description = sd.to_sporadik(dense, where, axes=(2,), **store_kind.writing(), **options)
    assert description.indexed_axes == (2,)
    assert sd.describe(where, **options).layouts.keys() == {2}
    if store_kind.name in ("local", "sharded"):
        assert sporadik.describe(where).layouts.keys() == {2}
    assert_holds(store_kind, dense)


def test_small_partitions_give_the_same_bytes_as_one(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(11), (300, 200), 0.1)
    x = _dask_sparse(dense, (40, 70))
    sd.to_sporadik(x, tmp_path / "one.zarr", chunk=100)
    sd.to_sporadik(x, tmp_path / "many.zarr", chunk=100, partition_bytes=2000)
    assert layout_files(tmp_path / "one.zarr") == layout_files(tmp_path / "many.zarr")


def test_the_root_document_with_the_block_is_the_last_object_written(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(12), (100, 60), 0.2)
    store = RecordingStore(LocalStore(tmp_path / "s.zarr"))
    sd.to_sporadik(_dask_sparse(dense, (30, 30)), store, chunk=64)
    assert store.writes[-1] == "zarr.json"
    with_block = [i for i, key in enumerate(store.writes) if key == "zarr.json"]
    chunk_writes = [i for i, key in enumerate(store.writes) if "/c/" in key]
    assert chunk_writes and max(chunk_writes) < with_block[-1]
    assert "sporadik" in json.loads((tmp_path / "s.zarr" / "zarr.json").read_text())["attributes"]


@pytest.mark.parametrize("store_kind", S3_SLOW, indirect=True)
def test_compute_false_writes_nothing_until_computed_then_commits(store_kind: StoreKind) -> None:
    dense = random_dense(np.random.default_rng(13), (50, 40), 0.2)
    where, options = store_kind.store, store_kind.options
    write = sd.to_sporadik(
        _dask_sparse(dense, (20, 20)), where, compute=False, **store_kind.writing(), **options
    )
    assert isinstance(write, sd.StoreWrite)
    with pytest.raises(sd.StoreNotFoundError):
        sd.describe(where, **options)
    if isinstance(where, Path):
        assert not where.exists()
    (description,) = dask.compute(write)
    assert description.nnz == np.count_nonzero(dense)
    assert_holds(store_kind, dense)


def test_a_commit_before_the_writes_have_returned_is_refused_and_writes_no_block(
    tmp_path: Path,
) -> None:
    dense = random_dense(np.random.default_rng(14), (50, 40), 0.2)
    path = tmp_path / "s.zarr"
    write = sd.to_sporadik(_dask_sparse(dense, (20, 20)), path, compute=False)
    assert isinstance(write, sd.StoreWrite)
    with pytest.raises(sd.IncompleteError, match="read as zeros"):
        write.commit()
    with pytest.raises(sd.IncompleteError, match="3 of"):
        write.commit(3)
    with pytest.raises(sd.StoreNotFoundError):
        sd.describe(path)  # still nothing there: the write's first task has not run
    count = write.written().compute()
    assert write.commit(count).nnz == np.count_nonzero(dense)
    np.testing.assert_array_equal(read_back(path), dense)


def test_an_existing_store_is_refused_without_overwrite_and_replaced_with_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.zarr"
    first = random_dense(np.random.default_rng(14), (30, 20), 0.2)
    second = random_dense(np.random.default_rng(15), (25, 35), 0.2)
    sd.to_sporadik(first, path)
    with pytest.raises(sd.StoreExistsError, match="overwrite=True"):
        sd.to_sporadik(second, path)
    np.testing.assert_array_equal(read_back(path), first)
    sd.to_sporadik(second, path, overwrite=True)
    np.testing.assert_array_equal(read_back(path), second)


def test_overwrite_removes_the_old_block_before_anything_else(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    sd.to_sporadik(random_dense(np.random.default_rng(16), (30, 20), 0.2), path)
    store = RecordingStore(LocalStore(path))
    sd.to_sporadik(random_dense(np.random.default_rng(17), (30, 20), 0.2), store, overwrite=True)
    assert store.writes[0] == "zarr.json"
    assert "sporadik" not in store.documents[0]["attributes"]


def _anndata_store(path: Path, zarr_format: int) -> anndata.AnnData:
    adata = anndata.AnnData(sp.random(20, 10, density=0.3, format="csr", random_state=3))
    with anndata.settings.override(zarr_write_format=zarr_format):
        adata.write_zarr(path)
    return adata


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_directory_holding_other_files_is_never_replaced(tmp_path: Path, overwrite: bool) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "notes.txt").write_text("x")
    with pytest.raises(sd.StoreExistsError, match=r"results already holds something other.*'notes"):
        sd.to_sporadik(np.eye(5), results, overwrite=overwrite)
    assert [p.name for p in results.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_an_anndata_store_is_never_replaced_even_with_overwrite(
    tmp_path: Path, zarr_format: int
) -> None:
    path = tmp_path / "in.zarr"
    adata = _anndata_store(path, zarr_format)
    with pytest.raises(sd.StoreExistsError, match="never replaced, even with overwrite=True"):
        sd.to_sporadik(np.eye(5), path, overwrite=True)
    assert (anndata.read_zarr(path).X != adata.X).nnz == 0


def test_an_empty_directory_is_written_into_without_overwrite(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert sd.to_sporadik(np.eye(5), tmp_path / "empty").nnz == 5


def test_a_file_is_refused_as_a_target(tmp_path: Path) -> None:
    (tmp_path / "out.zarr").write_text("x")
    with pytest.raises(sd.StoreExistsError, match=r"out\.zarr is a file"):
        sd.to_sporadik(np.eye(5), tmp_path / "out.zarr", overwrite=True)
    assert (tmp_path / "out.zarr").read_text() == "x"


def test_a_torn_store_is_refused_without_overwrite_and_replaced_with_it(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    write = sd.to_sporadik(np.eye(5), path, compute=False)
    dask.get(write.__dask_graph__(), write.__dask_keys__()[:1])  # laid out, one write: no block
    with pytest.raises(sd.IncompleteError):
        sd.describe(path)
    with pytest.raises(sd.StoreExistsError, match="overwrite=True"):
        sd.to_sporadik(np.eye(6), path)
    assert sd.to_sporadik(np.eye(6), path, overwrite=True).shape == (6, 6)


@pytest.mark.parametrize("stray", [None, "layouts/notes.txt", "layouts/axis0/data/c/x"])
def test_chunks_landing_after_a_discard_are_replaceable_and_nothing_else_is(
    tmp_path: Path, stray: str | None
) -> None:
    """A cluster's running tasks write their chunks after an interrupted write discarded its
    store: the location holds our chunks and no document. Replaceable with overwrite=True, as
    any torn store of ours; one file of anyone else's keeps it refused."""
    path = tmp_path / "s.zarr"
    sd.to_sporadik(random_dense(np.random.default_rng(3), (40, 30), 0.3), path, chunk=16)
    for document in path.rglob("zarr.json"):
        document.unlink()
    if stray is not None:
        (path / stray).parent.mkdir(parents=True, exist_ok=True)
        (path / stray).write_text("x")
    with pytest.raises(sd.StoreExistsError):
        sd.to_sporadik(np.eye(6), path)
    if stray is not None:
        with pytest.raises(sd.StoreExistsError, match="never replaced, even with overwrite=True"):
            sd.to_sporadik(np.eye(6), path, overwrite=True)
        assert (path / stray).read_text() == "x"
        return
    with pytest.raises(sd.StoreExistsError, match="unfinished sporadik store"):
        sd.to_sporadik(np.eye(6), path)
    assert sd.to_sporadik(np.eye(6), path, overwrite=True).shape == (6, 6)
    np.testing.assert_array_equal(read_back(path), np.eye(6))


@pytest.mark.parametrize("opened", ["from_sporadik", "open_dataset", "open_dataset chunks={}"])
def test_the_store_being_read_is_never_the_target(tmp_path: Path, opened: str) -> None:
    path = tmp_path / "s.zarr"
    dense = random_dense(np.random.default_rng(20), (30, 20), 0.2)
    sd.to_sporadik(dense, path)
    x: da.Array | xr.DataArray
    if opened == "from_sporadik":
        x = sd.from_sporadik(path)
    else:
        chunks: dict[str, int] | None = {} if "chunks" in opened else None
        ds = xr.open_dataset(path, engine="sporadik", chunks=chunks)
        x = ds[next(iter(ds.data_vars))]
    with pytest.raises(sd.StoreExistsError, match="writing there would delete the input"):
        sd.to_sporadik(x, path, overwrite=True)
    with pytest.raises(sd.StoreExistsError, match="is the input"):
        sd.to_sporadik(x, path / "inside.zarr")
    np.testing.assert_array_equal(read_back(path), dense)


def test_a_memory_store_holding_another_group_is_never_replaced() -> None:
    store = zarr.storage.MemoryStore()
    zarr.open_group(store, mode="w", zarr_format=2).create_array("a", data=np.arange(3))
    with pytest.raises(sd.StoreExistsError, match="'a'"):
        sd.to_sporadik(np.eye(5), store, overwrite=True)
    assert stored(zarr.open_group(store, mode="r"), "a").tolist() == [0, 1, 2]
    empty = zarr.storage.MemoryStore()
    assert sd.to_sporadik(np.eye(5), empty).nnz == 5
    with pytest.raises(sd.StoreExistsError, match="overwrite=True"):
        sd.to_sporadik(np.eye(5), empty)
    assert sd.to_sporadik(np.eye(4), empty, overwrite=True).nnz == 4


def test_a_failed_chunk_write_leaves_no_block(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(18), (60, 40), 0.3)
    store = RecordingStore(LocalStore(tmp_path / "s.zarr"), fail_on="layouts/axis1/data/c/1")
    with pytest.raises(OSError, match="No space left"):
        sd.to_sporadik(_dask_sparse(dense, (20, 20)), store, chunk=32)
    with pytest.raises(sd.IncompleteError):
        sd.describe(tmp_path / "s.zarr")
    with pytest.raises(sporadik.IncompleteError):
        sporadik.describe(tmp_path / "s.zarr")


def test_repeated_cells_across_chunks_are_summed_or_refused(tmp_path: Path) -> None:
    rows = da.from_array(np.array([0, 1, 2, 0, 1, 3]), chunks=3)
    cols = da.from_array(np.array([0, 1, 2, 0, 1, 3]), chunks=3)
    values = da.from_array(np.array([1.0, 2.0, 3.0, 10.0, 20.0, 4.0]), chunks=3)
    sd.to_sporadik((values, (rows, cols)), tmp_path / "sum.zarr", shape=(4, 5))
    expected = np.zeros((4, 5))
    expected[[0, 1, 2, 3], [0, 1, 2, 3]] = [11.0, 22.0, 3.0, 4.0]
    np.testing.assert_array_equal(read_back(tmp_path / "sum.zarr"), expected)
    with pytest.raises(sd.LayoutError, match="2 values name a cell"):
        sd.to_sporadik(
            (values, (rows, cols)), tmp_path / "refuse.zarr", shape=(4, 5), duplicates="refuse"
        )
    assert not (tmp_path / "refuse.zarr").exists()


@pytest.mark.parametrize("chunk", [997, 20_000], ids=["many chunks", "one chunk"])
def test_shuffled_coordinate_columns_store_the_layouts_row_blocks_of_their_sums_store(
    tmp_path: Path, chunk: int
) -> None:
    """Columns in a table's order (not by cell), naming cells again across chunks, are merged by
    ranges of cells; both layouts hold what row blocks of the summed values hold, array for
    array."""
    rng = np.random.default_rng(57)
    shape = (20, 3_000_000)
    cells = rng.integers(0, 20 * 3_000, 6_000) * 1_000 + rng.integers(0, 3, 6_000)
    row, col = np.unravel_index(cells, shape)
    values = rng.integers(1, 50, cells.size).astype(np.int32)
    coordinates = (da.from_array(row, chunks=chunk), da.from_array(col, chunks=chunk))
    columns = (da.from_array(values, chunks=chunk), coordinates)
    sd.to_sporadik(columns, tmp_path / "columns.zarr", shape=shape)
    summed = sparse.COO(np.stack([row, col]), values, shape=shape)  # repeats summed
    assert summed.nnz < cells.size
    blocks = da.from_array(summed, chunks=(5, shape[1]), asarray=False)
    sd.to_sporadik(blocks, tmp_path / "blocks.zarr")
    for axis in (0, 1):
        for name in ("indices", "data", "indptr"):
            path = f"layouts/axis{axis}/{name}"
            np.testing.assert_array_equal(
                zarr.open_array(tmp_path / "columns.zarr" / path, mode="r")[:],
                zarr.open_array(tmp_path / "blocks.zarr" / path, mode="r")[:],
            )


def test_dataarray_labels_are_stored_where_other_readers_ignore_them(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(19), (6, 4), 0.5)
    sd.to_sporadik(labelled(_dask_sparse(dense, (3, 2))), tmp_path / "s.zarr")
    root = zarr.open_group(tmp_path / "s.zarr", mode="r")
    assert root.attrs["xarray"] == {
        "name": "counts",
        "dims": ["cell", "gene"],
        "attrs": {"units": "reads"},
        "coords": ["gene"],
        "ranges": {  # the cells' labels, an arange, as their formula
            "cell": {
                "dims": ["cell"],
                "start": 10,
                "step": 1,
                "size": 6,
                "dtype": "<i8",
                "index": "pandas",
                "attrs": {},
            }
        },
    }
    assert list(stored(root, "coords/gene")) == ["a", "b", "c", "d"]
    np.testing.assert_array_equal(read_back(tmp_path / "s.zarr"), dense)


BAD_INPUTS: dict[str, tuple[Callable[[], Any], dict[str, Any], str]] = {
    "rank one": (lambda: np.arange(5.0), {}, "at least 2 axes"),
    "object dtype": (lambda: np.array([[1, None]], dtype=object), {}, "dtype object"),
    "string dtype": (lambda: np.array([["a", "b"]]), {}, "dtype <U1"),
    "non-zero fill value": (
        lambda: sparse.COO.from_numpy(np.ones((3, 3)), fill_value=1.0),
        {},
        "fill_value 1.0",
    ),
    "negative coordinate": (
        lambda: (np.ones(2), (np.array([0, -1]), np.array([0, 1]))),
        {"shape": (3, 3)},
        "is -1",
    ),
    "coordinate past the axis": (
        lambda: (np.ones(2), (np.array([0, 1]), np.array([0, 3]))),
        {"shape": (3, 3)},
        "is 3, outside an axis of length 3",
    ),
    "non-integer coordinates": (
        lambda: (np.ones(2), (np.array([0.0, 1.5]), np.array([0, 1]))),
        {"shape": (3, 3)},
        "dtype float64",
    ),
    "columns of different lengths": (
        lambda: (np.ones(2), (np.array([0, 1, 2]), np.array([0, 1]))),
        {"shape": (3, 3)},
        "number 3 against 2",
    ),
    "columns without a shape": (
        lambda: (np.ones(2), (np.array([0, 1]), np.array([0, 1]))),
        {},
        "need shape=",
    ),
    "raveled size past int64": (lambda: sparse.zeros((2**40, 2**40)), {}, "past what an int64"),
    "axis out of range": (lambda: np.eye(3), {"axes": (2,)}, "axes=\\(2,\\)"),
    "axis repeated": (lambda: np.eye(3), {"axes": (0, 0)}, "axes=\\(0, 0\\)"),
    "unknown duplicates mode": (lambda: np.eye(3), {"duplicates": "mean"}, "duplicates='mean'"),
    "unsupported input": (lambda: [[1, 2], [3, 4]], {}, "Cannot write a builtins.list"),
}


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_bad_input_is_refused_clearly_and_writes_nothing(tmp_path: Path, case: str) -> None:
    make, options, message = BAD_INPUTS[case]
    with pytest.raises(sd.SporadikError, match=message):
        sd.to_sporadik(make(), tmp_path / "s.zarr", **options)
    assert not (tmp_path / "s.zarr").exists()


def test_a_dask_dataframe_of_coordinates_is_merged_and_written(tmp_path: Path) -> None:
    import dask.dataframe as dd
    import pandas as pd

    rng = np.random.default_rng(20)
    table = pd.DataFrame(
        {
            "cell": rng.integers(0, 40, 500),
            "gene": rng.integers(0, 25, 500),
            "count": rng.integers(1, 5, 500).astype(np.float32),
        }
    )
    frame = dd.from_pandas(table, npartitions=4)
    sd.to_sporadik(
        frame, tmp_path / "s.zarr", shape=(40, 25), columns=("cell", "gene"), values="count"
    )
    expected = np.zeros((40, 25), dtype=np.float32)
    np.add.at(expected, (table["cell"], table["gene"]), table["count"])
    np.testing.assert_array_equal(read_back(tmp_path / "s.zarr"), expected)
    with pytest.raises(sd.LayoutError, match="columns="):
        sd.to_sporadik(frame, tmp_path / "t.zarr", shape=(40, 25), columns=("cell",), values="n")
    assert not (tmp_path / "t.zarr").exists()


PENDING_VARIANTS: dict[str, dict[str, Any]] = {
    "another store": {"path": "b.zarr"},
    "another chunk size": {"chunk": 8},
    "byte addressable": {"byte_addressable": True},
    "other layouts": {"axes": (1,)},
    "smaller partitions": {"partition_bytes": 200},
}


@pytest.mark.parametrize("variant", PENDING_VARIANTS, ids=list(PENDING_VARIANTS))
def test_two_pending_writes_that_differ_in_what_they_write_share_no_key(
    tmp_path: Path, variant: str
) -> None:
    dense = random_dense(np.random.default_rng(21), (40, 30), 0.3)
    x = _dask_sparse(dense, (10, 10))
    options = {"path": "b.zarr", "chunk": 16, **PENDING_VARIANTS[variant]}
    first = sd.to_sporadik(x, tmp_path / "a.zarr", chunk=16, compute=False)
    second = sd.to_sporadik(x, tmp_path / options.pop("path"), compute=False, **options)
    assert isinstance(first, sd.StoreWrite) and isinstance(second, sd.StoreWrite)
    assert not set(first.__dask_keys__()) & set(second.__dask_keys__())
    assert dask.base.tokenize(first) != dask.base.tokenize(second)


def test_two_writes_in_one_dask_compute_both_complete(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(22), (50, 40), 0.3)
    x = _dask_sparse(dense, (20, 20))
    first = sd.to_sporadik(x, tmp_path / "a.zarr", chunk=16, compute=False)
    second = sd.to_sporadik(x, tmp_path / "b.zarr", chunk=16, compute=False)
    a, b = dask.compute(first, second)
    assert (a.location, b.location) == (str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr"))
    np.testing.assert_array_equal(read_back(tmp_path / "a.zarr"), dense)
    np.testing.assert_array_equal(read_back(tmp_path / "b.zarr"), dense)
    assert layout_files(tmp_path / "a.zarr") == layout_files(tmp_path / "b.zarr")


def test_the_same_write_planned_twice_has_the_same_keys(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(23), (30, 20), 0.3)
    x = _dask_sparse(dense, (10, 10))
    first = sd.to_sporadik(x, tmp_path / "a.zarr", chunk=16, compute=False)
    again = sd.to_sporadik(x, tmp_path / "a.zarr", chunk=16, compute=False, overwrite=True)
    assert isinstance(first, sd.StoreWrite) and isinstance(again, sd.StoreWrite)
    assert first.__dask_keys__() == again.__dask_keys__()


SCIPY_CHUNKS: dict[str, Callable[[Any], Any]] = {
    "csr_matrix": sp.csr_matrix,
    "csc_matrix": sp.csc_matrix,
    "coo_matrix": sp.coo_matrix,
    "csr_array": sp.csr_array,
    "lil_matrix": sp.lil_matrix,
}


@pytest.mark.parametrize("store_kind", S3_SLOW, indirect=True)
@pytest.mark.parametrize("kind", SCIPY_CHUNKS, ids=list(SCIPY_CHUNKS))
def test_a_dask_array_of_scipy_chunks_reads_back_with_its_values(
    store_kind: StoreKind, kind: str
) -> None:
    dense = random_dense(np.random.default_rng(24), (45, 31), 0.25)
    x = da.from_array(dense, chunks=(10, 12)).map_blocks(SCIPY_CHUNKS[kind], dtype=dense.dtype)
    sd.to_sporadik(x, store_kind.store, **store_kind.writing(chunk=16), **store_kind.options)
    assert_holds(store_kind, dense)


def test_scipy_chunks_with_repeated_cells_are_summed_without_changing_the_chunk(
    tmp_path: Path,
) -> None:
    chunk = sp.csr_matrix(
        (np.array([1.0, 2.0, 5.0]), np.array([3, 3, 0]), np.array([0, 2, 3])), shape=(2, 4)
    )
    assert not chunk.has_canonical_format
    x = da.from_array(chunk, chunks=(1, 4), asarray=False)
    sd.to_sporadik(x, tmp_path / "s.zarr")
    np.testing.assert_array_equal(read_back(tmp_path / "s.zarr"), [[0, 0, 0, 3.0], [5.0, 0, 0, 0]])
    np.testing.assert_array_equal(chunk.data, [1.0, 2.0, 5.0])


def test_scipy_chunks_far_too_large_to_densify_are_written(tmp_path: Path) -> None:
    # Dense, each chunk would be 10^5 x 10^5 float64: 80 GB.
    rng = np.random.default_rng(25)
    rows, cols = rng.integers(0, 200_000, 50), rng.integers(0, 100_000, 50)
    matrix = sp.csr_matrix((np.arange(1.0, 51.0), (rows, cols)), shape=(200_000, 100_000))
    x = da.from_array(matrix, chunks=(100_000, 100_000), asarray=False)
    sd.to_sporadik(x, tmp_path / "s.zarr")
    with sporadik.open_array(tmp_path / "s.zarr") as store:
        read = store.to_array()
    for axis in (0, 1):
        assert (read.to_scipy(axis=axis) != matrix).nnz == 0


@pytest.mark.parametrize("suffix", [".h5ad", ".zarr"])
def test_anndata_read_lazily_is_written_as_anndata_itself_would_write_it(
    tmp_path: Path, suffix: str
) -> None:
    import h5py
    from anndata.experimental import read_elem_lazy

    dense = random_dense(np.random.default_rng(26), (300, 120), 0.1)
    path = tmp_path / f"a{suffix}"
    adata = anndata.AnnData(X=sp.csr_matrix(dense))
    if suffix == ".h5ad":
        adata.write_h5ad(path)
        group: Any = h5py.File(path, "r")
    else:
        adata.write_zarr(path)
        group = zarr.open_group(path, mode="r")
    x = read_elem_lazy(group["X"], chunks=(70, 120))
    assert isinstance(x._meta, sp.csr_matrix | sp.csr_array)
    sd.to_sporadik(x, tmp_path / "ours.zarr")
    sd.to_sporadik(dense, tmp_path / "dense.zarr")
    assert layout_files(tmp_path / "ours.zarr") == layout_files(tmp_path / "dense.zarr")


def test_a_pending_overwrite_leaves_the_old_store_readable_until_it_is_computed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.zarr"
    old = random_dense(np.random.default_rng(40), (30, 20), 0.2)
    new = random_dense(np.random.default_rng(41), (50, 40), 0.2)
    sd.to_sporadik(old, path, chunk=16)
    before = layout_files(path)
    write = sd.to_sporadik(_dask_sparse(new, (20, 20)), path, overwrite=True, compute=False)
    assert isinstance(write, sd.StoreWrite)
    # planned, not computed: the old store is as it was, and reads as it did
    assert layout_files(path) == before
    np.testing.assert_array_equal(read_back(path), old)
    del write  # dropped, never computed
    np.testing.assert_array_equal(read_back(path), old)
    again = sd.to_sporadik(_dask_sparse(new, (20, 20)), path, overwrite=True, compute=False)
    assert isinstance(again, sd.StoreWrite)
    again.compute()
    np.testing.assert_array_equal(read_back(path), new)
    sd.validate(path)
    assert "sporadik-dask-writing" not in json.loads((path / "zarr.json").read_text())["attributes"]


def test_two_different_writes_to_one_location_in_one_compute_are_refused_before_either_runs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.zarr"
    old = random_dense(np.random.default_rng(42), (30, 20), 0.2)
    sd.to_sporadik(old, path, chunk=16)
    before = layout_files(path)
    one, other = (
        sd.to_sporadik(
            _dask_sparse(random_dense(np.random.default_rng(seed), (40, 30), 0.2), (20, 15)),
            path,
            overwrite=True,
            compute=False,
        )
        for seed in (43, 44)
    )
    with pytest.raises(sd.StoreExistsError, match="computed together"):
        dask.compute(one, other)
    assert layout_files(path) == before
    np.testing.assert_array_equal(read_back(path), old)


@pytest.mark.parametrize("other", ["doubled", "reversed"])
def test_two_writes_of_one_shape_and_count_to_one_location_are_refused_together(
    tmp_path: Path, other: str
) -> None:
    """Inputs that make the same documents (same shape, dtype and values per position) are
    still two writes: computed together, each would write into the other's store."""
    dense = random_dense(np.random.default_rng(48), (40, 30), 0.2)
    x = _dask_sparse(dense, (20, 15))
    y = 2 * x if other == "doubled" else x[::-1]
    path = tmp_path / "s.zarr"
    one, two = (sd.to_sporadik(v, path, chunk=16, compute=False) for v in (x, y))
    with pytest.raises(sd.StoreExistsError, match="computed together"):
        dask.compute(one, two)
    assert not path.exists()
    (description,) = dask.compute(two)
    assert description.nnz == np.count_nonzero(dense)
    np.testing.assert_array_equal(read_back(path), 2 * dense if other == "doubled" else dense[::-1])


def test_the_same_write_twice_in_one_compute_writes_once_and_commits(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(45), (40, 30), 0.2)
    path = tmp_path / "s.zarr"
    one, same = (
        sd.to_sporadik(_dask_sparse(dense, (20, 15)), path, chunk=16, compute=False)
        for _ in range(2)
    )
    a, b = dask.compute(one, same)
    assert a.nnz == b.nnz == np.count_nonzero(dense)
    np.testing.assert_array_equal(read_back(path), dense)


def test_a_location_filled_after_planning_is_refused_when_the_write_runs(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    write = sd.to_sporadik(np.eye(6), path, compute=False)
    assert isinstance(write, sd.StoreWrite)
    path.mkdir(exist_ok=True)
    (path / "notes.txt").write_text("mine")
    with pytest.raises(sd.StoreExistsError, match=r"notes\.txt"):
        write.compute()
    assert sorted(p.name for p in path.iterdir()) == ["notes.txt"]
    # and a sporadik store written there meanwhile is replaced only by an overwrite
    (path / "notes.txt").unlink()
    sd.to_sporadik(np.eye(3), path)
    with pytest.raises(sd.StoreExistsError, match="overwrite=True"):
        write.compute()
    np.testing.assert_array_equal(read_back(path), np.eye(3))


def test_laying_out_again_after_chunks_were_written_keeps_them(tmp_path: Path) -> None:
    # What distributed does when the worker holding the skeleton's result is lost: it runs it again.
    from sporadik_dask.write.skeleton import write_skeleton

    dense = random_dense(np.random.default_rng(46), (50, 40), 0.2)
    path = tmp_path / "s.zarr"
    write = sd.to_sporadik(_dask_sparse(dense, (20, 20)), path, chunk=16, compute=False)
    assert isinstance(write, sd.StoreWrite)
    graph = dict(write.__dask_graph__())
    (name,) = [key for key in graph if isinstance(key, str) and key.startswith("sporadik-skeleton")]
    dask.get(graph, write.__dask_keys__())
    written = layout_files(path)
    laid_out = graph[name]
    write_skeleton(laid_out.args[0] if hasattr(laid_out, "args") else laid_out[1])
    assert layout_files(path) == written
    write.commit(len(write.__dask_keys__()))
    np.testing.assert_array_equal(read_back(path), dense)


def test_a_torn_store_is_named_unfinished_when_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    sd.to_sporadik(np.eye(5), path)
    document = json.loads((path / "zarr.json").read_text())
    del document["attributes"]["sporadik"]
    (path / "zarr.json").write_text(json.dumps(document))
    with pytest.raises(sd.StoreExistsError, match="an unfinished sporadik store"):
        sd.to_sporadik(np.eye(5), path)


def test_a_store_inside_another_store_is_refused(tmp_path: Path) -> None:
    outer = tmp_path / "outer.zarr"
    sd.to_sporadik(np.eye(5), outer)
    before = layout_files(outer)
    for inner in (outer / "inner.zarr", outer / "layouts" / "deeper" / "x.zarr"):
        with pytest.raises(sd.StoreExistsError, match="lies inside the sporadik store"):
            sd.to_sporadik(np.eye(3), inner)
        assert not inner.exists()
    assert layout_files(outer) == before
    sd.validate(outer)
    assert sd.to_sporadik(np.eye(3), tmp_path / "beside.zarr").shape == (3, 3)


def test_a_table_of_positions_and_names_takes_none_for_the_axis_of_names(tmp_path: Path) -> None:
    import dask.dataframe as dd
    import pandas as pd

    rng = np.random.default_rng(47)
    table = pd.DataFrame(
        {"cell": rng.integers(0, 50, 400), "gene": rng.choice(["b", "a", "c"], 400)}
    )
    frame = dd.from_pandas(table, npartitions=2)
    with pytest.raises(sd.LayoutError, match=r"Pass shape=\(<cell length>, None\)"):
        sd.to_sporadik(frame, tmp_path / "a.zarr", columns=["cell", "gene"])
    assert not (tmp_path / "a.zarr").exists()
    sd.to_sporadik(frame, tmp_path / "a.zarr", columns=["cell", "gene"], shape=(60, None))
    expected = pd.crosstab(table["cell"], table["gene"]).reindex(index=range(60), fill_value=0)
    np.testing.assert_array_equal(read_back(tmp_path / "a.zarr"), expected.to_numpy())
    # a pandas table is taken as a dask one
    sd.to_sporadik(table, tmp_path / "b.zarr", columns=["cell", "gene"], shape=(60, None))
    np.testing.assert_array_equal(read_back(tmp_path / "b.zarr"), expected.to_numpy())


def test_the_synthetic_inputs_are_an_attribute_of_the_package() -> None:
    x = sd.synthetic.counts_matrix(cells=20, genes=5, density=0.5, rows_per_chunk=10)
    assert x.shape == (20, 5)


def test_an_overwrite_through_a_symbolic_link_replaces_the_store_it_names(tmp_path: Path) -> None:
    real, link = tmp_path / "real.zarr", tmp_path / "link.zarr"
    sd.to_sporadik(np.eye(5), real)
    link.symlink_to(real)
    new = random_dense(np.random.default_rng(49), (7, 6), 0.4)
    assert sd.to_sporadik(new, link, overwrite=True).shape == (7, 6)
    assert link.is_symlink()
    np.testing.assert_array_equal(read_back(real), new)
    dangling = tmp_path / "dangling.zarr"
    dangling.symlink_to(tmp_path / "nowhere.zarr")
    sd.to_sporadik(np.eye(3), dangling)
    np.testing.assert_array_equal(read_back(tmp_path / "nowhere.zarr"), np.eye(3))


def test_a_store_holding_other_things_is_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    sd.to_sporadik(np.eye(5), path)
    (path / "README.txt").write_text("mine")
    (path / "plots").mkdir()
    before = layout_files(path)
    for overwrite in (False, True):
        with pytest.raises(sd.StoreExistsError, match=r"other things beside it \('README.txt'"):
            sd.to_sporadik(np.eye(6), path, overwrite=overwrite)
    assert (path / "README.txt").read_text() == "mine" and (path / "plots").is_dir()
    assert layout_files(path) == before
    np.testing.assert_array_equal(read_back(path), np.eye(5))


def test_discard_removes_only_what_the_write_laid_out_and_never_committed(
    tmp_path: Path,
) -> None:
    dense = random_dense(np.random.default_rng(50), (40, 30), 0.2)
    path = tmp_path / "s.zarr"
    write = sd.to_sporadik(_dask_sparse(dense, (20, 15)), path, chunk=16, compute=False)
    assert isinstance(write, sd.StoreWrite)
    assert not write.discard()  # nothing laid out yet
    dask.get(write.__dask_graph__(), write.__dask_keys__()[:1])  # laid out, one chunk written
    assert path.exists() and write.discard() and not path.exists()
    write.compute()
    assert not write.discard()  # committed: the store stays
    np.testing.assert_array_equal(read_back(path), dense)
    other = sd.to_sporadik(2 * _dask_sparse(dense, (20, 15)), path, overwrite=True, compute=False)
    assert isinstance(other, sd.StoreWrite)
    dask.get(other.__dask_graph__(), other.__dask_keys__()[:1])
    assert not write.discard() and path.exists()  # another write's store


@pytest.mark.parametrize("chunk", [None, 2**22])
def test_both_layouts_of_an_axis_of_a_quarter_billion_positions_are_written_and_read(
    tmp_path: Path, chunk: int | None
) -> None:
    """An axis of 2**28 positions holding six values: counted by its held positions, its
    ``indptr`` made and written a stretch at a time, sharded past 4096 chunks (33 objects, not
    8,193); both layouts read back the values, and zarr reads the offsets."""
    length = 2**28
    coords = np.array([[0, 1, 1, 0, 1, 1], [5, 5, 7, 2**27, 2**28 - 2, 2**28 - 1]])
    data = np.arange(1.0, 7.0)
    x = sparse.COO(coords, data, shape=(2, length))
    path = tmp_path / "long.zarr"
    sd.to_sporadik(x, path, chunk=chunk)
    reader = sd.StoreReader(path)
    picked = [4, 5, 7, 2**27, 2**28 - 2, 2**28 - 1]
    expected = np.zeros((2, len(picked)))
    for (row, position), value in zip(coords.T, data, strict=True):
        expected[row, picked.index(position)] = value
    for axis in (0, 1):
        got = reader.read((slice(None), picked), axis=axis)
        np.testing.assert_array_equal(got.todense(), expected)
    region = reader.read((slice(None), slice(2**28 - 3, None)), axis=1)
    np.testing.assert_array_equal(region.todense(), [[0, 0, 0], [0, 5.0, 6.0]])
    indptr = zarr.open_array(path / "layouts/axis1/indptr")  # zarr's own read of the shards
    assert np.asarray(indptr[[0, 5, 6, 7, 8, 2**27, 2**27 + 1, 2**28 - 2, 2**28]]).tolist() == [
        0,
        0,
        2,
        2,
        3,
        3,
        4,
        4,
        6,
    ]
    objects = sum(f.is_file() for f in (path / "layouts/axis1/indptr" / "c").rglob("*"))
    assert objects == (33 if chunk is None else 65)


def _thread_of(block: Any, seen: set[threading.Thread]) -> Any:
    seen.add(threading.current_thread())
    return block


@pytest.mark.parametrize("where", ["main thread", "another thread"])
def test_a_threaded_write_runs_on_the_pool_dask_made_and_replaces_none(
    tmp_path: Path, where: str
) -> None:
    """A threaded write runs on the threads of the pool dask made for this thread (their memory
    is reused) and leaves it where dask keeps it: ``dask.threaded.default_pool`` for the main
    thread, ``dask.threaded.pools[thread][num_workers]`` for another (private names, read by the
    write: a dask release that moves them fails here)."""
    dense = random_dense(np.random.default_rng(5), (40, 30), 0.2, np.float64)
    seen: set[threading.Thread] = set()
    x = da.from_array(dense, chunks=(10, 30)).map_blocks(_thread_of, seen=seen, meta=dense[:0, :0])
    workers = None if where == "main thread" else 2

    def pools() -> Any:
        if workers is None:
            return dask.threaded.default_pool
        return dask.threaded.pools[threading.current_thread()][workers]

    def write() -> tuple[Any, Any]:
        with dask.config.set(scheduler="threads", num_workers=workers):
            dask.compute(da.ones(4, chunks=2))  # dask makes its pool for this thread
            made = pools()
            sd.to_sporadik(x, tmp_path / "s.zarr")
            return made, pools()

    if workers is None:
        made, after = write()
    else:
        with ThreadPoolExecutor(1) as other:
            made, after = other.submit(write).result()
    assert made is not None and after is made
    assert seen and seen <= set(made._threads), (seen, made._threads)
    np.testing.assert_array_equal(read_back(tmp_path / "s.zarr"), dense)


@pytest.mark.parametrize("scheduler", ["threads", "sync"])
def test_a_write_reads_each_block_of_its_input_once(tmp_path: Path, scheduler: str) -> None:
    log, scratch = tmp_path / "reads", tmp_path / "scratch"
    x = logged_input(log, 4)
    with dask.config.set({"scheduler": scheduler, "temporary-directory": str(scratch)}):
        sd.to_sporadik(x, tmp_path / "s.zarr", partition_bytes=4000)
    assert reads_logged(log) == [0, 1, 2, 3]
    np.testing.assert_array_equal(read_back(tmp_path / "s.zarr"), logged_dense(4))
    assert not any(scratch.iterdir())  # the pieces kept for the write are gone with it


def test_a_write_told_to_put_nothing_on_disk_reads_its_input_again(tmp_path: Path) -> None:
    log = tmp_path / "reads"
    with dask.config.set({"sporadik.spill-bytes": -1}):
        sd.to_sporadik(logged_input(log, 3), tmp_path / "s.zarr", partition_bytes=4000)
    assert reads_logged(log) == [0, 0, 1, 1, 2, 2]
    np.testing.assert_array_equal(read_back(tmp_path / "s.zarr"), logged_dense(3))


def test_a_pending_write_never_computed_leaves_no_kept_piece(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    with dask.config.set({"temporary-directory": str(scratch)}):
        x = logged_input(tmp_path / "reads", 2)
        write = sd.to_sporadik(x, tmp_path / "s.zarr", compute=False)
    assert any(scratch.iterdir())
    del write
    assert not any(scratch.iterdir())


def _logged_chunk(
    values: npt.NDArray[Any], log: str, block_info: dict[int, Any] | None = None
) -> npt.NDArray[Any]:
    """A chunk of a column as it is, its number appended to the file ``log``."""
    assert block_info is not None
    with open(log, "a") as file:
        file.write(f"{block_info[0]['chunk-location'][0]}\n")
    return values


def test_coordinate_columns_are_read_once(tmp_path: Path) -> None:
    log = tmp_path / "reads"
    dense = random_dense(np.random.default_rng(51), (40, 30), 0.2)
    values, columns = _columns(dense, (20, 15))
    logged = da.map_blocks(_logged_chunk, values, str(log), dtype=values.dtype)
    sd.to_sporadik((logged, columns), tmp_path / "s.zarr", shape=dense.shape)
    assert reads_logged(log) == list(range(len(values.chunks[0])))
    np.testing.assert_array_equal(read_back(tmp_path / "s.zarr"), dense)


@pytest.mark.parametrize("spill_bytes", [None, 0], ids=["in memory", "spilled"])
def test_a_position_layout_past_2_31_written_from_offsets_holds_each_run_at_its_position(
    tmp_path: Path, spill_bytes: int | None
) -> None:
    """Partitions cut at the positions holding values (one value each) hold every position
    within 2**31 of their first, so the parts carry int32 offsets; the layout's arrays, read by
    zarr alone, hold each run at its position past 2**31 and 2**32."""
    length = 5_000_000_000
    rows = np.array([0, 1, 0, 1, 0, 1])
    positions = np.array([5, 5, 2**31 + 7, 2**32 + 1, length - 2, length - 1])
    values = np.arange(1.0, 7.0)
    x = sparse.COO(np.stack([rows, positions]), values, shape=(2, length))
    path = tmp_path / "s.zarr"
    settings = {} if spill_bytes is None else {"sporadik.spill-bytes": spill_bytes}
    with dask.config.set(settings):
        sd.to_sporadik(x, path, partition_bytes=16)

    def stored(name: str) -> zarr.Array[Any]:
        return zarr.open_array(path / "layouts" / "axis1" / name, mode="r")

    np.testing.assert_array_equal(stored("indices")[:], rows)  # in (position, row) order
    np.testing.assert_array_equal(stored("data")[:], values)
    held = np.concatenate((positions, positions + 1, [0, 6, 2**31 + 6, length]))
    expected = np.searchsorted(positions, held, side="left")
    np.testing.assert_array_equal(stored("indptr").get_coordinate_selection(held), expected)
    window = sd.StoreReader(path)[:, 2**31 : 2**31 + 10]
    np.testing.assert_array_equal(window.coords, [[0], [7]])
