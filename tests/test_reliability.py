"""Faults during writes and hostile stores: nothing lost, nothing wrong read, every refusal a
`SporadikError`."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import dask
import dask.array as da
import numpy as np
import numpy.typing as npt
import pytest
import sparse
import sporadik
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.storage import LocalStore

import sporadik_dask as sd
from tests.helpers import (
    RecordingStore,
    logged_dense,
    logged_input,
    mount_tmpfs,
    random_dense,
    reads_logged,
    unmount,
    write_reference,
)

if TYPE_CHECKING:
    from distributed import Client

ROOT = Path(__file__).resolve().parents[1]


class StallingStore(LocalStore):
    """A local store on which one worker process stops, once, until it is killed.

    Each process notes the array of its first chunk write; the first process to write a chunk of
    another array (so it holds at least one finished chunk write, whose result no other worker
    has) claims ``marker``, writes its pid there, and stalls inside that write. Every chunk
    written is logged as ``pid key`` in ``marker.log``.
    """

    def __init__(self, root: Path, marker: Path, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        self.marker = marker

    def __reduce__(self) -> Any:
        return (StallingStore, (self.root, self.marker))

    def with_read_only(self, read_only: bool = False) -> Self:
        return type(self)(self.root, self.marker, read_only=read_only)

    async def set(self, key: str, value: Any) -> None:
        if "/c/" in key:
            first = self.marker.with_name(f"{self.marker.name}.{os.getpid()}")
            array = key.rpartition("/c/")[0]
            if not first.exists():
                first.write_text(array)
            elif first.read_text() != array and self._claim():
                time.sleep(60)  # killed long before this ends
                raise TimeoutError("the stalled worker was never killed")
        await super().set(key, value)
        if "/c/" in key:
            with self.marker.with_suffix(".log").open("a") as log:
                log.write(f"{os.getpid()} {key}\n")

    def _claim(self) -> bool:
        try:
            os.close(os.open(self.marker.with_suffix(".claim"), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return False
        self.marker.with_suffix(".tmp").write_text(str(os.getpid()))
        self.marker.with_suffix(".tmp").rename(self.marker)
        return True


def _input(seed: int = 0) -> tuple[npt.NDArray[Any], Any]:
    dense = random_dense(np.random.default_rng(seed), (120, 80), 0.2)
    return dense, da.from_array(sparse.COO.from_numpy(dense), chunks=(30, 40), asarray=False)


def _objects(path: Path) -> dict[str, bytes]:
    return {
        f.relative_to(path).as_posix(): f.read_bytes()
        for f in sorted(path.rglob("*"))
        if f.is_file()
    }


@contextmanager
def _three_workers(allowed_failures: int, scratch: Path) -> Iterator[tuple[Client, list[int]]]:
    """A client of a ``LocalCluster``'s scheduler and three single-threaded worker processes
    started without a nanny, so a worker killed stays dead (a nanny would start a fresh one);
    yields the client and the workers' pids."""
    from distributed import Client, LocalCluster

    paths = (str(ROOT), os.environ.get("PYTHONPATH", ""))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in paths if path)}
    with (
        LocalCluster(
            n_workers=0,
            dashboard_address=None,
            scheduler_kwargs={"allowed_failures": allowed_failures},
        ) as cluster,
        Client(cluster) as client,
        (scratch / "workers.log").open("ab") as log,
    ):
        command = [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address]
        options = ["--no-nanny", "--nthreads", "1", "--no-dashboard", "--memory-limit", "0"]
        options += ["--local-directory", str(scratch)]
        workers = [subprocess.Popen([*command, *options], env=env, stderr=log) for _ in range(3)]
        try:
            client.wait_for_workers(3, timeout=60)
            yield client, [worker.pid for worker in workers]
        finally:
            for worker in workers:
                worker.kill()
                worker.wait()


