"""The same write on a real `distributed.LocalCluster` with worker processes: workers write the
chunks, the client commits the block."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import sparse
import sporadik
from dask.utils import key_split
from distributed import Client, get_task_stream

import sporadik_dask as sd
from sporadik_dask.read.blocks import StoreWindow
from sporadik_dask.read.dask_model import graph_names, source_of
from tests.helpers import S3Bucket, logged_dense, logged_input, random_dense, reads_logged

#: A cluster of worker processes in every test: slow.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("rank", [2, 3])
def test_a_cluster_writes_what_the_threaded_scheduler_writes(
    tmp_path: Path, client: Client, rank: int
) -> None:
    shape = (120, 90) if rank == 2 else (20, 15, 12)
    dense = random_dense(np.random.default_rng(rank), shape, 0.2)
    x = da.from_array(
        sparse.COO.from_numpy(dense), chunks=tuple(s // 3 for s in shape), asarray=False
    )
    with get_task_stream(client) as stream:
        on_cluster = sd.to_sporadik(x, tmp_path / "cluster.zarr", chunk=50, partition_bytes=4000)
    ran = {str(task["key"]) for task in stream.data}
    workers = {task["worker"] for task in stream.data}
    assert any("-sort" in key for key in ran) and any("-shared-" in key for key in ran)
    assert len(workers) == 2
    # The block is committed by this process, not by a finalize task on a worker.
    assert not any("finalize" in key or "commit" in key for key in ran)
    assert sporadik.describe(tmp_path / "cluster.zarr").shape == shape
    with sporadik.open_array(tmp_path / "cluster.zarr") as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), dense)
    with sporadik.open_array(tmp_path / "cluster.zarr") as store:
        assert store.indexed_axes == tuple(range(rank))
    assert on_cluster.nnz == np.count_nonzero(dense)


def test_a_cluster_makes_a_write_s_shuffle_tasks_on_the_scheduler_not_the_client(
    tmp_path: Path, client: Client
) -> None:
    dense = random_dense(np.random.default_rng(4), (120, 90), 0.2)
    x = da.from_array(sparse.COO.from_numpy(dense), chunks=(30, 30), asarray=False)
    write = sd.to_sporadik(x, tmp_path / "s.zarr", compute=False, partition_bytes=4000)
    layer = write.__dask_graph__().layers[write.__dask_layers__()[0]]
    assert not layer.is_materialized()
    write.compute()
    assert not layer.is_materialized()
    with sporadik.open_array(tmp_path / "s.zarr") as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), dense)


def test_a_cluster_spills_shuffle_parts_inside_the_store_every_worker_writes(
    tmp_path: Path, client: Client
) -> None:
    # A file in one worker's temporary directory could not be read by the worker running the
    # sort; the local directory store is written by every worker, so the parts go there.
    dense = random_dense(np.random.default_rng(6), (120, 90), 0.2)
    x = da.from_array(sparse.COO.from_numpy(dense), chunks=(30, 30), asarray=False)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with dask.config.set({"sporadik.spill-bytes": 0, "temporary-directory": str(scratch)}):
        write = sd.to_sporadik(x, tmp_path / "s.zarr", compute=False, partition_bytes=4000)
        assert isinstance(write, sd.StoreWrite)
        with get_task_stream(client) as stream:
            futures = write.futures(client)
            assert len(futures) == len(write.__dask_keys__())
            with pytest.raises(ValueError, match="pass what futures"):
                write.wait(client, futures[:1])
            write.wait(client, futures)
    sorts = {task["worker"] for task in stream.data if "-sort-" in str(task["key"])}
    assert len(sorts) == 2
    # no worker used its own temporary directory (where the count pass kept the pieces)
    assert list(scratch.glob("*/*.parts")) == []
    parts = list((tmp_path / "s.zarr" / "layouts").glob(".sporadik-parts-*/*.parts"))
    assert len(parts) == 2 * 12  # every piece of both layouts, each in one file
    write.commit()
    assert list((tmp_path / "s.zarr").rglob(".sporadik-parts-*")) == []
    assert list(scratch.iterdir()) == []
    with sporadik.open_array(tmp_path / "s.zarr") as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), dense)


def test_a_failed_wait_on_a_cluster_removes_the_spilled_parts(
    tmp_path: Path, client: Client
) -> None:
    """``futures`` then ``wait``, failing (here cancelled once parts are on disk, as a restart
    does): the parts go with the write, not when the StoreWrite is collected, which a notebook
    keeping it never does."""
    import time

    from sporadik_dask.synthetic import counts_matrix

    x = counts_matrix(cells=20_000, genes=2_000, density=0.02, rows_per_chunk=1_000)
    with dask.config.set({"sporadik.spill-bytes": 0}):
        write = sd.to_sporadik(x, tmp_path / "s.zarr", compute=False, partition_bytes=40_000)
        assert isinstance(write, sd.StoreWrite)
        futures = write.futures(client)
        deadline = time.monotonic() + 60
        while not list((tmp_path / "s.zarr").rglob(".sporadik-parts-*/*.parts")):
            assert time.monotonic() < deadline and not all(f.done() for f in futures)
            time.sleep(0.005)
        client.cancel(futures)
        with pytest.raises(Exception, match="cancelled"):
            write.wait(client, futures)
    assert list((tmp_path / "s.zarr").rglob(".sporadik-parts-*")) == []
    with pytest.raises(sd.IncompleteError):
        write.commit()


def test_a_cluster_writing_an_object_store_keeps_its_parts_in_its_workers(
    s3: S3Bucket, client: Client
) -> None:
    dense = random_dense(np.random.default_rng(8), (120, 90), 0.2)
    x = da.from_array(sparse.COO.from_numpy(dense), chunks=(30, 30), asarray=False)
    url, options = f"s3://{s3['bucket']}/parts.zarr", s3["storage_options"]
    with dask.config.set({"sporadik.spill-bytes": 0}):
        write = sd.to_sporadik(x, url, compute=False, partition_bytes=4000, storage_options=options)
        assert isinstance(write, sd.StoreWrite)
        local, *shared = write._spill
        assert shared == []
        write.wait(client, write.futures(client))
    assert not Path(local).exists()  # before the commit, which would remove it
    write.commit()
    stored = sd.from_sporadik(url, storage_options=options).compute()
    np.testing.assert_array_equal(stored.todense(), dense)


def test_a_cluster_merges_coordinate_columns(tmp_path: Path, client: Client) -> None:
    rng = np.random.default_rng(5)
    rows, cols = rng.integers(0, 50, 400), rng.integers(0, 30, 400)
    values = rng.integers(1, 5, 400).astype(np.float64)
    columns = (
        da.from_array(values, chunks=70),
        (da.from_array(rows, chunks=70), da.from_array(cols, chunks=70)),
    )
    sd.to_sporadik(columns, tmp_path / "s.zarr", shape=(50, 30))
    expected = np.zeros((50, 30))
    np.add.at(expected, (rows, cols), values)
    with sporadik.open_array(tmp_path / "s.zarr") as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), expected)


def test_a_cluster_reads_stepped_and_listed_selections_of_from_sporadik(
    tmp_path: Path, client: Client
) -> None:
    dense = random_dense(np.random.default_rng(4), (40, 30), 0.3)
    sd.to_sporadik(dense, tmp_path / "s.zarr", chunk=16)
    x = sd.from_sporadik(tmp_path / "s.zarr", chunks=(10, 30))
    selections = [x[None:2:-3], x[:, [29, 2, 2]]]
    with get_task_stream(client) as stream:
        stepped, listed = client.compute(selections, sync=True)
    # the workers read windows of the store (a reader and positions, pickled as a location)
    assert all(isinstance(source_of(selection), StoreWindow) for selection in selections)
    names = set().union(*(graph_names(selection) for selection in selections))
    assert any(key_split(task["key"]) in names for task in stream.data)
    np.testing.assert_array_equal(stepped.todense(), dense[None:2:-3])
    np.testing.assert_array_equal(listed.todense(), dense[:, [29, 2, 2]])


def test_convert_on_a_cluster_shows_progress_on_a_terminal(tmp_path: Path, client: Client) -> None:
    import sys

    import scipy.sparse as sp

    from tests.helpers import run_on_terminal

    matrix = sp.random(300, 200, density=0.1, format="csr", random_state=7, dtype=np.float64)
    sp.save_npz(tmp_path / "m.npz", matrix)
    assert client.scheduler is not None and client.scheduler.address is not None  # connected
    address = client.scheduler.address
    command = [sys.executable, "-m", "sporadik_dask.cli.main", "convert", str(tmp_path / "m.npz")]
    status, printed = run_on_terminal(
        [*command, str(tmp_path / "out.zarr"), "--scheduler", address]
    )
    assert status == 0, printed
    assert "100% Completed" in printed and "wrote " in printed
    with sporadik.open_array(tmp_path / "out.zarr") as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), matrix.toarray())


def test_a_cluster_takes_an_in_memory_array_scattered_once_not_in_every_graph(
    tmp_path: Path, client: Client
) -> None:
    """Held in the graph, a scipy matrix would be sent with the count pass and again with the
    write (distributed warns of a large graph each time); scattered, the graph holds futures."""
    import warnings

    import scipy.sparse as sp
    from distributed import Future

    from sporadik_dask.write import sources

    matrix = sp.random(3_000, 400, density=0.05, format="csr", dtype=np.float32, random_state=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # distributed's "Sending large graph" among them
        with dask.config.set({"distributed.admin.large-graph-warning-threshold": "100kB"}):
            write = sd.to_sporadik(matrix, tmp_path / "s.zarr", compute=False)
            assert isinstance(write, sd.StoreWrite)
            description = write.compute()
    assert description.nnz == matrix.nnz
    pieces = sources.source_of(matrix).pieces
    held = [pieces.graph.layers[pieces.keys[0][0]][key] for key in pieces.keys]
    assert held and all(isinstance(piece, Future) for piece in held)
    with sporadik.open_array(tmp_path / "s.zarr") as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), matrix.toarray())


def _slow_unless_last(
    block: np.ndarray, flag: str, block_info: dict[int, Any] | None = None
) -> np.ndarray:
    """The input's blocks once ``flag`` exists (after the write was planned): the last fails at
    once, the others take a while, so they are running when the failure arrives."""
    import os
    import time

    if os.path.exists(flag):
        assert block_info is not None
        if block_info[0]["chunk-location"][0] == block_info[0]["num-chunks"][0] - 1:
            raise RuntimeError("the input failed")
        time.sleep(1.5)
    return block


def test_a_failed_cluster_write_leaves_no_task_of_its_own_running(
    tmp_path: Path, client: Client
) -> None:
    """A cancelled future's task goes on running on its worker, and would write chunks into a
    store discarded (or replaced) after the failure was reported: wait() returns only once no
    worker runs a task of the write."""
    from sporadik_dask.write.store_write import _running

    flag = tmp_path / "fail"
    dense = random_dense(np.random.default_rng(5), (60, 40), 0.2)
    x = da.from_array(dense, chunks=(10, 40)).map_blocks(
        _slow_unless_last, str(flag), dtype=dense.dtype
    )
    with dask.config.set({"sporadik.spill-bytes": -1}):  # nothing kept: the write reads x
        write = sd.to_sporadik(x, tmp_path / "s.zarr", compute=False, axes=(0,))
    assert isinstance(write, sd.StoreWrite)
    flag.write_text("")
    with pytest.raises(RuntimeError, match="the input failed"):
        write.wait(client, write.futures(client))
    names = frozenset(write.__dask_graph__().layers)
    assert sum(client.run(_running, names).values()) == 0
    assert write.discard()
    assert not (tmp_path / "s.zarr").exists()


def test_a_cluster_writes_a_dataframe_of_many_names_by_graphs_that_hold_none_of_them(
    tmp_path: Path, client: Client
) -> None:
    """The label pass finds each partition's names and unites them in a tree, and the pieces
    look names up among labels its future holds: held in the graph as fixed-width numpy
    strings, 40,000 cell names had made the graph of the count pass 3.5 MiB."""
    import warnings

    import dask.dataframe as dd
    import pandas as pd
    import xarray as xr
    from distributed import Future

    from sporadik_dask.write import sources

    rng = np.random.default_rng(41)
    rows, cells = 120_000, 40_000
    names = np.array([f"AAACCTGAGAAACCAT-{i:06d}" for i in rng.permutation(cells)])
    genes = pd.Categorical(
        rng.choice([f"G{j:02d}" for j in range(30)], rows),
        categories=[*(f"G{j:02d}" for j in range(30)), "unused"],
    )
    table = pd.DataFrame({"cell": names[np.arange(rows) % cells], "gene": genes})
    table.to_parquet(tmp_path / "t.parquet", row_group_size=rows // 12)
    frame = dd.read_parquet(tmp_path / "t.parquet", split_row_groups=True)
    assert frame.npartitions == 12
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # distributed's "Sending large graph" among them
        with dask.config.set({"distributed.admin.large-graph-warning-threshold": "256kB"}):
            sd.to_sporadik(frame, tmp_path / "s.zarr", columns=("cell", "gene"))
    pieces = sources.source_of(frame, columns=("cell", "gene")).pieces
    held = [task for layer in pieces.graph.layers.values() for task in layer.values()]
    assert any(isinstance(task, Future) for task in held)
    expected_cells, row = np.unique(table["cell"].to_numpy(str), return_inverse=True)
    expected_genes, col = np.unique(table["gene"].to_numpy(str), return_inverse=True)
    expected = np.zeros((cells, 30), dtype=np.int64)
    np.add.at(expected, (row, col), 1)
    array = xr.open_dataset(tmp_path / "s.zarr", engine="sporadik")["count"]
    np.testing.assert_array_equal(array.cell.values, expected_cells)
    np.testing.assert_array_equal(array.gene.values, expected_genes)
    with sporadik.open_array(tmp_path / "s.zarr") as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), expected)


def test_a_cluster_write_reads_each_block_of_its_input_once(tmp_path: Path, client: Client) -> None:
    log = tmp_path / "reads"
    sd.to_sporadik(logged_input(log, 4), tmp_path / "s.zarr", partition_bytes=4000)
    assert reads_logged(log) == [0, 1, 2, 3]
    with sporadik.open_array(tmp_path / "s.zarr") as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), logged_dense(4))


def _in_memory(dask_worker: Any) -> list[Any]:
    """The keys a worker holds, in memory or spilled to its disk (run on each worker)."""
    return list(dask_worker.data)


def _holding(client: Client, keys: Any, *, settled: bool = True) -> tuple[set[Any], set[Any]]:
    """Which of ``keys`` (or, for a string, which keys named with it first) the scheduler has a
    worker hold, and which a worker holds; ``settled``: once a release has reached them both
    (the scheduler tells the workers after the client tells it), or a minute has passed."""
    import time

    def wanted(key: Any) -> bool:
        name = key[0] if isinstance(key, tuple) else key
        return str(name).startswith(keys) if isinstance(keys, str) else key in keys

    deadline = time.monotonic() + 60
    while True:
        known = {key for key, where in client.who_has().items() if where and wanted(key)}
        found = client.run(_in_memory).values()
        held = {key for keys_held in found for key in keys_held if wanted(key)}
        if not settled or not (known or held) or time.monotonic() > deadline:
            return known, held
        time.sleep(0.05)


#: What a cluster holds a write's persisted pieces under (``write/persisted.py``).
NARROWED = "sporadik-narrowed-"


def _objects(path: Path) -> dict[str, bytes]:
    """Every object of the store at ``path``, by name."""
    return {f.relative_to(path).as_posix(): f.read_bytes() for f in path.rglob("*") if f.is_file()}


def _written_on_threads(x: Any, path: Path) -> dict[str, bytes]:
    """The objects the threaded scheduler writes for ``x`` (its pieces kept as files)."""
    with dask.config.set(scheduler="threads"):
        sd.to_sporadik(x, path, partition_bytes=4000)
    return _objects(path)


@pytest.mark.parametrize("pending", [False, True], ids=["computed", "compute=False, then compute"])
def test_a_cluster_persisting_its_pieces_on_its_workers_reads_each_block_of_its_input_once(
    tmp_path: Path, client: Client, pending: bool
) -> None:
    """``sporadik.keep-pieces: workers``, as on workers of other hosts: the count pass's pieces
    are results its workers hold, which the write takes; none is left once it commits."""
    from sporadik_dask.write import sources

    log, scratch, path = tmp_path / "reads", tmp_path / "scratch", tmp_path / "s.zarr"
    x = logged_input(log, 4)
    pieces = sources.source_of(x).pieces.keys
    with dask.config.set({"sporadik.keep-pieces": "workers", "temporary-directory": str(scratch)}):
        if pending:
            write = sd.to_sporadik(x, path, partition_bytes=4000, compute=False)
            assert reads_logged(log) == [0, 1, 2, 3]  # the count pass
            persisted = {future.key for future in write._persisted}
            assert len(persisted) == 4
            assert _holding(client, persisted, settled=False) == (persisted, persisted)
            assert _holding(client, pieces) == (set(), set())  # as read: gone once narrowed
            written = write.compute()
        else:
            written = sd.to_sporadik(x, path, partition_bytes=4000)
    assert reads_logged(log) == [0, 1, 2, 3]
    assert not scratch.exists()  # nothing kept on disk
    assert _holding(client, NARROWED) == (set(), set())
    assert written.nnz == np.count_nonzero(logged_dense(4))
    with sporadik.open_array(path) as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), logged_dense(4))
    assert _objects(path) == _written_on_threads(x, tmp_path / "t.zarr")


def test_a_failed_write_keeps_its_persisted_pieces_for_a_retry_that_reads_no_block_again(
    tmp_path: Path, client: Client
) -> None:

    log, path = tmp_path / "reads", tmp_path / "s.zarr"
    x = logged_input(log, 3)
    with dask.config.set({"sporadik.keep-pieces": "workers"}):
        write = sd.to_sporadik(x, path, partition_bytes=4000, compute=False)
    assert isinstance(write, sd.StoreWrite)
    persisted = {future.key for future in write._persisted}
    path.mkdir()
    (path / "notes.txt").write_text("not a store")  # the write's first task refuses it
    with pytest.raises(sd.StoreExistsError):
        write.compute()
    assert _holding(client, persisted, settled=False) == (persisted, persisted)
    (path / "notes.txt").unlink()
    write.compute()
    assert reads_logged(log) == [0, 1, 2]
    assert _holding(client, NARROWED) == (set(), set())
    with sporadik.open_array(path) as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), logged_dense(3))


def test_a_refused_write_and_a_dropped_pending_write_let_go_of_their_persisted_pieces(
    tmp_path: Path, client: Client
) -> None:
    import gc

    rows, cols = np.array([0, 1, 1, 2]), np.array([3, 0, 0, 2])  # (1, 0) named twice
    values = np.arange(4, dtype=np.float64) + 1
    columns = (
        da.from_array(values, chunks=2),
        (da.from_array(rows, chunks=2), da.from_array(cols, chunks=2)),
    )
    with dask.config.set({"sporadik.keep-pieces": "workers"}):
        with pytest.raises(sd.LayoutError, match="name a cell another value already names"):
            sd.to_sporadik(columns, tmp_path / "r.zarr", shape=(3, 4), duplicates="refuse")
        assert _holding(client, NARROWED) == (set(), set())
        write = sd.to_sporadik(columns, tmp_path / "p.zarr", shape=(3, 4), compute=False)
    persisted = {future.key for future in write._persisted}
    assert len(persisted) == 2
    assert _holding(client, persisted, settled=False) == (persisted, persisted)
    del write
    gc.collect()
    assert _holding(client, NARROWED) == (set(), set())


@pytest.mark.parametrize(
    ("chosen", "kept"), [("auto", "files"), ("files", "files"), ("workers", "workers")]
)
def test_a_cluster_on_this_host_keeps_files_unless_told_to_persist_on_its_workers(
    client: Client, chosen: str, kept: str
) -> None:
    from sporadik_dask.write.kept import keeping

    with dask.config.set({"sporadik.keep-pieces": chosen}):
        assert keeping(True, client) == kept
        assert keeping(False, client) is None


@pytest.mark.parametrize(("memory_limit", "spills"), [(0, False), ("1GB", True)])
def test_only_workers_that_spill_are_given_pieces_to_persist_unasked(
    memory_limit: int | str, spills: bool
) -> None:
    """A worker with no memory limit never spills: persisting every piece there could hold the
    whole input in its memory, so ``auto`` keeps nothing on a cluster of other hosts."""
    from distributed import LocalCluster

    from sporadik_dask.write.kept import _workers_spill

    with (
        LocalCluster(
            n_workers=1, processes=False, memory_limit=memory_limit, dashboard_address=None
        ) as cluster,
        Client(cluster, set_as_default=False) as other,
    ):
        assert _workers_spill(other) is spills


@pytest.mark.parametrize("chunks", [{}, {"cell": 4}])
def test_blocks_of_nan_fill_come_back_from_workers_with_nan(
    tmp_path: Path, client: Client, chunks: dict[str, int]
) -> None:
    """``X.where(X > 0)`` makes blocks whose absent cells are NaN; distributed's serializer
    sent them as blocks of fill 0, so computing them gave 0 where NaN was."""
    import xarray as xr

    from sporadik_dask.read.dask_model import EXPRESSIONS

    if EXPRESSIONS:
        pytest.skip("xarray's where asks numpy the result type of a dask array of that model")
    dense = random_dense(np.random.default_rng(8), (13, 7), 0.4)
    dense[:, 3] = 0  # a gene of no value: its median over cells is NaN
    sd.to_sporadik(
        xr.DataArray(sparse.COO.from_numpy(dense), dims=("cell", "gene")), tmp_path / "s.zarr"
    )
    opened = xr.open_dataset(tmp_path / "s.zarr", engine="sporadik", chunks=chunks)
    X = opened[next(iter(opened.data_vars))]
    want = xr.DataArray(dense, dims=("cell", "gene")).where(dense > 0)
    got = X.where(X > 0).isel(cell=slice(0, 9)).compute().data
    np.testing.assert_array_equal(got.todense(), want.isel(cell=slice(0, 9)).values)
    assert np.isnan(got.fill_value)
    np.testing.assert_array_equal(X.where(X > 0).median("cell").values, want.median("cell").values)
