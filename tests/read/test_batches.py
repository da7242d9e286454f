"""``Minibatches``: every epoch yields each selected position once, on every kind of store, each
batch equal to the store's rows (compared with numpy on the dense original) with its labels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import scipy.sparse
import sparse
import xarray as xr

import sporadik_dask as sd
from sporadik_dask.format.errors import LayoutError, SporadikError
from tests.helpers import StoreKind, random_dense

CELLS, GENES = 90, 40
KINDS = np.array(["B", "T", "NK"])


def _dense() -> np.ndarray:
    """Cells by genes, cells 5 to 8 without a value (empty runs between full ones)."""
    dense = random_dense(np.random.default_rng(3), (CELLS, GENES), 0.2).astype(np.float32)
    dense[5:9] = 0
    return dense


def _array(dense: np.ndarray) -> xr.DataArray:
    return xr.DataArray(
        sparse.COO.from_numpy(dense),
        dims=("cell", "gene"),
        coords={
            "cell": np.arange(CELLS) * 10,
            "kind": ("cell", pd.Categorical(KINDS[np.arange(CELLS) % 3])),
            "depth": ("cell", np.arange(CELLS, dtype=np.float64) / 2),
        },
        name="counts",
    )


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """A local store with small zarr chunks (a batch spans several), and its dense original."""
    dense = _dense()
    path = tmp_path_factory.mktemp("batches") / "counts.zarr"
    sd.to_sporadik(_array(dense), path, chunk=64)
    return path, dense


def _check_epoch(batches: Any, dense: np.ndarray, positions: np.ndarray) -> list[np.ndarray]:
    """Each batch's rows equal the dense rows; the epoch's positions are ``positions`` once."""
    seen = []
    for batch in batches:
        values = batch.values
        assert isinstance(values, scipy.sparse.csr_matrix)
        assert values.shape == (batch.positions.size, dense.shape[1])
        np.testing.assert_array_equal(values.toarray(), dense[batch.positions])
        seen.append(batch.positions)
    found = np.concatenate(seen) if seen else np.zeros(0, dtype=np.int64)
    np.testing.assert_array_equal(np.sort(found), np.sort(positions))
    return seen


def test_an_epoch_of_every_shuffle_yields_each_cell_once_with_its_row_on_every_store_kind(
    store_kind: StoreKind,
) -> None:
    dense = _dense()
    sd.to_sporadik(
        _array(dense), store_kind.store, **store_kind.write_options, **store_kind.options
    )
    for shuffle in ("uniform", "spans", None):
        batches = sd.Minibatches(
            store_kind.store,
            "cell",
            batch_size=16,
            shuffle=shuffle,
            seed=1,
            window=2,
            span=4,
            **store_kind.options,
        )
        assert len(batches) == 6
        _check_epoch(batches, dense, np.arange(CELLS))


def test_batches_along_genes_are_the_columns(written: tuple[Path, np.ndarray]) -> None:
    path, dense = written
    batches = sd.Minibatches(path, axis=1, batch_size=7, seed=0, prefetch=0)
    _check_epoch(batches, dense.T, np.arange(GENES))


def test_labels_are_the_coordinates_of_each_row_and_categoricals_their_codes(
    written: tuple[Path, np.ndarray],
) -> None:
    path, _ = written
    batches = sd.Minibatches(path, batch_size=32, seed=4, labels=["kind", "depth", "cell"])
    np.testing.assert_array_equal(batches.categories["kind"], np.sort(KINDS))
    for batch in batches:
        kinds = batches.categories["kind"][batch.labels["kind"]]
        np.testing.assert_array_equal(kinds, KINDS[batch.positions % 3])
        np.testing.assert_array_equal(batch.labels["depth"], batch.positions / 2)
        np.testing.assert_array_equal(batch.labels["cell"], batch.positions * 10)
    with pytest.raises(SporadikError, match="no coordinate 'gene' along 'cell'"):
        sd.Minibatches(path, labels=["gene"])


def test_a_subset_unsorted_repeated_or_a_mask_yields_its_positions_as_often_as_given(
    written: tuple[Path, np.ndarray],
) -> None:
    path, dense = written
    listed = np.array([50, 3, 3, 89, 0, 50, 50, 17, -1])
    for shuffle in ("uniform", "spans", None):
        batches = sd.Minibatches(path, batch_size=4, shuffle=shuffle, seed=2, subset=listed)
        _check_epoch(batches, dense, np.where(listed < 0, listed + CELLS, listed))
    mask = np.arange(CELLS) % 4 == 1
    batches = sd.Minibatches(path, batch_size=5, seed=2, subset=mask, window=3)
    _check_epoch(batches, dense, np.flatnonzero(mask))
    in_order = sd.Minibatches(path, batch_size=4, shuffle=None, subset=listed, prefetch=0)
    order = np.concatenate([batch.positions for batch in in_order])
    np.testing.assert_array_equal(order, np.where(listed < 0, listed + CELLS, listed))


def test_an_empty_subset_yields_nothing_and_a_batch_longer_than_the_axis_one_batch(
    written: tuple[Path, np.ndarray],
) -> None:
    path, dense = written
    assert list(sd.Minibatches(path, subset=[])) == []
    assert len(sd.Minibatches(path, subset=np.zeros(CELLS, bool))) == 0
    (whole,) = list(sd.Minibatches(path, batch_size=1000, seed=0))
    np.testing.assert_array_equal(whole.values.toarray(), dense[whole.positions])
    assert sorted(whole.positions) == list(range(CELLS))
    assert list(sd.Minibatches(path, batch_size=1000, drop_last=True)) == []


def test_drop_last_leaves_out_the_short_batch_and_shards_split_an_epoch_without_repeats(
    written: tuple[Path, np.ndarray],
) -> None:
    path, dense = written
    sizes = [batch.positions.size for batch in sd.Minibatches(path, batch_size=20, seed=0)]
    assert sizes == [20, 20, 20, 20, 10]
    kept = [b.positions.size for b in sd.Minibatches(path, batch_size=20, drop_last=True)]
    assert kept == [20] * 4
    for shuffle in ("uniform", "spans"):
        seen = []
        for shard in range(3):
            part = sd.Minibatches(
                path, batch_size=8, shuffle=shuffle, seed=9, shard=shard, shards=3, span=4
            )
            seen += _check_epoch(part, dense, part.plan(0).order)
        np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(CELLS))


def test_epochs_follow_one_another_and_a_seed_repeats_them(
    written: tuple[Path, np.ndarray],
) -> None:
    path, _ = written

    def epochs(seed: int) -> list[list[int]]:
        batches = sd.Minibatches(path, batch_size=30, seed=seed)
        return [np.concatenate([b.positions for b in batches]).tolist() for _ in range(2)]

    first, second = epochs(7)
    assert first != second and sorted(first) == sorted(second)
    assert epochs(7) == [first, second]
    assert epochs(8)[0] != first


class _Recorded(sd.Minibatches):
    """Minibatches that note when each window's read starts and ends (a window named by its
    first position, which no other window holds)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.events: list[tuple[str, int]] = []

    def _read_window(self, batches: list[np.ndarray]) -> list[sd.Batch]:
        window = int(batches[0][0])
        self.events.append(("start", window))
        read = super()._read_window(batches)
        self.events.append(("end", window))
        return read


