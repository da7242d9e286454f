"""A sparse.COO result laid down in C order as cells arrive, compared with numpy's sort."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sporadik_dask as sd
from sporadik_dask.kernels.regions import Regions


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    shape=st.lists(st.integers(1, 6), min_size=2, max_size=3),
    lead_axes=st.integers(0, 1),
    batches=st.integers(1, 5),
    slack=st.integers(0, 3),
)
def test_cells_laid_into_regions_batch_by_batch_come_out_as_numpy_sorts_them(
    seed: int, shape: list[int], lead_axes: int, batches: int, slack: int
) -> None:
    """Batches of distinct cells, each a stretch of the later axes' C order (as runs arrive)
    sorted by lead, into regions sized with room to spare: compacted, every cell is where a
    sort of the whole puts it, with its value."""
    rng = np.random.default_rng(seed)
    out = tuple(shape)
    leads = int(np.prod(out[:lead_axes]))
    span = int(np.prod(out[lead_axes:]))
    cells = np.sort(rng.choice(leads * span, size=rng.integers(0, leads * span + 1), replace=False))
    data = rng.integers(-9, 9, cells.size).astype(np.float32)
    bound = np.bincount(cells // span, minlength=leads) + rng.integers(0, slack + 1, leads)
    regions = Regions(out, span, np.minimum(bound, span), np.float32)
    # batches cut along the later axes (C order within each lead), each sorted by lead
    cuts = np.sort(rng.integers(0, span + 1, batches - 1))
    within = cells % span
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, span], strict=True):
        taken = (within >= lo) & (within < hi)
        regions.place(cells[taken], data[taken])
    coords, values = regions.result()
    np.testing.assert_array_equal(coords, np.stack(np.unravel_index(cells, out)))
    np.testing.assert_array_equal(values, data)


def test_a_region_given_more_cells_than_its_bound_is_refused() -> None:
    regions = Regions((2, 3), 3, np.array([1, 3]), np.float64)
    regions.place(np.array([0, 3]), np.ones(2))
    with pytest.raises(sd.LayoutError, match="bound of 1"):
        regions.place(np.array([1]), np.ones(1))


def test_cells_placed_by_lead_code_come_out_as_numpy_sorts_them_and_a_full_lead_refuses() -> None:
    """Rank 2, one lead per row: cells given as (lead, offset), each lead's in order, in any
    interleaving of leads."""
    rng = np.random.default_rng(3)
    shape = (5, 9)
    cells = np.sort(rng.choice(45, size=30, replace=False))
    leads, offsets = np.divmod(cells, 9)
    data = np.arange(cells.size, dtype=np.float64)
    bound = np.bincount(leads, minlength=5) + 1
    regions = Regions(shape, 9, bound, np.float64)
    order = np.lexsort((np.arange(cells.size), offsets))  # by offset: leads interleaved
    regions.place_cells(leads[order].astype(np.int32), offsets[order].astype(np.int32), data[order])
    coords, values = regions.result()
    assert coords.dtype == np.int32  # every axis fits
    np.testing.assert_array_equal(coords, np.stack([leads, offsets]))
    np.testing.assert_array_equal(values, data)
    full = Regions(shape, 9, np.array([1, 0, 0, 0, 0]), np.float64)
    with pytest.raises(sd.LayoutError, match="bound of 0"):
        full.place_cells(np.array([0, 1], np.int32), np.array([0, 0], np.int32), np.ones(2))