@contextmanager
def _killing_the_stalled_worker(marker: Path) -> Iterator[Future[int]]:
    """While the body runs, wait for a worker to stall on ``marker`` and kill its process for
    good (``SIGKILL``: whatever it held in memory is lost); the future gives its pid."""
    over = threading.Event()

    def kill() -> int:
        while not marker.exists():
            if over.wait(0.02):
                raise TimeoutError("no worker stalled in a chunk write")
        pid = int(marker.read_text())
        os.kill(pid, signal.SIGKILL)
        return pid

    with ThreadPoolExecutor(1) as pool:
        killed = pool.submit(kill)
        try:
            yield killed
        finally:
            over.set()


def _numpy_input(seed: int) -> tuple[npt.NDArray[Any], da.Array]:
    """``_input`` in numpy blocks: a fresh worker process spends seconds compiling ``sparse``'s
    indexing on its first block, more than the rest of a write here."""
    dense = random_dense(np.random.default_rng(seed), (120, 80), 0.2)
    return dense, da.from_array(dense, chunks=(30, 40))


@pytest.mark.slow
def test_a_write_losing_a_worker_for_good_finishes_on_the_others_with_clean_bytes(
    tmp_path: Path,
) -> None:
    dense, x = _numpy_input(6)
    sd.to_sporadik(x, tmp_path / "clean.zarr", chunk=64, partition_bytes=3000)  # threads
    path, marker = tmp_path / "s.zarr", tmp_path / "stalled"
    with _three_workers(3, tmp_path) as (client, pids):
        with _killing_the_stalled_worker(marker) as killed:
            written = sd.to_sporadik(x, StallingStore(path, marker), chunk=64, partition_bytes=3000)
        pid = killed.result()
        assert pid in pids and len(client.scheduler_info()["workers"]) == 2  # never replaced
        read_back = sd.from_sporadik(path).compute()  # on the two left
    writes = [line.split() for line in marker.with_suffix(".log").read_text().splitlines()]
    lost = {key for who, key in writes if int(who) == pid}
    # The chunk writes it had finished were lost with it (their results lived in its memory)
    # and ran again on the others, over the same objects.
    assert lost and lost <= {key for who, key in writes if int(who) != pid}
    assert written.nnz == np.count_nonzero(dense)
    assert _objects(path) == _objects(tmp_path / "clean.zarr")
    np.testing.assert_array_equal(read_back.todense(), dense)
    with sporadik.open_array(path) as reader:
        np.testing.assert_array_equal(reader.to_array().to_dense(), dense)
    assert sd.validate(path).nnz == written.nnz


