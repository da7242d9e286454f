"""Assembly is pure: runs of the sorted distinct positions become the caller's order, C order."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from sporadik_dask.format.spec import LayoutGeometry
from sporadik_dask.read import Selection
from sporadik_dask.read.assembly import assemble
from sporadik_dask.read.routing import Stretch
from sporadik_dask.read.selection import as_array
from tests.helpers import random_dense


@dataclass(frozen=True)
class Geometry(LayoutGeometry):
    shape: tuple[int, ...]
    indexed_axis: int
    index_order: tuple[int, ...]


def runs_of(
    dense: npt.NDArray[Any], geometry: Geometry, positions: npt.NDArray[Any]
) -> tuple[Any, ...]:
    """A layout's runs of ``positions``, made in memory: the runs (end to end), indices and
    values."""
    moved = np.transpose(dense, (geometry.indexed_axis, *geometry.index_order))
    flat = moved.reshape(dense.shape[geometry.indexed_axis], math.prod(geometry.index_shape))
    rows = [np.flatnonzero(flat[p]) for p in positions]
    indices = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    data = np.concatenate([flat[p][r] for p, r in zip(positions, rows, strict=True)] or [[]])
    lengths = np.array([r.size for r in rows], dtype=np.int64)
    return Stretch.of_lengths(lengths), indices, data.astype(dense.dtype)


KEYS = [
    (slice(None), [5, 1, 1, 7, 0]),  # unsorted, repeated columns
    ([4, 4, 2, 9, 2], slice(None)),  # unsorted, repeated rows
    ([3, 0, 3], [6, 2, 2, 0]),  # both
    (slice(None, None, -1), slice(None, None, -2)),  # reversed
    (np.array([True, False] * 5), [7, 3]),  # a mask
    (2, [3, 3, 1]),  # a dropped axis
]


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize(
    "geometry", [Geometry((10, 8), 0, (1,)), Geometry((10, 8), 1, (0,))], ids=["csr", "csc"]
)
def test_caller_order_comes_from_copying_runs_and_slots_not_from_sparse_indexing(
    key: Any, geometry: Geometry
) -> None:
    dense = random_dense(np.random.default_rng(7), (10, 8), 0.5)
    selection = Selection.from_key(key, dense.shape)
    runs, indices, data = runs_of(
        dense, geometry, as_array(selection.unique[geometry.indexed_axis])
    )
    coords, values = assemble(selection, geometry, runs, indices, data)
    expected = dense[np.ix_(*[np.atleast_1d(p) for p in selection.positions])].reshape(
        selection.result_shape
    )
    linear = np.ravel_multi_index(tuple(coords), selection.result_shape)
    assert np.all(np.diff(linear) > 0)
    result = np.zeros(selection.result_shape, dtype=dense.dtype)
    result[tuple(coords)] = values
    np.testing.assert_array_equal(result, expected)


def test_an_index_order_that_is_not_ascending_still_assembles_in_c_order() -> None:
    dense = random_dense(np.random.default_rng(8), (4, 5, 6), 0.4)
    geometry = Geometry((4, 5, 6), 1, (2, 0))
    selection = Selection.from_key(([3, 0, 0], slice(None, None, -1), [1, 5, 2]), dense.shape)
    runs, indices, data = runs_of(dense, geometry, as_array(selection.unique[1]))
    coords, values = assemble(selection, geometry, runs, indices, data)
    expected = dense[np.ix_(*selection.positions)]
    assert np.all(np.diff(np.ravel_multi_index(tuple(coords), expected.shape)) > 0)
    result = np.zeros(expected.shape, dtype=dense.dtype)
    result[tuple(coords)] = values
    np.testing.assert_array_equal(result, expected)
