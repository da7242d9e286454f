"""Reductions from fields: each equals numpy's over the dense array, values, dtype and NaN."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import numpy.typing as npt
import pytest
import sparse

from sporadik_dask.reduce import disjoint, prefetch
from sporadik_dask.reduce.blocks import reduce_coo, reduce_dask
from sporadik_dask.reduce.fields import OPS, Op, supported
from sporadik_dask.reduce.layout import layout_for
from sporadik_dask.reduce.spans import reduce_store_dask
from sporadik_dask.reduce.sparse_fields import SPARSE_OPS
from sporadik_dask.reduce.store import reduce_store
from sporadik_dask.reduce.target import Grouping, Target

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_]
AXES = [(0,), (1,), (2,), (0, 2), (0, 1, 2)]


def _numpy(op: str, skipna: bool) -> Callable[..., Any]:
    if op == "count":
        return lambda a, axis: np.sum(~np.isnan(a.astype(np.float64)), axis=axis)
    name = ("nan" if skipna else "") + op
    return getattr(np, name)  # type: ignore[no-any-return]


def _dense(dtype: Any) -> npt.NDArray[Any]:
    rng = np.random.default_rng(1)
    dense = ((rng.random((30, 20, 5)) < 0.2) * rng.integers(-5, 9, (30, 20, 5))).astype(dtype)
    if np.dtype(dtype).kind == "f":
        dense[3, 4, 1] = np.nan  # one NaN in a cell
        dense[5, :, 2] = np.nan  # a whole line of NaN
    return dense


@pytest.mark.parametrize("skipna", [True, False])
@pytest.mark.parametrize("dtype", DTYPES, ids=[np.dtype(d).name for d in DTYPES])
@pytest.mark.parametrize("op", OPS)
def test_every_reduction_of_coordinates_and_of_dask_blocks_equals_numpy_over_the_dense_array(
    op: Op, dtype: Any, skipna: bool
) -> None:
    if not supported(op, np.dtype(dtype)):
        pytest.skip(f"{op} of {np.dtype(dtype)} takes xarray's own path")
    dense = _dense(dtype)
    coo = sparse.COO.from_numpy(dense)
    blocks = da.from_array(coo, chunks=(7, 6, 5), asarray=False)
    for axes in AXES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            expected = np.asarray(_numpy(op, skipna)(dense, axis=axes))
            target = Target(dense.shape, axes)
            from_coords = reduce_coo(coo, op, target, skipna=skipna)
            from_blocks = reduce_dask(blocks, op, target, skipna=skipna).compute()
        for got in (from_coords, from_blocks):
            assert got.shape == expected.shape
            if op != "count":
                assert got.dtype == expected.dtype, (op, axes)
            # numpy accumulates float32 in float32; fields accumulate in float64
            np.testing.assert_allclose(
                got.astype(np.float64), expected.astype(np.float64), rtol=2e-5, equal_nan=True
            )


def test_a_dask_reduction_builds_no_dense_block_and_keeps_its_result_small() -> None:
    coo = sparse.random((4000, 3000), density=0.001, random_state=0, format="coo")
    blocks = da.from_array(coo, chunks=(500, 3000), asarray=False)
    result = reduce_dask(blocks, "mean", Target((4000, 3000), (0,)), skipna=True)
    assert isinstance(result._meta, np.ndarray) and result.shape == (3000,)
    np.testing.assert_allclose(result.compute(), coo.todense().mean(axis=0))


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "count", "var"])
@pytest.mark.parametrize("grouped", [0, 1, 2])
def test_a_grouped_reduction_equals_numpy_over_each_group_of_the_dense_array(
    op: Op, grouped: int
) -> None:
    dense = _dense(np.float32)
    rng = np.random.default_rng(3)
    size = int(dense.shape[grouped])
    codes = rng.integers(-1, 4, size)  # -1: a position in no group
    codes[:4] = np.arange(4)  # every group has a member
    grouping = Grouping(grouped, codes, 4)
    coo = sparse.COO.from_numpy(dense)
    blocks = da.from_array(coo, chunks=(7, 6, 5), asarray=False)
    for others in [(), tuple(a for a in range(3) if a != grouped)[:1]]:
        target = Target(dense.shape, others, grouping)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            expected = np.stack(
                [
                    _numpy(op, True)(
                        np.take(dense, np.flatnonzero(codes == g), axis=grouped),
                        axis=(grouped, *others),
                    )
                    for g in range(4)
                ],
                axis=[a for a in range(3) if a not in others].index(grouped),
            )
            for got in (
                reduce_coo(coo, op, target, skipna=True),
                reduce_dask(blocks, op, target, skipna=True).compute(),
            ):
                assert got.shape == expected.shape
                np.testing.assert_allclose(
                    got.astype(np.float64), expected.astype(np.float64), rtol=2e-5, equal_nan=True
                )


@pytest.mark.slow
@pytest.mark.parametrize("block", [40, 400], ids=["sorted runs", "accumulated runs"])
@pytest.mark.parametrize("skipna", [True, False])
@pytest.mark.parametrize("op", SPARSE_OPS)
@pytest.mark.parametrize("grouped", [0, 1, 2])
def test_a_sparse_grouped_pass_over_a_store_in_many_small_batches_equals_the_dense_one(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    op: Op,
    grouped: int,
    skipna: bool,
    block: int,
) -> None:
    """Batches of a few positions each (so the per-batch dense blocks or sorts, their
    concatenation and the counting sort into C order all run), with NaNs (a cell of NaN alone
    included), positions in no group, every layout."""
    import sporadik_dask as sd
    from sporadik_dask.read import StoreReader

    dense = _dense(np.float32)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(sparse.COO.from_numpy(dense), path, axes=(0, 1, 2), chunk=16)
    reader = StoreReader(path)
    rng = np.random.default_rng(5)
    groups = min(6, dense.shape[grouped] - 1)
    codes = rng.integers(-1, groups, dense.shape[grouped])
    codes[:groups] = np.arange(groups)  # every group has a member, as xarray's groups do
    grouping = Grouping(grouped, codes, groups)
    monkeypatch.setattr(disjoint, "SPARSE_BATCH_CELLS", block)
    monkeypatch.setattr(prefetch, "BATCH_BYTES", 50 * 8)
    for reduced in [(), tuple(a for a in range(3) if a != grouped)[:1]]:
        target = Target(dense.shape, reduced, grouping)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            expected = reduce_store(reader, op, target, skipna=skipna)
            got = reduce_store(reader, op, target, skipna=skipna, dense=False)
        assert isinstance(got, sparse.COO) and got.dtype == expected.dtype
        np.testing.assert_allclose(got.todense(), expected, rtol=2e-5, equal_nan=True)


def _store_reduces_as_coordinates(
    reader: Any, coo: Any, op: Any, target: Any, skipna: bool
) -> None:
    """A pass over the store gives what the coordinates' own reduction gives: values, dtype and
    shape."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = reduce_coo(coo, op, target, skipna=skipna)
        got = reduce_store(reader, op, target, skipna=skipna)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-6, equal_nan=True)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=[np.dtype(d).name for d in DTYPES])