@pytest.mark.slow
def test_a_worker_lost_with_persisted_pieces_has_only_those_read_again_and_the_bytes_are_clean(
    tmp_path: Path,
) -> None:
    """``sporadik.keep-pieces: workers``: the pieces a killed worker held are read again from
    the input by their lineage, no other, and the write is the threaded write's, byte for byte."""
    log, path = tmp_path / "reads", tmp_path / "s.zarr"
    x = logged_input(log, 6)
    sd.to_sporadik(x, tmp_path / "clean.zarr", partition_bytes=4000)  # threads, files
    log.unlink()
    with _three_workers(3, tmp_path) as (client, _):
        with dask.config.set({"sporadik.keep-pieces": "workers"}):
            write = sd.to_sporadik(x, path, partition_bytes=4000, compute=False)
        assert isinstance(write, sd.StoreWrite)
        pieces = {future.key: b for b, future in enumerate(write._persisted)}
        alone: dict[str, list[int]] = {}  # the pieces each worker alone holds
        for key, where in client.who_has().items():
            if key in pieces and len(where) == 1:
                alone.setdefault(where[0], []).append(pieces[key])
        lost, held = max(alone.items(), key=lambda found: len(found[1]))
        os.kill(client.run(os.getpid, workers=[lost])[lost], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while lost in client.scheduler_info()["workers"] and time.monotonic() < deadline:
            time.sleep(0.05)
        write.compute()
    assert reads_logged(log) == sorted([*range(6), *held])
    assert _objects(path) == _objects(tmp_path / "clean.zarr")
    with sporadik.open_array(path) as reader:
        np.testing.assert_array_equal(reader.to_array().to_dense(), logged_dense(6))


@pytest.mark.slow
def test_a_write_losing_a_running_task_past_allowed_failures_fails_with_no_block(
    tmp_path: Path,
) -> None:
    from distributed import KilledWorker

    dense, x = _numpy_input(7)
    sd.to_sporadik(x, tmp_path / "clean.zarr", chunk=64, partition_bytes=3000)  # threads
    path, marker = tmp_path / "s.zarr", tmp_path / "stalled"
    with _three_workers(0, tmp_path) as (client, pids):
        with _killing_the_stalled_worker(marker) as killed, pytest.raises(KilledWorker):
            sd.to_sporadik(x, StallingStore(path, marker), chunk=64, partition_bytes=3000)
        assert killed.result() in pids and len(client.scheduler_info()["workers"]) == 2
        assert "sporadik" not in json.loads((path / "zarr.json").read_text())["attributes"]
        with pytest.raises(sd.IncompleteError):
            sd.describe(path)
        with pytest.raises(sporadik.IncompleteError):
            sporadik.describe(path)
        # A torn store: written again over it on the two workers left, it is a clean one.
        sd.to_sporadik(x, path, chunk=64, partition_bytes=3000, overwrite=True)
    assert _objects(path) == _objects(tmp_path / "clean.zarr")
    with sporadik.open_array(path) as reader:
        np.testing.assert_array_equal(reader.to_array().to_dense(), dense)


def test_writes_without_the_commit_leave_a_store_that_refuses_to_open(tmp_path: Path) -> None:
    _, x = _input(1)
    write = sd.to_sporadik(x, tmp_path / "s.zarr", compute=False, chunk=64)
    assert isinstance(write, sd.StoreWrite)
    # Every chunk written, then the client interrupted before the commit.
    dask.get(write.__dask_graph__(), write.__dask_keys__())
    assert any("/data/c/" in key for key in _objects(tmp_path / "s.zarr"))
    with pytest.raises(sd.IncompleteError):
        sd.describe(tmp_path / "s.zarr")


def test_a_lay_out_run_again_puts_back_documents_its_first_run_never_wrote(
    tmp_path: Path,
) -> None:
    """A skeleton retried (its worker lost midway) finds its own mark on the root: it keeps the
    chunks written since and writes every document again, so none is left missing."""
    dense, x = _input(5)
    path = tmp_path / "s.zarr"
    write = sd.to_sporadik(x, path, compute=False, chunk=64)
    assert isinstance(write, sd.StoreWrite)
    graph = write.__dask_graph__()
    (write_skeleton,) = [key for key in graph if str(key).startswith("sporadik-skeleton-")]
    dask.get(graph, write_skeleton)
    (path / "layouts" / "axis1" / "indices" / "zarr.json").unlink()  # cut off among them
    (path / "layouts" / "axis0" / "data" / "c").mkdir(parents=True)
    (path / "layouts" / "axis0" / "data" / "c" / "0").write_bytes(b"a chunk written since")
    dask.get(graph, write_skeleton)
    assert (path / "layouts" / "axis1" / "indices" / "zarr.json").exists()
    assert (
        path / "layouts" / "axis0" / "data" / "c" / "0"
    ).read_bytes() == b"a chunk written since"
    write.compute()
    for axis in (0, 1):
        np.testing.assert_array_equal(sd.from_sporadik(path, axis=axis).compute().todense(), dense)
    sd.validate(path)


def test_tasks_of_a_write_replaced_meanwhile_write_nothing_into_the_new_store(
    tmp_path: Path,
) -> None:
    """Tasks of a write cancelled on a cluster go on running; when another write has laid the
    location out again (and committed), they must not write their chunks into its store."""
    dense, x = _input(6)
    path = tmp_path / "s.zarr"
    stale = sd.to_sporadik(x, path, compute=False, chunk=64)
    assert isinstance(stale, sd.StoreWrite)
    graph = dict(stale.__dask_graph__())
    (write_skeleton,) = [key for key in graph if str(key).startswith("sporadik-skeleton-")]
    token = dask.get(graph, write_skeleton)
    sd.to_sporadik(2 * x, path, chunk=64, overwrite=True)  # same documents, another write
    graph[write_skeleton] = token  # laid out already: its tasks run on as a cancelled write's do
    with pytest.raises(sd.SporadikError, match="no longer owns the store"):
        dask.get(graph, stale.__dask_keys__())
    for axis in (0, 1):
        np.testing.assert_array_equal(
            sd.from_sporadik(path, axis=axis).compute().todense(), 2 * dense
        )
    sd.validate(path)


def test_tasks_of_an_add_axis_whose_store_was_replaced_write_nothing_into_the_new_store(
    tmp_path: Path,
) -> None:
    """A cancelled ``add_axis``'s tasks run on while the store is overwritten by another write
    of the same documents (``2 * x``): written, the old values' chunks would stand in the new
    store's layout, and the commit would find its block already there."""
    dense, x = _input(7)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(x, path, chunk=64, axes=(0,))
    stale = sd.add_axis(path, 1, chunk=64, compute=False)
    assert isinstance(stale, sd.StoreWrite)
    # float32 times a float32 2: dask's expression model makes ``2 * x`` float64, other documents
    sd.to_sporadik(x * x.dtype.type(2), path, chunk=64, overwrite=True)
    # refused by the skeleton task (the block changed since the plan), or by each chunk task
    with pytest.raises(sd.SporadikError, match=r"no longer owns the store|changed since"):
        dask.get(dict(stale.__dask_graph__()), stale.__dask_keys__())
    np.testing.assert_array_equal(sd.from_sporadik(path, axis=1).compute().todense(), 2 * dense)
    sd.validate(path)


def test_an_add_axis_whose_store_was_replaced_by_another_dtype_is_refused_by_name(
    tmp_path: Path,
) -> None:
    """The pending ``add_axis`` read its source layout once while planning; the store is then
    overwritten with int64 values of another count: read through what it opened then, zarr's
    own ``cannot reshape`` came out, not why."""
    _, x = _input(7)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(x, path, chunk=64, axes=(0,))
    stale = sd.add_axis(path, 1, chunk=64, compute=False)
    other = sparse.random(x.shape, density=0.3, random_state=5) * 100
    sd.to_sporadik(other.astype(np.int64), path, chunk=64, axes=(0,), overwrite=True)
    with pytest.raises(sd.SporadikError, match=r"changed after this write was planned|no longer"):
        dask.get(dict(stale.__dask_graph__()), stale.__dask_keys__())
    np.testing.assert_array_equal(
        sd.from_sporadik(path).compute().todense(), other.astype(np.int64).todense()
    )


def test_a_crash_during_overwrite_never_shows_the_old_block_over_new_chunks(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.zarr"
    sd.to_sporadik(random_dense(np.random.default_rng(2), (120, 80), 0.2), path, chunk=64)
    _, x = _input(3)
    failing = RecordingStore(LocalStore(path), fail_on="layouts/axis0/indices/c/2")
    with pytest.raises(OSError):
        sd.to_sporadik(x, failing, chunk=64, overwrite=True)
    with pytest.raises(sd.IncompleteError):
        sd.describe(path)
    with pytest.raises(sporadik.IncompleteError):
        sporadik.describe(path)


def test_retrying_a_failed_write_gives_the_bytes_of_a_clean_one(tmp_path: Path) -> None:
    _dense, x = _input(4)
    failing = RecordingStore(LocalStore(tmp_path / "retry.zarr"), fail_on="layouts/axis1/data/c/1")
    with pytest.raises(OSError):
        sd.to_sporadik(x, failing, chunk=64)
    sd.to_sporadik(x, tmp_path / "retry.zarr", chunk=64, overwrite=True)
    sd.to_sporadik(x, tmp_path / "clean.zarr", chunk=64)
    assert _objects(tmp_path / "retry.zarr") == _objects(tmp_path / "clean.zarr")


# Hostile stores: every zarr.json field mutated, chunk objects truncated.
MUTANTS = [None, -1, 0, 2**62, 1.5, "x", "../../etc", [], [1, 2], {}, {"a": 1}, True]


def _leaves(document: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(document, dict):
        for key, value in document.items():
            yield (*path, key)
            yield from _leaves(value, (*path, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield (*path, index)
            yield from _leaves(value, (*path, index))


def _set(document: Any, path: tuple[Any, ...], value: Any, delete: bool) -> None:
    for step in path[:-1]:
        document = document[step]
    if delete and isinstance(document, dict):
        del document[path[-1]]
    else:
        document[path[-1]] = value


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, npt.NDArray[Any]]:
    dense = random_dense(np.random.default_rng(5), (40, 30), 0.2)
    path = write_reference(
        tmp_path_factory.mktemp("p") / "s.zarr", dense, {0: (1,), 1: (0,)}, chunk=64
    )
    return path, dense


def _copy(
    pristine: tuple[Path, npt.NDArray[Any]], factory: pytest.TempPathFactory
) -> tuple[Path, npt.NDArray[Any]]:
    """A copy of the pristine store to corrupt, and the values it holds."""
    source, dense = pristine
    path = factory.mktemp("mutant") / "s.zarr"
    shutil.copytree(source, path)
    return path, dense


def _outcome_is_a_refusal_or_the_true_values(path: Path, dense: npt.NDArray[Any]) -> None:
    """Refused with a message (by ``validate`` or a read), or the true values."""
    try:
        sd.validate(path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sd.ScanWarning)
            reader = sd.StoreReader(path)
            values = reader.read((slice(None),) * dense.ndim).todense()
            columns = reader.read((slice(None), [0, 7, 29])).todense()
    except sd.SporadikError as refused:
        assert str(refused)
        return
    np.testing.assert_array_equal(values, dense)
    np.testing.assert_array_equal(columns, dense[:, [0, 7, 29]])


#: Stores mutated per fuzzing test; SPORADIK_FUZZ_EXAMPLES raises it for a longer campaign.
FUZZ_EXAMPLES = int(os.environ.get("SPORADIK_FUZZ_EXAMPLES", "150"))


@pytest.mark.slow
@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_a_mutated_metadata_document_is_refused_or_read_correctly(
    tmp_path_factory: pytest.TempPathFactory, pristine: tuple[Path, npt.NDArray[Any]], data: Any
) -> None:
    path, dense = _copy(pristine, tmp_path_factory)
    documents = sorted(path.rglob("zarr.json"))
    target = data.draw(st.sampled_from(documents))
    document = json.loads(target.read_text())
    leaf = data.draw(st.sampled_from(list(_leaves(document))))
    _set(document, leaf, data.draw(st.sampled_from(MUTANTS)), data.draw(st.booleans()))
    target.write_text(json.dumps(document))
    _outcome_is_a_refusal_or_the_true_values(path, dense)


@settings(
    max_examples=max(FUZZ_EXAMPLES // 3, 1),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_a_truncated_or_deleted_chunk_object_is_refused_flagged_or_read_correctly(
    tmp_path_factory: pytest.TempPathFactory, pristine: tuple[Path, npt.NDArray[Any]], data: Any
) -> None:
    path, dense = _copy(pristine, tmp_path_factory)
    chunks = sorted(f for f in path.rglob("c/*") if f.is_file())
    target = data.draw(st.sampled_from(chunks))
    if data.draw(st.booleans()):
        target.unlink()
    else:
        content = target.read_bytes()
        target.write_bytes(content[: data.draw(st.integers(0, len(content) - 1))])
    _outcome_is_a_refusal_or_the_true_values(path, dense)


@pytest.mark.slow
def test_a_full_file_system_fails_the_write_with_the_cause_and_leaves_no_block(
    tmp_path: Path,
) -> None:
    """A real file system with 1 MiB of room (tmpfs, mounted here) fills up mid-write."""
    disk = tmp_path / "disk"
    if not mount_tmpfs(disk, "1m"):
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    try:
        rng = np.random.default_rng(11)
        dense = rng.random((1000, 500)) * (rng.random((1000, 500)) < 0.5)  # ~250,000 values
        x = da.from_array(sparse.COO.from_numpy(dense), chunks=(100, 500), asarray=False)
        # Random doubles do not compress: ~4 MB of chunks per layout against 1 MiB of room.
        with pytest.raises(OSError, match="No space left on device") as failed:
            sd.to_sporadik(x, disk / "s.zarr")
        assert failed.value.errno == errno.ENOSPC
        with pytest.raises(sd.IncompleteError):
            sd.describe(disk / "s.zarr")
        with pytest.raises(sporadik.IncompleteError):
            sporadik.describe(disk / "s.zarr")
    finally:
        unmount(disk)


def test_a_huge_declared_shape_is_refused_before_any_large_allocation(tmp_path: Path) -> None:
    """Block, group, indptr and maxima agree on 2**40 rows: a consistent lie costs a few bytes of
    JSON, and every whole read of indptr would otherwise allocate 8 TiB."""
    import tracemalloc

    path = tmp_path / "s.zarr"
    sd.to_sporadik(random_dense(np.random.default_rng(12), (50, 30), 0.2), path, axes=(0,))
    huge = 2**40
    for document, field, shape in (
        ("zarr.json", ("attributes", "sporadik", "shape"), [huge, 30]),
        ("layouts/axis0/zarr.json", ("attributes", "shape"), [huge, 30]),
        ("layouts/axis0/indptr/zarr.json", ("shape",), [huge + 1]),
        ("layouts/axis0/maxima/zarr.json", ("shape",), [huge]),
    ):
        content = json.loads((path / document).read_text())
        _set(content, field, shape, delete=False)
        (path / document).write_text(json.dumps(content))
    assert sd.describe(path).shape == (huge, 30)  # metadata alone is consistent
    tracemalloc.start()
    for attempt in (
        lambda: sd.validate(path),
        lambda: sd.from_sporadik(path),
        lambda: sd.StoreReader(path).counts(0),
        lambda: sd.StoreReader(path).maxima(0),
        lambda: sd.add_axis(path, 1),
    ):
        with pytest.raises(sd.LayoutError, match="declares 1,099,511,627,776 positions"):
            attempt()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 200 * 2**20  # numpy's buffers are traced: none as long as the axis
    row = sd.StoreReader(path).read((3, slice(None)))  # a selection reads its brackets only
    assert row.shape == (30,)


def test_an_array_of_a_store_replaced_since_it_was_opened_says_so(tmp_path: Path) -> None:
    """Reads of a store overwritten under an open array fail against the old description; the
    message says the store was replaced, not that a whole store is damaged."""
    import xarray as xr

    path = tmp_path / "s.zarr"
    rng = np.random.default_rng(1)
    first, second = (random_dense(rng, (100, 80), density) for density in (0.1, 0.5))
    sd.to_sporadik(first, path)
    lazy = sd.from_sporadik(path)
    variable = xr.open_dataset(path, engine="sporadik")["s"]
    picked = variable.isel(dim_0=slice(5, 15))
    sd.to_sporadik(second, path, overwrite=True)
    replaced = r"s\.zarr was rewritten since it was opened \(another write finished there"
    with pytest.raises(sd.StoreReplacedError, match=replaced):
        lazy.compute()
    with pytest.raises(sd.StoreReplacedError, match=replaced):
        picked.load()
    np.testing.assert_array_equal(sd.from_sporadik(path).compute().todense(), second)
