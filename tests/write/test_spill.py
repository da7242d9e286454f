"""Shuffle parts spilled to local disk on the local schedulers: the same bytes as parts held in
memory, read back from the files the splits wrote, and no file left once a write has finished or
failed."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import sparse
from dask.callbacks import Callback
from dask.utils import key_split
from zarr.storage import LocalStore

import sporadik_dask as sd
from sporadik_dask.planning.budgets import held_pieces
from sporadik_dask.synthetic import counts_matrix
from sporadik_dask.write import spill, tasks
from sporadik_dask.write.plans import plan_source
from sporadik_dask.write.sources import source_of
from tests.helpers import RecordingStore, layout_files, random_dense


class _Splits(Callback):
    """What every split task of a write returned, as it ran."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.found: list[Any] = []

    def _posttask(self, key: Any, result: Any, *args: Any) -> None:
        if isinstance(key, tuple) and key_split(key[0]) == "sporadik-write-sort-split":
            self.found.append(result)


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """dask's temporary directory for the test, where spill directories are made."""
    where = tmp_path / "scratch"
    where.mkdir()
    with dask.config.set({"temporary-directory": str(where)}):
        yield where


@pytest.fixture(scope="module")
def process_pool() -> Iterator[ProcessPoolExecutor]:
    """One pool for every write on dask's process scheduler here: each write computes twice
    (its count pass, then the write), and a pool of its own per compute would start and import
    the package in two fresh processes each time (~10 s a write)."""
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