@pytest.mark.parametrize("orders", [{0: (1, 2), 1: (0, 2), 2: (0, 1)}, {0: (2, 1), 2: (1, 0)}])
def test_a_pass_over_a_store_in_any_index_order_equals_the_reduction_of_its_coordinates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: Any, orders: dict[int, Any]
) -> None:
    """The one-pass adder over runs (taken where each value's output cell is affine in its run
    and raveled index) and the per-value path (taken elsewhere) against the coordinates' own."""
    from sporadik_dask.read import StoreReader
    from tests.helpers import write_reference

    dense = _dense(dtype)
    reader = StoreReader(write_reference(tmp_path / "s.zarr", dense, orders, chunk=16))
    coo = sparse.COO.from_numpy(dense)
    monkeypatch.setattr(prefetch, "BATCH_BYTES", 50 * 8)  # many batches, each added in place
    codes = np.random.default_rng(2).integers(-1, 3, 30)
    codes[:3] = np.arange(3)
    groupings = [None, Grouping(0, codes, 3), Grouping(2, codes[:5] % 2, 2)]
    for op in OPS:
        if not supported(op, np.dtype(dtype)):
            continue
        for axes, grouping, skipna in itertools.product([(), *AXES], groupings, [True, False]):
            if (grouping is None and not axes) or (grouping and grouping.axis in axes):
                continue
            target = Target(dense.shape, axes, grouping)
            _store_reduces_as_coordinates(reader, coo, op, target, skipna)


