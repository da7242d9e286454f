"""Read blocks are sized by sparse bytes: enough to keep every core busy, one for a tiny store,
and none past dask's ``array.chunk-size``, whether opened through xarray or ``from_sporadik``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

import dask
import dask.array as da
import dask.system
import numpy as np
import numpy.typing as npt
import pytest
import xarray as xr

import sporadik_dask as sd
from sporadik_dask.planning import budgets
from sporadik_dask.synthetic import counts_matrix


class MatrixSize(TypedDict):
    """The arguments of ``counts_matrix`` saying how big and how sparse it is."""

    cells: int
    genes: int
    density: float
    seed: int


#: 2.0 M float32 values (40 MB as COO): past 4 blocks a core of 4 MiB on 2 cores.
BIG = MatrixSize(cells=50_000, genes=1_000, density=0.04, seed=1)
CORES = 2


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("budgets") / "big.zarr"
    sd.to_sporadik(counts_matrix(**BIG), path, axes=(0,))
    return path


@pytest.fixture
def two_cores(monkeypatch: pytest.MonkeyPatch) -> int:
    """The core count the budget sees, fixed so the test means the same on any machine."""
    monkeypatch.setattr(dask.system, "CPU_COUNT", CORES)
    return CORES


@pytest.fixture
def tiny_store(tmp_path: Path) -> Path:
    dense = np.zeros((40, 30), dtype=np.float64)
    dense[::3, ::4] = 1.5
    sd.to_sporadik(dense, tmp_path / "tiny.zarr")
    return tmp_path / "tiny.zarr"


def _opened(path: Path, how: str) -> da.Array:
    """The store's dask array as ``how`` opens it."""
    if how == "from_sporadik":
        return sd.from_sporadik(path)
    chunks: dict[str, int] | str = {} if how == "chunks={}" else "auto"
    data = xr.open_dataset(path, engine="sporadik", chunks=chunks)[path.stem].data
    assert isinstance(data, da.Array)
    return data


HOWS = ["chunks={}", "chunks='auto'", "from_sporadik"]


@pytest.mark.parametrize("how", HOWS)
def test_a_store_big_enough_gets_four_blocks_a_core_whole_along_genes(
    big_store: Path, two_cores: int, how: str
) -> None:
    array = _opened(big_store, how)
    assert array.numblocks[0] >= 4 * two_cores
    assert array.numblocks[1] == 1


@pytest.mark.parametrize("how", HOWS)
def test_a_tiny_store_is_one_block(tiny_store: Path, two_cores: int, how: str) -> None:
    assert _opened(tiny_store, how).numblocks == (1, 1)


@pytest.mark.parametrize("how", HOWS)
def test_no_block_holds_more_than_array_chunk_size_of_sparse_bytes(
    big_store: Path, two_cores: int, how: str
) -> None:
    limit = 2**20
    with dask.config.set({"array.chunk-size": limit}):
        array = _opened(big_store, how)
    assert array.numblocks[0] > 1
    assert _sparse_bytes_per_block(big_store, array).max() <= limit


def test_chunks_auto_through_xarray_values_cut_as_chunks_empty(
    big_store: Path, two_cores: int
) -> None:
    auto = _opened(big_store, "chunks='auto'")
    preferred = _opened(big_store, "chunks={}")
    assert auto.chunks == preferred.chunks


def test_auto_chunks_of_other_variables_stay_dasks(big_store: Path) -> None:
    xr.open_dataset(big_store, engine="sporadik")  # installs the sporadik rule
    dense = xr.DataArray(np.zeros((4000, 4000)), dims=("a", "b")).chunk("auto")
    assert dense.data.chunks == dask.array.zeros((4000, 4000), chunks="auto").chunks


def _sparse_bytes_per_block(path: Path, array: da.Array) -> npt.NDArray[Any]:
    counts = sd.StoreReader(path).counts(0)
    edges = np.cumsum((0, *array.chunks[0]))
    per_value = budgets.sparse_bytes_per_value(array.dtype, array.ndim)
    return np.add.reduceat(counts, edges[:-1]) * per_value


def test_a_block_never_falls_under_the_minimum_when_cores_are_many(
    big_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dask.system, "CPU_COUNT", 512)
    array = _opened(big_store, "from_sporadik")
    assert 1 < array.numblocks[0] < 4 * 512
    assert _sparse_bytes_per_block(big_store, array)[:-1].min() >= budgets.MIN_BLOCK_BYTES * 0.99


def test_block_counts_follow_the_three_rules(two_cores: int) -> None:
    f4 = np.dtype("float32")  # 20 sparse bytes a value at rank 2
    least = budgets.MIN_BLOCK_BYTES // 20
    most = dask.utils.parse_bytes(dask.config.get("array.chunk-size")) // 20
    assert budgets.block_count(10, f4, 2) == 1  # tiny: one block
    assert budgets.block_count(3 * least, f4, 2) == 3  # none under the minimum
    assert budgets.block_count(100 * least, f4, 2) == 4 * two_cores  # four a core
    assert budgets.block_count(100 * most, f4, 2) == 100  # none over array.chunk-size
    with dask.config.set({"array.chunk-size": "1MiB"}):  # the cap wins over the minimum
        assert budgets.block_count(10**6, f4, 2) == -(-(10**6) * 20 // 2**20)


def test_a_write_partition_holds_partition_bytes_of_keys_and_values() -> None:
    assert budgets.partition_values(np.dtype("float64"), 2**20) == 2**20 // 24
    with dask.config.set({"sporadik.partition-bytes": 2**21}):
        assert budgets.partition_values(np.dtype("int32"), None) == 2**21 // 20
