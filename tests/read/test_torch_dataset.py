"""``MinibatchDataset`` under a real torch ``DataLoader``: worker processes and ranks share an
epoch without repeating a cell, and batches are torch tensors equal to the store's rows. Skipped
where torch is not installed (an optional dependency)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sparse

import sporadik_dask as sd
from tests.helpers import random_dense

torch = pytest.importorskip("torch")

CELLS, GENES = 70, 30


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    dense = random_dense(np.random.default_rng(5), (CELLS, GENES), 0.25).astype(np.float32)
    path = tmp_path_factory.mktemp("torch") / "counts.zarr"
    sd.to_sporadik(sparse.COO.from_numpy(dense), path, chunk=64)
    return path, dense


def test_workers_and_ranks_read_each_cell_once_an_epoch_as_sparse_csr_tensors(
    written: tuple[Path, np.ndarray],
) -> None:
    path, dense = written
    seen = []
    for rank in range(2):
        dataset = sd.MinibatchDataset(path, batch_size=8, seed=3, rank=rank, ranks=2)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
        for batch in loader:
            assert batch.values.layout == torch.sparse_csr
            positions = batch.positions.numpy()
            np.testing.assert_array_equal(batch.values.to_dense().numpy(), dense[positions])
            seen.append(positions)
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(CELLS))


def test_set_epoch_reshuffles_and_the_same_epoch_repeats(written: tuple[Path, np.ndarray]) -> None:
    path, dense = written
    dataset = sd.MinibatchDataset(path, batch_size=16, seed=3, output="torch-dense")

    def epoch(number: int) -> list[int]:
        dataset.set_epoch(number)
        batches = list(torch.utils.data.DataLoader(dataset, batch_size=None))
        for batch in batches:
            np.testing.assert_array_equal(batch.values.numpy(), dense[batch.positions.numpy()])
        order: list[int] = torch.cat([batch.positions for batch in batches]).tolist()
        return order

    assert epoch(1) == epoch(1) != epoch(2)
    assert sorted(epoch(2)) == list(range(CELLS))


def test_a_dataset_without_a_seed_is_refused(written: tuple[Path, np.ndarray]) -> None:
    with pytest.raises(sd.SporadikError, match="needs a seed"):
        sd.MinibatchDataset(written[0], seed=None)
