"""The count pass's tasks: counts per position over pieces, compared with numpy's unique."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sporadik_dask.write import counting
from sporadik_dask.write.pieces import Piece


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    length=st.sampled_from([1, 7, 40, 10**6, 5 * 10**9]),
    sizes=st.lists(st.integers(0, 60), min_size=1, max_size=4),
)
def test_counts_added_over_pieces_hold_only_the_positions_holding_values(
    seed: int, length: int, sizes: list[int]
) -> None:
    """Whether a piece counts by bincount (an axis no longer than its values) or by sorting its
    positions (an axis as long as a genome's), the sum over pieces is numpy's bincount, held as
    the positions holding values and their counts: nothing as long as the axis."""
    rng = np.random.default_rng(seed)
    columns = [rng.integers(0, min(length, 100), size) * (length // 100 or 1) for size in sizes]
    counted = [
        counting.count_piece(Piece(np.stack([c, c]), np.ones(c.size)), [(1, length)])
        for c in columns
    ]
    (total,) = counting.add_counts(*counted).counts
    held, counts = np.unique(np.concatenate(columns), return_counts=True)
    np.testing.assert_array_equal(total.positions, held)
    np.testing.assert_array_equal(total.counts, counts)
    assert total.length == length and total.nnz == sum(sizes)
