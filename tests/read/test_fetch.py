"""Runs fetched from a layout in batches of chunks: the same values as one fetch of them all."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sparse

import sporadik_dask as sd
from sporadik_dask.read import StoreReader
from sporadik_dask.read.fetch import fetch_runs
from tests.helpers import random_dense


@pytest.mark.parametrize("stretch", [1, 7, 64, 2**21], ids=["1", "7", "64", "one batch"])
def test_runs_fetched_in_batches_are_each_run_in_the_order_asked(
    tmp_path: Path, stretch: int
) -> None:
    """Positions unsorted and repeated, some runs empty, on chunks of 8 values: batches of runs
    starting within ``stretch`` values each fetch their own chunks, a chunk two batches share
    twice, and every run lands where the order asked puts it."""
    dense = random_dense(np.random.default_rng(9), (60, 40), 0.2, np.float32)
    dense[[5, 6, 30]] = 0
    path = tmp_path / "s.zarr"
    sd.to_sporadik(sparse.COO.from_numpy(dense), path, chunk=8)
    reader = StoreReader(str(path))
    layout = reader.description.layouts[0]
    rows = np.array([59, 3, 5, 3, 41, 6, 0, 22, 30, 58, 17, 17, 2], dtype=np.int64)
    ((lo, hi),) = reader.brackets([(layout, rows)])
    arrays = reader._arrays(layout)
    indices, data = fetch_runs(
        layout, (arrays["indices"], arrays["data"]), (lo, hi), reader.location, stretch=stretch
    )
    at = np.concatenate(([0], np.cumsum(hi - lo)))
    for k, row in enumerate(rows):
        got = np.zeros(40, dtype=np.float32)
        got[indices[at[k] : at[k + 1]]] = data[at[k] : at[k + 1]]
        np.testing.assert_array_equal(got, dense[row])


def test_brackets_of_a_region_stay_the_callers_while_the_thread_reads_other_regions(
    tmp_path: Path,
) -> None:
    """A region's offsets are joined into a buffer its thread fills again at its next read:
    the brackets the reader gives are copies, and regions read one after another, or two at
    once (one through each layout), each hold their own values."""
    dense = random_dense(np.random.default_rng(3), (40, 30), 0.4, np.float32)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(sparse.COO.from_numpy(dense), path, axes=(0, 1), chunk=8)
    reader = StoreReader(str(path))
    layout = reader.description.layouts[1]
    indptr = np.asarray(reader._arrays(layout)["indptr"][:])
    ((lo, hi),) = reader.brackets([(layout, range(3, 20))])
    route = reader.route((slice(None), slice(3, 20)))
    earlier = reader[:, 3:20]
    for key in [(slice(None), slice(10, 30)), (slice(2, 30), slice(5, 25)), (slice(0, 9),)]:
        np.testing.assert_array_equal(reader[key].todense(), dense[key])
    for got in (lo, route.brackets[0]):
        np.testing.assert_array_equal(got, indptr[3:20])
    for got in (hi, route.brackets[1]):
        np.testing.assert_array_equal(got, indptr[4:21])
    np.testing.assert_array_equal(earlier.todense(), dense[:, 3:20])