@pytest.mark.parametrize("prefetch", [1, 2, 3])
def test_windows_read_ahead_are_at_most_the_prefetch_depth_and_the_first_is_read_alone(
    written: tuple[Path, np.ndarray], prefetch: int
) -> None:
    path, dense = written
    batches = _Recorded(path, batch_size=5, seed=4, window=2, prefetch=prefetch)
    epoch = iter(batches)
    first = next(epoch)
    np.testing.assert_array_equal(first.values.toarray(), dense[first.positions])
    # Before its first batch, the first window was read alone, then at most prefetch more begun.
    (kind, window), (then, same) = batches.events[:2]
    assert (kind, then, same) == ("start", "end", window)
    assert window == first.positions[0]
    assert len({w for kind, w in batches.events if kind == "start"}) <= prefetch + 1
    taken = 1 + sum(1 for _ in epoch)
    assert taken == -(-CELLS // 5)


def test_csr_batches_are_well_formed_and_share_their_windows_values_uncopied(
    written: tuple[Path, np.ndarray],
) -> None:
    path, dense = written
    batches = list(sd.Minibatches(path, batch_size=8, seed=2, window=4, prefetch=0))
    first, second = batches[0].values, batches[1].values
    for name in ("data", "indices"):
        shared = getattr(first, name).base
        assert shared is not None and shared is getattr(second, name).base
    for batch in batches:
        batch.values.check_format(full_check=True)  # scipy's own checks (which copy the arrays)
        np.testing.assert_array_equal(batch.values.toarray(), dense[batch.positions])


def test_dense_output_is_the_rows_as_numpy(written: tuple[Path, np.ndarray]) -> None:
    path, dense = written
    for batch in sd.Minibatches(path, batch_size=25, seed=1, output="dense"):
        assert isinstance(batch.values, np.ndarray)
        np.testing.assert_array_equal(batch.values, dense[batch.positions])


def test_csr_indices_are_int32_where_they_fit(written: tuple[Path, np.ndarray]) -> None:
    path, _ = written
    batch = next(iter(sd.Minibatches(path, batch_size=25, seed=1)))
    assert batch.values.indices.dtype == np.int32
    assert batch.values.indptr.dtype == np.int32


def test_an_axis_without_a_layout_or_a_wrong_dim_or_output_is_refused(tmp_path: Path) -> None:
    dense = _dense()
    sd.to_sporadik(_array(dense), tmp_path / "cells.zarr", axes=[0])
    with pytest.raises(LayoutError, match="add_axis"):
        sd.Minibatches(tmp_path / "cells.zarr", "gene")
    with pytest.raises(SporadikError, match="not 'cells'"):
        sd.Minibatches(tmp_path / "cells.zarr", "cells")
    with pytest.raises(SporadikError, match="output="):
        sd.Minibatches(tmp_path / "cells.zarr", output="coo")  # type: ignore[arg-type]
