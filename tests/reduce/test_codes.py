"""The group codes a pass's kernel looks positions up in: windows of a table of the axis, made
batch by batch from a selection held as it names its positions, give each position the group
the table gives it; and a selection reduced in the store's pass along an axis longer than the
table limit (``sporadik.group-table-bytes`` lowered) is what numpy gives on the dense array,
with windows or without."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import dask
import numpy as np
import numpy.typing as npt
import pytest
import sparse
import xarray as xr
from hypothesis import given
from hypothesis import strategies as st

import sporadik_dask as sd
from sporadik_dask.read.selection import normalize_key
from sporadik_dask.reduce.codes import CodeWindows
from sporadik_dask.reduce.target import Grouping, Picked
from tests.helpers import random_dense
from tests.reduce.test_target import EXTENT, drawn_codes, selections, table_of


@given(
    selections(),
    st.sampled_from(["each its own", "one for all", "a groupby's"]),
    st.integers(8, 80),
    st.lists(st.lists(st.integers(0, EXTENT - 1), max_size=12), min_size=1, max_size=6),
    st.data(),
)
def test_each_batchs_window_gives_its_positions_the_groups_a_table_of_the_axis_gives(
    picked: Any, how: str, window_bytes: int, batches: list[list[int]], data: st.DataObject
) -> None:
    """Batches of positions in any order, windows of any size: a position inside the window is
    looked up in it, one outside is in no group, and a batch reaching past what a window holds
    has none."""
    codes, size = drawn_codes(picked, how, data)
    size = max(size, 1)
    table = table_of(picked, codes)
    with dask.config.set({"sporadik.group-table-bytes": window_bytes}):
        windows = CodeWindows(Grouping(0, Picked.of(picked, codes), size))
    for batch in batches:
        indices = np.array(batch, dtype=np.int32)
        window = windows.covering(indices)
        if window is None:  # the picked positions the batch reaches span more than a window
            reached = np.intersect1d(np.asarray(picked), np.arange(min(batch), max(batch) + 1))
            assert reached[-1] - reached[0] >= windows.most
            continue
        lookup, offset = window
        assert 0 < lookup.size <= windows.most
        spot = indices - offset
        held = (spot >= 0) & (spot < lookup.size)
        found = np.where(held, lookup[np.where(held, spot, 0)], -1)
        np.testing.assert_array_equal(found, table[indices])


@given(selections(), st.integers(0, EXTENT - 1), st.integers(0, EXTENT - 1))
def test_a_window_of_a_selection_is_that_stretch_of_its_table(
    picked: Any, lo: int, hi: int
) -> None:
    lo, hi = min(lo, hi), max(lo, hi)
    held = Picked.of(picked)
    window = held.window(lo, hi, np.dtype(np.int16))
    assert window.dtype == np.int16
    np.testing.assert_array_equal(window, table_of(picked, None)[lo : hi + 1])


def test_a_window_holds_all_picked_positions_when_it_can_and_is_kept_while_batches_stay_in_it() -> (
    None
):
    picked = np.array([3, 10, 40, 41])
    with dask.config.set({"sporadik.group-table-bytes": 100}):
        windows = CodeWindows(Grouping(0, Picked.of(picked, 0), 1))
    first = windows.covering(np.array([0, 12]))
    assert first is not None
    assert first[1] == 3 and first[0].size == 39  # all four picked positions, made once
    assert windows.covering(np.array([41, 7])) is first
    with dask.config.set({"sporadik.group-table-bytes": 20}):
        narrow = CodeWindows(Grouping(0, Picked.of(picked, 0), 1))
    assert narrow.covering(np.array([0, 45])) is None  # picked 3 to 41: more than 20 positions
    later = narrow.covering(np.array([35, 45]))
    assert later is not None and later[1] == 40  # from the batch's first picked position
    assert later[0].size == 2  # to the last picked


CELLS, GENES = 3_000, 7


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, npt.NDArray[Any]]:
    dense = random_dense(np.random.default_rng(5), (CELLS, GENES), 0.3, np.float32)
    dense[17, 2] = np.nan  # a stored NaN, skipped as numpy's nansum skips it
    path = tmp_path_factory.mktemp("codes") / "s.zarr"
    sd.to_sporadik(
        xr.DataArray(sparse.COO.from_numpy(dense), dims=("cell", "gene"), name="x"), path
    )
    return path, dense


rng = np.random.default_rng(8)
#: Selections of cells: each as xarray's isel takes it.
SELECTIONS: dict[str, Any] = {
    "a mask": rng.random(CELLS) < 0.5,
    "an unsorted list": rng.permutation(CELLS)[:1_200],
    "a list with repeats": np.concatenate([rng.permutation(CELLS)[:900], [5, 5, 17]]),
    "a slice": slice(100, 2_900),
    "a step": slice(1, None, 3),
    "a reversed step": slice(None, 10, -7),
}
#: ``sporadik.group-table-bytes``: the axis's table (8 bytes a position), windows holding every
#: picked position, and none at all (each position looked up on its own).
LIMITS = {"a table": 2**25, "windows": 2 * CELLS, "no window": 16}


@pytest.mark.parametrize("limit", list(LIMITS))
@pytest.mark.parametrize("name", list(SELECTIONS))
def test_a_selection_reduced_in_the_pass_past_the_table_limit_equals_numpy(
    store: tuple[Path, npt.NDArray[Any]], name: str, limit: str
) -> None:
    path, dense = store
    key = SELECTIONS[name]
    (positions,), _ = normalize_key((key,), (CELLS,))
    chosen = dense[np.asarray(positions, dtype=np.int64)]
    clusters = np.random.default_rng(2).integers(0, 5, CELLS)
    config = {"sporadik.group-table-bytes": LIMITS[limit], "sporadik.selection-read-values": 0}
    with dask.config.set(config):
        variable = xr.open_dataset(path, engine="sporadik")["x"]
        variable = variable.assign_coords(cluster=("cell", clusters))
        selected = variable.isel(cell=key)
        summed = selected.sum("cell").values
        mean = selected.mean("cell").values
        most = selected.max("cell").values  # not the kernel's: each value's group looked up
        grouped = selected.groupby("cluster").sum().values
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        np.testing.assert_allclose(summed, np.nansum(chosen, axis=0), rtol=1e-5)
        np.testing.assert_allclose(mean, np.nanmean(chosen, axis=0), rtol=1e-5)
        np.testing.assert_array_equal(most, np.nanmax(chosen, axis=0))
    of = clusters[np.asarray(positions, dtype=np.int64)]
    want = np.stack([np.nansum(chosen[of == k], axis=0) for k in np.unique(of)])
    np.testing.assert_allclose(grouped, want, rtol=1e-5)
