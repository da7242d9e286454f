"""The epoch planner: every selected position once an epoch over all shards, equal shards under
``drop_last``, reproducible from the seed, and spans of neighbours in the block shuffle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sporadik_dask.format.errors import SporadikError
from sporadik_dask.planning.minibatches import plan_epoch, selected_positions


def _shards(positions: np.ndarray, shards: int, **options: object) -> list[np.ndarray]:
    return [
        plan_epoch(positions, shard=s, shards=shards, **options).order  # type: ignore[arg-type]
        for s in range(shards)
    ]


@given(
    size=st.integers(0, 300),
    repeats=st.booleans(),
    shards=st.integers(1, 6),
    batch_size=st.integers(1, 40),
    window=st.integers(1, 5),
    span=st.integers(1, 9),
    shuffle=st.sampled_from(["uniform", "spans", None]),
    seed=st.integers(0, 2**32),
)
def test_the_shards_of_an_epoch_hold_every_selected_position_once(
    size: int,
    repeats: bool,
    shards: int,
    batch_size: int,
    window: int,
    span: int,
    shuffle: str | None,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    positions = rng.integers(0, 50, size) if repeats else rng.permutation(size)
    options = {"batch_size": batch_size, "shuffle": shuffle, "seed": seed, "epoch": 3}
    parts = _shards(positions, shards, window=window, span=span, **options)
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.sort(positions))
    kept = _shards(positions, shards, window=window, span=span, drop_last=True, **options)
    assert len({part.size for part in kept}) == 1
    assert kept[0].size % batch_size == 0
    dropped = size - shards * kept[0].size
    unit = span if shuffle == "spans" else 1  # shards are dealt whole spans
    assert 0 <= dropped < shards * (batch_size + unit)
    for part, whole in zip(kept, parts, strict=True):
        assert np.isin(part, whole).all()


def test_an_epoch_is_the_same_for_the_same_seed_and_epoch_and_another_for_others() -> None:
    positions = np.arange(1000)

    def order(seed: int, epoch: int) -> np.ndarray:
        return plan_epoch(positions, batch_size=32, shuffle="uniform", seed=seed, epoch=epoch).order

    np.testing.assert_array_equal(order(5, 2), order(5, 2))
    assert not np.array_equal(order(5, 2), order(5, 3))
    assert not np.array_equal(order(5, 2), order(6, 2))


def test_the_block_shuffle_mixes_spans_of_neighbours_within_each_window() -> None:
    positions = np.arange(4096)
    epoch = plan_epoch(
        positions, batch_size=64, shuffle="spans", seed=1, epoch=0, span=32, window=4
    )
    windows = list(epoch.windows())
    assert len(windows) == 16 and all(len(w) == 4 for w in windows)
    for batches in windows:
        spans = np.unique(np.concatenate(batches) // 32)
        assert spans.size == 8  # 256 positions: 8 whole spans of 32 neighbours
        assert len(np.unique(batches[0] // 32)) > 1  # a batch mixes spans
    assert not np.array_equal(epoch.order, positions)


@given(
    batches=st.integers(0, 120),
    window=st.integers(1, 50),
    shuffle=st.sampled_from(["uniform", "spans", None]),
)
def test_windows_are_as_few_as_the_window_allows_and_as_even_as_batches_allow(
    batches: int, window: int, shuffle: str | None
) -> None:
    epoch = plan_epoch(
        np.arange(batches * 3),
        batch_size=3,
        shuffle=shuffle,  # type: ignore[arg-type]
        seed=0,
        epoch=0,
        window=window,
        span=2,
    )
    sizes = [len(w) for w in epoch.windows()]
    assert sum(sizes) == batches and all(size <= window for size in sizes)
    assert len(sizes) == -(-batches // window)
    if sizes:  # no window longer than an even share, so the last is not a short one
        assert max(sizes) == -(-batches // len(sizes))


def test_no_shuffle_keeps_the_order_given_and_windows_cut_it_into_batches() -> None:
    positions = np.array([9, 3, 3, 7, 1])
    epoch = plan_epoch(positions, batch_size=2, shuffle=None, seed=0, epoch=0, window=2)
    assert len(epoch) == 3
    windows = [[b.tolist() for b in w] for w in epoch.windows()]
    assert windows == [[[9, 3], [3, 7]], [[1]]]


def test_a_subset_is_a_mask_or_positions_counted_from_either_end() -> None:
    np.testing.assert_array_equal(selected_positions(None, 3), [0, 1, 2])
    np.testing.assert_array_equal(selected_positions(np.array([1, 0, 1], bool), 3), [0, 2])
    np.testing.assert_array_equal(selected_positions([2, -1, 0, 2], 4), [2, 3, 0, 2])
    assert selected_positions([], 4).size == 0
    with pytest.raises(SporadikError, match="mask of shape"):
        selected_positions(np.ones(4, bool), 3)
    with pytest.raises(SporadikError, match="nothing to read"):
        selected_positions([5], 4)
    with pytest.raises(SporadikError, match="float"):
        selected_positions([0.5], 4)


def test_a_shard_outside_the_shards_or_a_batch_of_nothing_is_refused() -> None:
    with pytest.raises(SporadikError, match="shard 2 of 2"):
        plan_epoch(np.arange(4), batch_size=1, shuffle=None, seed=0, epoch=0, shard=2, shards=2)
    with pytest.raises(SporadikError, match="at least 1"):
        plan_epoch(np.arange(4), batch_size=0, shuffle=None, seed=0, epoch=0)
    with pytest.raises(SporadikError, match="choose"):
        plan_epoch(np.arange(4), batch_size=1, shuffle="random", seed=0, epoch=0)  # type: ignore[arg-type]
