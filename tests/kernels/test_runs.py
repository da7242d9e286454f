"""Runs gathered from a fetched table: numpy's gather, without its per-value index arrays."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sporadik_dask.kernels.runs import gather_runs


@settings(max_examples=100, deadline=None)
@given(
    size=st.integers(0, 40),
    runs=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 8)), max_size=12),
    dtype=st.sampled_from([np.float32, np.int64, np.float16, np.uint16]),
)
def test_gathered_runs_are_numpys_stretches_concatenated(
    size: int, runs: list[tuple[int, int]], dtype: type
) -> None:
    table: np.ndarray = np.arange(size).astype(dtype)
    kept = [(start, min(length, size - start)) for start, length in runs if start < size]
    starts = np.array([start for start, _ in kept], dtype=np.int64)
    lengths = np.array([length for _, length in kept], dtype=np.int64)
    expected = np.concatenate(
        [table[start : start + length] for start, length in kept] + [table[:0]]
    )
    at = np.cumsum(lengths) - lengths
    order = np.random.default_rng(size).permutation(len(kept))  # runs copied in any order
    got = np.zeros(int(lengths.sum()), dtype=table.dtype)
    gather_runs(table, starts[order], lengths[order], got, at[order])
    np.testing.assert_array_equal(got, expected)