@pytest.mark.parametrize("dtype", DTYPES, ids=[np.dtype(d).name for d in DTYPES])
def test_a_dense_group_pass_over_the_layout_indexed_by_the_grouped_axis_equals_the_coordinates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: Any
) -> None:
    """Few groups of rows: the runs of columns are read, each index looked up to its group
    (-1: in none) as it is added."""
    from sporadik_dask.read import StoreReader
    from tests.helpers import write_reference

    dense = _dense(dtype)[:, :, 0]
    path = write_reference(tmp_path / "s.zarr", dense, {0: (1,), 1: (0,)})
    reader = StoreReader(path)
    coo = sparse.COO.from_numpy(dense)
    monkeypatch.setattr(prefetch, "BATCH_BYTES", 50 * 8)
    codes = np.random.default_rng(3).integers(-1, 3, 30)
    codes[:3] = np.arange(3)
    target = Target(dense.shape, (), Grouping(0, codes, 3))
    assert layout_for(reader, target).indexed_axis == 1
    for op, skipna in itertools.product(OPS, [True, False]):
        if not supported(op, np.dtype(dtype)):
            continue
        _store_reduces_as_coordinates(reader, coo, op, target, skipna)
    import zarr

    from sporadik_dask.format.errors import LayoutError

    zarr.open_array(path / "layouts" / "axis1" / "indices", mode="r+")[3] = 31  # past 30 rows
    with pytest.raises(LayoutError, match="31"):  # checked before it is looked up
        reduce_store(StoreReader(path), "sum", target, skipna=True)


def test_a_stored_index_past_its_axis_fails_a_pass_with_a_layout_error_not_a_crash(
    tmp_path: Path,
) -> None:
    import zarr

    from sporadik_dask.format.errors import LayoutError
    from sporadik_dask.read import StoreReader
    from tests.helpers import write_reference

    dense = _dense(np.float32)
    path = write_reference(tmp_path / "s.zarr", dense, {0: (1, 2)})
    indices = zarr.open_array(path / "layouts" / "axis0" / "indices", mode="r+")
    indices[3] = 20 * 5 + 7  # past the 20 x 5 cells a run of axis 0 can reach
    reader = StoreReader(path)
    grouping = Grouping(0, np.arange(30) % 4, 4)
    with pytest.raises(LayoutError, match="107"):  # the one-pass adder never writes past its cells
        reduce_store(reader, "sum", Target(dense.shape, (), grouping), skipna=True)


@pytest.mark.parametrize("op", SPARSE_OPS)
@pytest.mark.parametrize("grouped", [0, 1, 2])
def test_a_sparse_reduction_of_a_store_in_many_spans_equals_the_dense_one(
    tmp_path: Path, op: Op, grouped: int
) -> None:
    """Spans' fields (laid into the result where they share no cell, added in a tree where they
    may) give the one-pass dense result."""
    import sporadik_dask as sd
    from sporadik_dask.read import StoreReader

    dense = _dense(np.float32)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(sparse.COO.from_numpy(dense), path, axes=(0, 1, 2), chunk=16)
    reader = StoreReader(path)
    codes = np.random.default_rng(6).integers(-1, 3, int(dense.shape[grouped]))
    codes[:3] = np.arange(3)
    grouping = Grouping(grouped, codes, 3)
    for reduced in [(), tuple(a for a in range(3) if a != grouped)[:1]]:
        target = Target(dense.shape, reduced, grouping)
        expected = reduce_store(reader, op, target, skipna=True)
        spans = reduce_store_dask(reader, op, target, 7, skipna=True, dense=False)
        leaves = [
            k for k in spans.dask if isinstance(k, tuple) and k[0].startswith(f"sporadik-{op}")
        ]
        assert len(leaves) > 1  # several spans, each reading its own runs
        got = spans.compute()
        assert isinstance(got, sparse.COO) and got.dtype == expected.dtype
        np.testing.assert_allclose(got.todense(), expected, rtol=2e-5, equal_nan=True)


def test_dasks_private_join_of_nested_parts_joins_as_the_combine_step_calls_it() -> None:
    """``dask.array.core._concatenate2(arrays, axes=)`` (private; the combine step of a dask
    reduction joins its neighbours' fields with it, as dask's own combine steps do): a release
    that moves it fails here, by name."""
    from dask.array.core import _concatenate2

    parts = [[np.full((1, 2), 1.0), np.full((1, 3), 2.0)], [np.full((2, 2), 3.0), np.ones((2, 3))]]
    joined = _concatenate2(parts, axes=[0, 1])
    np.testing.assert_array_equal(joined, np.block(parts))
