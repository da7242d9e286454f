"""The stable sorts of the write (counting, and packed with each index), compared with numpy's
stable argsort."""

from __future__ import annotations

import numpy as np
import pytest

from sporadik_dask.kernels.sort import sort_by_key, stable_order


@pytest.mark.parametrize("dtype", ["float32", "int64", "float16"])
def test_the_counting_sort_is_what_a_stable_argsort_gives(dtype: str) -> None:
    rng = np.random.default_rng(6)
    keys = rng.integers(0, 17, 500)
    rows = rng.integers(0, 1000, size=(2, 500))
    data = rng.integers(0, 100, 500).astype(dtype)
    sorted_rows, sorted_data = sort_by_key(keys, np.bincount(keys, minlength=17), rows, data)
    order = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(sorted_rows, rows[:, order])
    np.testing.assert_array_equal(sorted_data, data[order])


@pytest.mark.parametrize(
    ("size", "bound"),
    [(0, 1), (1, 5), (1_000, 7), (1_000, 3_100_000_000 * 100), (1_000, 2**62)],
    ids=["empty", "one key", "few distinct keys", "raveled genome cells", "too wide to pack"],
)
def test_the_packed_sort_is_what_a_stable_argsort_gives(size: int, bound: int) -> None:
    keys = np.random.default_rng(7).integers(0, bound, size)
    before = keys.copy()
    found, order = stable_order(keys, bound)
    expected = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(order, expected)
    np.testing.assert_array_equal(found, keys[expected])
    np.testing.assert_array_equal(keys, before)
