"""The count pass's and the write's graphs, read without computing: keys, dependencies and names
are what a write needs, and two different writes share no key."""

from __future__ import annotations

import itertools
import pickle
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import numpy.typing as npt
import pytest
import sparse
import zarr
from dask.utils import key_split

import sporadik_dask as sd
from sporadik_dask.planning.plan import plan_layout
from sporadik_dask.synthetic import counts_matrix
from sporadik_dask.write import array_refs, counting, graph, piece_graphs, shuffle, tasks
from sporadik_dask.write.skeleton import create_layout
from tests.helpers import random_dense


def test_the_count_pass_adds_counts_in_a_tree_no_wider_than_its_fan_in() -> None:
    pieces = [("piece", i) for i in range(70)]
    layer = graph._count_layer("c", pieces, [], ((0, 5),))
    adds = [task for key, task in layer.items() if key != "c" and key[1] > 0]
    assert all(len(task) - 1 <= graph.COUNT_FAN_IN for task in adds)
    # 70 counts -> 9 -> 2 -> 1.
    assert sorted({key[1] for key in layer if key != "c"}) == [0, 1, 2, 3]
    assert layer["c"][0] is counting.tally


def test_counting_gives_each_axis_its_values_per_position_and_the_repeats() -> None:
    dense = random_dense(np.random.default_rng(1), (30, 20), 0.3)
    x = da.from_array(sparse.COO.from_numpy(dense), chunks=(7, 6), asarray=False)
    tally = graph.count_graph(piece_graphs.pieces_of_blocks(x), x.shape, (0, 1)).compute()
    assert isinstance(tally, counting.Tally)
    for k, axis in enumerate((1, 0)):
        held = np.flatnonzero(np.count_nonzero(dense, axis=axis))
        np.testing.assert_array_equal(tally.counts[k].positions, held)
        np.testing.assert_array_equal(tally.counts[k].counts, np.count_nonzero(dense, axis)[held])
    assert tally.repeats == 0


def _targets(path: Path, plans: dict[int, Any]) -> dict[int, dict[str, array_refs.ArrayRef]]:
    layouts = zarr.open_group(path, mode="w", zarr_format=3).create_group("layouts")
    return {
        axis: {
            name: array_refs.ArrayRef.of(a)
            for name, a in create_layout(layouts, plan, False, "zstd").items()
        }
        for axis, plan in plans.items()
    }


def _plans(dense: npt.NDArray[Any], chunk: int) -> dict[int, Any]:
    return {
        axis: plan_layout(
            dense.shape,
            axis,
            (1 - axis,),
            np.count_nonzero(dense, axis=1 - axis),
            dense.dtype,
            partition_values=40,
            chunk=chunk,
        )
        for axis in (0, 1)
    }


@pytest.fixture
def pieces() -> tuple[npt.NDArray[Any], piece_graphs.Pieces]:
    dense = random_dense(np.random.default_rng(2), (40, 30), 0.3)
    x = da.from_array(sparse.COO.from_numpy(dense), chunks=(10, 15), asarray=False)
    return dense, piece_graphs.pieces_of_blocks(x)


def _write_layer(
    path: Path, pieces: tuple[npt.NDArray[Any], piece_graphs.Pieces]
) -> tuple[Any, list[Any]]:
    """The write layer of ``pieces`` into a new store at ``path`` (chunks of 16), and its
    writes' keys."""
    dense, found = pieces
    plans = _plans(dense, 16)
    built, writes, _ = graph.write_graph(found, plans, _targets(path, plans))
    return built.layers[list(built.layers)[-1]], writes


def test_writes_to_two_stores_share_no_key_and_the_same_write_twice_shares_all(
    tmp_path: Path, pieces: tuple[npt.NDArray[Any], piece_graphs.Pieces]
) -> None:
    dense, found = pieces
    plans = _plans(dense, 16)
    _, first, _ = graph.write_graph(found, plans, _targets(tmp_path / "a.zarr", plans))
    _, second, _ = graph.write_graph(found, plans, _targets(tmp_path / "b.zarr", plans))
    _, again, _ = graph.write_graph(found, plans, _targets(tmp_path / "a.zarr", plans))
    assert not set(first) & set(second)
    assert first == again