def _inputs(rank: int) -> tuple[Any, Any]:
    shape = (90, 70) if rank == 2 else (20, 15, 12)
    dense = random_dense(np.random.default_rng(rank), shape, 0.2)
    chunks = tuple(max(s // 3, 1) for s in shape)
    return dense, da.from_array(sparse.COO.from_numpy(dense), chunks=chunks, asarray=False)


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["threads", "sync", "processes"])
@pytest.mark.parametrize("rank", [2, 3])
def test_spilled_parts_give_the_bytes_of_parts_held_in_memory(
    tmp_path: Path, scratch: Path, rank: int, scheduler: str, request: pytest.FixtureRequest
) -> None:
    dense, x = _inputs(rank)
    with dask.config.set({"sporadik.spill-bytes": -1}):
        sd.to_sporadik(x, tmp_path / "loaded.zarr", chunk=40, partition_bytes=3_000)
    splits = _Splits()
    where = {"scheduler": scheduler}
    if scheduler == "processes":
        where["pool"] = request.getfixturevalue("process_pool")
    with dask.config.set({"sporadik.spill-bytes": 0, **where}), splits:
        sd.to_sporadik(x, tmp_path / "spilled.zarr", chunk=40, partition_bytes=3_000)
    if scheduler != "processes":  # a callback sees the results of tasks run in this process
        assert splits.found and all(
            isinstance(part, spill.SpilledPart) for parts in splits.found for part in parts
        )
    assert layout_files(tmp_path / "loaded.zarr") == layout_files(tmp_path / "spilled.zarr")
    stored = sd.from_sporadik(tmp_path / "spilled.zarr").compute()
    np.testing.assert_array_equal(stored.todense(), dense)
    assert list(scratch.iterdir()) == []


def test_a_write_that_fails_removes_its_spilled_parts(tmp_path: Path, scratch: Path) -> None:
    _, x = _inputs(2)
    store = RecordingStore(LocalStore(tmp_path / "s.zarr"), fail_on="layouts/axis1/data/c/1")
    splits = _Splits()
    with dask.config.set({"sporadik.spill-bytes": 0}), splits, pytest.raises(OSError):
        sd.to_sporadik(x, store, chunk=32)
    assert splits.found
    assert list(scratch.iterdir()) == []


def test_two_spilled_writes_in_one_dask_compute_remove_their_parts(
    tmp_path: Path, scratch: Path
) -> None:
    dense, x = _inputs(2)
    with dask.config.set({"sporadik.spill-bytes": 0}):
        first = sd.to_sporadik(x, tmp_path / "a.zarr", chunk=16, compute=False)
        second = sd.to_sporadik(x, tmp_path / "b.zarr", chunk=16, compute=False)
        dask.compute(first, second)
    assert list(scratch.iterdir()) == []
    for name in ("a.zarr", "b.zarr"):
        np.testing.assert_array_equal(sd.from_sporadik(tmp_path / name).compute().todense(), dense)


def test_a_budget_keeps_the_first_pieces_parts_in_memory_and_spills_the_rest(
    tmp_path: Path, scratch: Path
) -> None:
    dense, x = _inputs(2)
    with dask.config.set({"sporadik.spill-bytes": -1}):
        sd.to_sporadik(x, tmp_path / "loaded.zarr", chunk=40, partition_bytes=3_000)
    splits = _Splits()
    with dask.config.set({"sporadik.spill-bytes": 4_000, "scheduler": "sync"}), splits:
        sd.to_sporadik(x, tmp_path / "both.zarr", chunk=40, partition_bytes=3_000)
    kinds = {type(part) for parts in splits.found for part in parts}
    assert kinds == {tasks.Part, spill.SpilledPart}
    assert layout_files(tmp_path / "loaded.zarr") == layout_files(tmp_path / "both.zarr")
    np.testing.assert_array_equal(
        sd.from_sporadik(tmp_path / "both.zarr").compute().todense(), dense
    )
    assert list(scratch.iterdir()) == []


def test_a_pending_write_dropped_uncomputed_leaves_no_spill_directory(
    tmp_path: Path, scratch: Path
) -> None:
    _, x = _inputs(2)
    with dask.config.set({"sporadik.spill-bytes": 0}):
        write = sd.to_sporadik(x, tmp_path / "a.zarr", compute=False)
    assert isinstance(write, sd.StoreWrite)
    # splits ran (here, and on a worker into the store), then the write was dropped: the
    # directories go with it
    local, shared = write._spill
    assert local.startswith(str(scratch)) and shared.startswith(str(tmp_path / "a.zarr"))
    for made in (local, shared):
        Path(made).mkdir(parents=True)
        (Path(made) / "x.parts").write_bytes(b"0")
    del write
    assert list(scratch.iterdir()) == []
    assert not Path(shared).exists()


def test_the_csc_layout_of_row_blocks_spills_before_its_streaming_csr_layout() -> None:
    # 20 row blocks: a CSR partition gathers from one or two of them, a CSC one from all 20.
    x = counts_matrix(cells=2_000, genes=100, density=0.2, rows_per_chunk=100)
    source = source_of(x)
    plans, kept = plan_source(
        source,
        (0, 1),
        duplicates="sum",
        chunk=None,
        byte_addressable=False,
        partition_bytes=40_000,
    )
    spill.remove(kept.pieces.kept)  # the pieces the count pass kept: no write takes them
    pieces = len(source.pieces.keys)
    waits = plans[1].nnz * 12  # int32 position and index, float32 value: all of it waits
    for budget, held in (
        (waits - 1, [20, 19]),  # the last piece's parts go to disk
        (waits // 4, [20, 5]),  # a quarter of the pieces keep theirs in memory
        (waits, [20, 20]),
        (0, [0, 0]),
        (-1, [20, 20]),
    ):
        with dask.config.set({"sporadik.spill-bytes": budget}):
            assert [held_pieces(plan, pieces) for plan in plans.values()] == held


class _Starts(Callback):
    """The order tasks of a write started in, and how many had started when each ended."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.keys: list[Any] = []
        self.ended: dict[Any, int] = {}

    def _pretask(self, key: Any, *args: Any) -> None:
        self.keys.append(key)

    def _posttask(self, key: Any, *args: Any) -> None:
        self.ended[key] = len(self.keys)


@pytest.mark.parametrize("scheduler", ["threads", "sync"])
def test_a_local_write_sorts_a_streaming_partition_before_the_last_piece_is_read(
    tmp_path: Path, scheduler: str
) -> None:
    # 30 row blocks of ~2,000 values, under a quarter of a partition: 15 CSR partitions of two
    # whole blocks each. Run as the graph's outputs, with each block split for the CSR layout
    # first, dask sorts each CSR partition as soon as its two blocks are split (measured: after
    # 2, 4, 6, ... blocks). With partitions straddling blocks and the layouts split
    # independently, the first sort came after 6 to 7 blocks; with one task joining every
    # write, after 22 to 23.
    x = counts_matrix(cells=3_000, genes=100, density=0.2, rows_per_chunk=100)
    write = sd.to_sporadik(x, tmp_path / "a.zarr", compute=False, partition_bytes=200_000)
    assert isinstance(write, sd.StoreWrite)
    starts = _Starts()
    with dask.config.set({"sporadik.spill-bytes": -1, "scheduler": scheduler}), starts:
        write.compute()
    names = [str(key[0]) if isinstance(key, tuple) else str(key) for key in starts.keys]
    # the pieces as the count pass kept them, read from disk
    pieces = [i for i, name in enumerate(names) if name.startswith("sporadik-kept")]
    csr = [
        i
        for i, name in enumerate(names)
        if key_split(name) == "sporadik-write-sort" and name.endswith("-0")
    ]
    assert len(pieces) == 30 and len(csr) == 15
    # Blocks are read while the write's first task lays the store out, and no partition is
    # sorted (written) before it ends: on threads those blocks may come first, more of them on
    # a busy machine (measured: up to 10). Count the blocks started after it ended.
    (laid_out,) = [key for key in starts.ended if str(key).startswith("sporadik-skeleton-")]
    early = sum(piece < starts.ended[laid_out] for piece in pieces)
    assert scheduler != "sync" or early <= 2, early
    read_before = [max(0, sum(piece < sort for piece in pieces) - early) for sort in csr]
    slack = 1 if scheduler == "sync" else 2  # on threads, the other thread's block
    assert all(read <= 2 * (k + 1) + slack for k, read in enumerate(read_before)), read_before
    stored = sd.from_sporadik(tmp_path / "a.zarr").compute()
    np.testing.assert_array_equal(stored.todense(), x.compute().todense())


def test_a_spill_directory_that_cannot_be_written_says_what_to_set(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_bytes(b"")  # a file where the directory should be made
    pairs, data = np.zeros((2, 3), dtype=np.int32), np.zeros(3, dtype=np.float32)
    with pytest.raises(OSError, match=r"temporary-directory.*sporadik\.spill-bytes"):
        spill.write_parts(str(blocked / "parts"), pairs, data, [0, 3], [0])


def test_a_cut_spill_file_is_an_error_naming_it(tmp_path: Path) -> None:
    pairs = np.arange(20, dtype=np.int32).reshape(2, 10)
    data = np.arange(10, dtype=np.float32)
    parts = spill.write_parts(str(tmp_path), pairs, data, [0, 4, 10], [0, 0])
    both = [parts[1], tasks.Part(pairs[:, :4], data[:4])]
    joined = spill.PartReader(both).joined(both)
    np.testing.assert_array_equal(joined[0], np.concatenate([pairs[:, 4:], pairs[:, :4]], axis=1))
    np.testing.assert_array_equal(joined[1], np.r_[data[4:], data[:4]])
    with open(parts[0].path, "r+b") as file:
        file.truncate(60)
    with pytest.raises(OSError, match="ended 20 bytes early"):
        spill.PartReader([parts[1]]).whole(parts[1])
