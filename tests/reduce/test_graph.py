"""The reductions' graphs: keys named by everything their tasks depend on, trees no wider than
their fan-in, each block read once at its offset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import sparse

import sporadik_dask as sd
from sporadik_dask.reduce import graph
from sporadik_dask.reduce.blocks import reduce_dask
from sporadik_dask.reduce.fields import Op
from sporadik_dask.reduce.spans import reduce_store_dask
from sporadik_dask.reduce.target import Grouping, Target
from tests.helpers import random_dense


def _keys(x: da.Array) -> set[Any]:
    return set(x.__dask_graph__().keys())


def _target(shape: tuple[int, ...], seed: int | None = None) -> Target:
    """The target of a reduction over axis 1 of ``shape``, grouping axis 0 by ``seed``'s codes
    (not grouped when ``seed`` is None)."""
    if seed is None:
        return Target(shape, (1,))
    codes = np.random.default_rng(seed).integers(-1, 3, shape[0])
    return Target(shape, (1,), Grouping(0, codes, 3))


def test_store_reductions_of_two_stores_or_groupings_share_no_key(tmp_path: Path) -> None:
    readers = []
    for i in range(2):
        dense = random_dense(np.random.default_rng(i), (40, 30), 0.3)
        sd.to_sporadik(dense, tmp_path / f"{i}.zarr", chunk=16)
        readers.append(sd.StoreReader(tmp_path / f"{i}.zarr"))

    def reduced(reader: sd.StoreReader, seed: int | None, op: Op = "sum") -> set[Any]:
        target = _target((40, 30), seed)
        return _keys(reduce_store_dask(reader, op, target, 3, skipna=True))

    first = reduced(readers[0], 0)
    assert first == reduced(readers[0], 0)  # the same reduction twice: the same keys
    others = [reduced(readers[1], 0), reduced(readers[0], 1), reduced(readers[0], None)]
    for other in [*others, reduced(readers[0], 0, "mean")]:
        assert not first & other


def test_grouped_reductions_of_two_arrays_or_groupings_share_no_key_beyond_their_input() -> None:
    dense = random_dense(np.random.default_rng(3), (40, 30), 0.3)
    x = da.from_array(sparse.COO.from_numpy(dense), chunks=(15, 30), asarray=False)
    y = da.from_array(sparse.COO.from_numpy(dense * 2), chunks=(15, 30), asarray=False)

    def built(array: da.Array, seed: int, dense: bool = True) -> set[Any]:
        target = _target((40, 30), seed)
        reduced = reduce_dask(array, "sum", target, skipna=True, dense=dense)
        return _keys(reduced) - _keys(array)

    first = built(x, 0)
    assert first and first == built(x, 0)
    for other in (built(y, 0), built(x, 1), built(x, 0, dense=False)):
        assert not first & other


def test_a_reduction_of_blocks_reads_each_block_once_at_its_offset_and_merges_in_a_tree() -> None:
    chunks = ((4,) * 20, (5, 5))  # 40 blocks: 5 merges, then 1, under a fan-in of 8
    leaves = graph._block_leaves(("fields", "op"), "x", chunks)
    assert [leaf[2] for leaf in leaves] == [("x", i, j) for i in range(20) for j in range(2)]
    assert [leaf[3] for leaf in leaves] == [(4 * i, 5 * j) for i in range(20) for j in range(2)]
    layer = graph._tree_reduction("g", leaves, ("merge", "op"), ("finish", "op"))
    assert [layer[("g", 0, i)] for i in range(40)] == leaves
    merges = [key for key in layer if isinstance(key, tuple) and key[1] > 0]
    assert merges == [("g", 1, j) for j in range(5)] + [("g", 2, 0)]
    assert all(layer[key][:2] == ("merge", "op") for key in merges)
    assert all(len(layer[key]) - 2 <= graph.REDUCE_FAN_IN for key in merges)
    assert layer["g"] == ("finish", "op", ("g", 2, 0))


def test_a_reduction_with_no_merge_hands_every_leaf_to_one_finishing_task() -> None:
    leaves = [("fields", "op", (i, i + 1)) for i in range(20)]
    layer = graph._tree_reduction("g", leaves, None, ("place", "shape"))
    assert [layer[("g", 0, i)] for i in range(20)] == leaves
    assert layer["g"] == ("place", "shape", *[("g", 0, i) for i in range(20)])
    assert len(layer) == 21  # the leaves and the one task laying them down
