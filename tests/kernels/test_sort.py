"""The stable counting sorts of the write's shuffle, compared with numpy's stable argsort."""

from __future__ import annotations

import numpy as np
import pytest

from sporadik_dask.kernels.sort import sort_by_key


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