def test_writes_of_other_chunking_to_arrays_at_the_same_paths_share_no_key(
    tmp_path: Path, pieces: tuple[npt.NDArray[Any], piece_graphs.Pieces]
) -> None:
    dense, found = pieces
    small, large = _plans(dense, 16), _plans(dense, 64)
    _, first, _ = graph.write_graph(found, small, _targets(tmp_path / "a.zarr", small))
    _, second, _ = graph.write_graph(found, large, _targets(tmp_path / "a.zarr", large))
    assert not set(first) & set(second)


def test_a_write_graph_holds_no_open_array_and_pickles_small(
    tmp_path: Path, pieces: tuple[npt.NDArray[Any], piece_graphs.Pieces]
) -> None:
    layer, _ = _write_layer(tmp_path / "a.zarr", pieces)

    def arguments(task: object) -> Iterator[object]:
        if isinstance(task, tuple | list):
            for item in task:
                yield from arguments(item)
        else:
            yield task

    found_args = [a for task in layer.values() for a in arguments(task)]
    assert not any(isinstance(a, zarr.Array) for a in found_args)
    assert any(isinstance(a, array_refs.ArrayRef) for a in found_args)
    assert len(pickle.dumps(dict(layer))) < 200_000


def _regions_written(layer: Any) -> dict[str, list[tuple[int, int]]]:
    """Every ``[start, stop)`` the layer's tasks write, by array path."""
    written: dict[str, list[tuple[int, int]]] = {}
    for func, *args in layer.values():
        if func is tasks.write_shared:
            for ref, start, stop, _ in args[0]:
                written.setdefault(ref.path, []).append((start, stop))
        elif func is tasks.write_partition:
            for ref, start, stop, *_ in args[0]:
                written.setdefault(ref.path, []).append((start, stop))
    return written


def test_every_chunk_is_written_once_by_a_sort_or_by_a_task_joining_edges(
    tmp_path: Path, pieces: tuple[npt.NDArray[Any], piece_graphs.Pieces]
) -> None:
    dense, _ = pieces
    layer, writes = _write_layer(tmp_path / "a.zarr", pieces)
    store = zarr.open_group(tmp_path / "a.zarr", mode="r")
    written = _regions_written(layer)
    for path, regions in written.items():
        cuts = sorted(regions)
        array = store[path]
        assert isinstance(array, zarr.Array)
        assert cuts[0][0] == 0 and cuts[-1][1] == array.shape[0]
        assert all(a[1] == b[0] for a, b in itertools.pairwise(cuts))  # no gap, no overlap
    assert len(written) == 2 * 4  # indices, data, maxima, indptr of both layouts
    # the sorts write the regions they fill alone: most of the values
    inner = sum(
        stop - start
        for func, *args in layer.values()
        if func is tasks.write_partition
        for _, start, stop, array, *_ in args[0]
        if array == "data"
    )
    assert inner > np.count_nonzero(dense)  # of both layouts' data together
    for key in writes:
        func, *args = layer[key]
        assert func in (tasks.write_shared, tasks.wrote)
        if func is tasks.wrote:
            assert layer[args[0]][0] is tasks.write_partition
            continue
        for arg in args[1:]:
            edges, sorted_, *_ = layer[arg]
            assert edges is tasks.edges and layer[sorted_][0] is tasks.write_partition


def _sent_bytes(collection: Any) -> int:
    """What ``dask.compute(collection)`` sends to a distributed scheduler, measured as
    distributed measures it for its "Sending large graph" warning."""
    from dask._expr import FinalizeCompute
    from dask.base import collections_to_expr
    from distributed.protocol.serialize import Serialized, serialize, to_serialize
    from distributed.utils import nbytes

    expr = FinalizeCompute(collections_to_expr([collection], True)).optimize()
    sent = Serialized(*serialize(to_serialize(expr), on_error="raise"))
    return sum(map(nbytes, [sent.header, *sent.frames]))


def test_the_graph_a_write_sends_to_a_scheduler_grows_no_faster_than_its_values(
    tmp_path: Path,
) -> None:
    # Twice the cells: twice the pieces and twice the partitions of each layout, so a task per
    # (piece, partition) pair would be four times as many.
    sizes, partitions = [], []
    for factor in (1, 2, 4):
        x = counts_matrix(cells=400 * factor, genes=60, density=0.1, rows_per_chunk=50)
        write = sd.to_sporadik(x, tmp_path / f"{factor}.zarr", compute=False, partition_bytes=5_000)
        sizes.append(_sent_bytes(write.written()))
        sorts = Counter(
            k[0] for k in dict(write.__dask_graph__()) if key_split(k[0]) == "sporadik-write-sort"
        )
        partitions.append(min(sorts.values()))
    assert partitions[0] >= 8 and partitions[2] >= 3 * partitions[0]
    assert sizes[1] <= 2 * sizes[0] + 2_048
    assert sizes[2] <= 2 * sizes[1] + 2_048


def test_a_layout_of_row_blocks_sorts_each_row_partition_from_the_blocks_it_meets_alone(
    tmp_path: Path,
) -> None:
    # Rows of 50 a block, partitions of about 50 rows: each row partition waits for one or two
    # blocks (so the CSR layout of a CSR input streams), each column partition for every block.
    x = counts_matrix(cells=400, genes=60, density=0.2, rows_per_chunk=50)
    write = sd.to_sporadik(x, tmp_path / "a.zarr", compute=False, partition_bytes=4_000)
    assert isinstance(write, sd.StoreWrite)
    layer = dict(write.__dask_graph__())
    sorts = {
        axis: [
            k
            for k in layer
            if key_split(k[0]) == "sporadik-write-sort" and k[0].endswith(f"-{axis}")
        ]
        for axis in (0, 1)
    }
    assert len(sorts[0]) >= 6 and len(sorts[1]) >= 2
    blocks = len(x.chunks[0])
    for axis, gathered in ((0, (1, 2)), (1, (blocks,))):
        for key in sorts[axis]:
            parts = [a for a in layer[key] if isinstance(a, tuple) and a in layer]
            assert len(parts) in gathered
    write.compute()
    stored = sd.from_sporadik(tmp_path / "a.zarr").compute()
    np.testing.assert_array_equal(stored.todense(), x.compute().todense())


def test_a_deferred_layer_pickles_as_its_call_and_makes_the_same_tasks_again(
    tmp_path: Path, pieces: tuple[npt.NDArray[Any], piece_graphs.Pieces]
) -> None:
    layer, writes = _write_layer(tmp_path / "a.zarr", pieces)
    assert isinstance(layer, shuffle.Deferred) and not layer.is_materialized()
    before = len(pickle.dumps(layer))
    made = dict(layer)
    assert layer.is_materialized() and set(writes) <= set(made)
    assert len(pickle.dumps(layer)) == before
    again = pickle.loads(pickle.dumps(layer))
    assert not again.is_materialized()
    assert again.keys() == made.keys()
    assert pickle.dumps(dict(again)) == pickle.dumps(made)


def test_each_kind_of_write_task_has_a_prefix_of_its_own(tmp_path: Path) -> None:
    """distributed estimates a task's duration by its key's prefix (``key_split``) and places
    and steals tasks by that estimate: a part's ``getitem`` must not share its prefix with the
    sorts, nor a region's write with the splits."""
    x = counts_matrix(cells=400, genes=60, density=0.1, rows_per_chunk=50)
    write = sd.to_sporadik(x, tmp_path / "s.zarr", compute=False, partition_bytes=5_000)
    kinds = Counter(key_split(key) for key in dict(write.__dask_graph__()))
    for kind in ("sort-split", "sort-part", "sort", "wrote", "take", "shared"):
        assert kinds[f"sporadik-write-{kind}"] > 0, kinds
    assert "sporadik-write" not in kinds
