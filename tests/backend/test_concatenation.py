"""Joining sparse blocks of a read along a later axis gives what ``sparse.concatenate`` gives, C
order; anyone else's blocks are joined by ``sparse.concatenate`` itself."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import sparse
import xarray as xr
from dask.array.dispatch import concatenate_lookup
from hypothesis import given, settings
from hypothesis import strategies as st

import sporadik_dask as sd
from sporadik_dask.backend.array import backend_under
from sporadik_dask.backend.concatenation import concatenate_in_order
from sporadik_dask.backend.patches import PATCHES, installed, join_sparse_blocks_in_order
from sporadik_dask.marks import is_read_sparse, mark_read
from tests.helpers import random_dense


def _same(got: sparse.COO, expected: sparse.COO) -> None:
    assert type(got) is sparse.COO
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype
    assert got.coords.dtype == expected.coords.dtype
    np.testing.assert_array_equal(got.coords, expected.coords)
    np.testing.assert_array_equal(got.data, expected.data)
    np.testing.assert_array_equal(got.fill_value, expected.fill_value)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    rank=st.integers(2, 4),
    blocks=st.integers(1, 4),
    data=st.data(),
)
def test_joining_blocks_along_any_axis_is_what_sparse_concatenate_gives(
    seed: int, rank: int, blocks: int, data: st.DataObject
) -> None:
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-rank, rank - 1))
    index = data.draw(st.sampled_from([np.int64, np.int32]))  # grouped results hold int32
    shape = [int(n) for n in rng.integers(1, 6, rank)]
    arrays = []
    for _ in range(blocks):
        shape[axis] = int(rng.integers(0, 5))
        block = sparse.COO.from_numpy(random_dense(rng, shape, 0.4))
        coo = sparse.COO(block.coords.astype(index), block.data, shape=block.shape)
        arrays.append(mark_read(coo))  # a read's blocks
    _same(concatenate_in_order(arrays, axis=axis), sparse.concatenate(arrays, axis=axis))


@pytest.mark.parametrize("fill", [0.0, np.nan, 3.0])
def test_blocks_with_a_fill_value_or_of_mixed_dtypes_join_as_sparse_joins_them(
    fill: float,
) -> None:
    rng = np.random.default_rng(3)
    left = sparse.COO.from_numpy(np.where(rng.random((4, 3)) < 0.5, 1.0, fill), fill_value=fill)
    right = sparse.COO.from_numpy(
        np.where(rng.random((4, 2)) < 0.5, 2, fill).astype(np.float32), fill_value=fill
    )
    left, right = mark_read(left), mark_read(right)
    _same(concatenate_in_order([left, right], 1), sparse.concatenate([left, right], 1))


def test_blocks_of_different_fill_values_are_refused_as_sparse_refuses_them() -> None:
    left = mark_read(sparse.COO.from_numpy(np.ones((2, 2)), fill_value=1.0))
    right = mark_read(sparse.COO.from_numpy(np.zeros((2, 2))))
    with pytest.raises(ValueError, match="fill"):
        concatenate_in_order([left, right], 1)


def test_opening_a_store_makes_dask_join_sparse_blocks_so_and_computes_in_c_order(
    tmp_path: Path,
) -> None:
    dense = random_dense(np.random.default_rng(4), (50, 40), 0.3)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(dense, path, axes=(0, 1), chunk=64)
    counts = xr.open_dataset(path, engine="sporadik", chunks={})["s"]
    assert concatenate_lookup.dispatch(sparse.COO) is concatenate_in_order
    join_sparse_blocks_in_order()  # again: nothing changes
    assert concatenate_lookup.dispatch(sparse.COO) is concatenate_in_order
    picked = np.delete(np.arange(40), [3, 17])  # most genes: as many blocks as the store's
    lazy = counts[:, picked].data
    assert lazy.numblocks[1] > 1
    with dask.config.set(scheduler="sync"):
        result = lazy.compute()
    assert is_read_sparse(result)  # the blocks, read, were joined here
    linear = np.ravel_multi_index(tuple(result.coords), result.shape)
    assert np.all(np.diff(linear) > 0)
    np.testing.assert_array_equal(result.todense(), dense[:, picked])
    blocks = da.from_array(sparse.COO.from_numpy(dense), chunks=(20, 15), asarray=False)
    np.testing.assert_array_equal(blocks.compute().todense(), dense)


def test_switched_off_every_join_is_sparse_concatenate(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    joined = sparse.concatenate

    def counted(arrays: Any, axis: int = 0) -> Any:
        calls.append(axis)
        return joined(arrays, axis=axis)

    monkeypatch.setattr(sparse, "concatenate", counted)
    left, right = (mark_read(sparse.COO.from_numpy(np.eye(3) * k)) for k in (1, 2))
    concatenate_in_order([left, right], 1)
    assert calls == []  # joined here, by counting sorts
    with dask.config.set({"sporadik.join-in-order": False}):
        off = concatenate_in_order([left, right], 1)
    assert calls == [1]
    np.testing.assert_array_equal(off.todense(), np.hstack([np.eye(3), 2 * np.eye(3)]))


def test_lazy_variables_concatenate_and_reindex_as_loaded_ones_do(tmp_path: Path) -> None:
    """``xr.concat`` and ``reindex`` to a label the variable lacks, as users spell them, give
    what the same variables loaded give; xarray alone asks numpy for the lazy values."""
    dense = random_dense(np.random.default_rng(6), (50, 30), 0.3)
    genes = [f"g{j}" for j in range(30)]
    array = xr.DataArray(sparse.COO.from_numpy(dense), dims=("cell", "gene"), name="x")
    sd.to_sporadik(array.assign_coords(gene=genes), tmp_path / "s.zarr")
    lazy = xr.open_dataset(tmp_path / "s.zarr", engine="sporadik")["x"]
    loaded = xr.open_dataset(tmp_path / "s.zarr", engine="sporadik")["x"].load()
    cases: list[Callable[[xr.DataArray], xr.DataArray]] = [
        lambda v: xr.concat([v.isel(cell=slice(0, 10)), v.isel(cell=slice(30, 45))], "cell"),
        lambda v: xr.concat([v.isel(gene=[4, 2]), v], "gene"),
        lambda v: v.isel(cell=slice(0, 12)).reindex(gene=["g3", "missing", "g1"], fill_value=0),
        lambda v: v.reindex(gene=["g3", "missing"]),
    ]
    for case in cases:
        got, expected = case(lazy), case(loaded)
        assert isinstance(got.data, sparse.COO)
        assert got.dims == expected.dims and got.shape == expected.shape
        np.testing.assert_array_equal(got.data.todense(), expected.data.todense())
    assert np.isnan(cases[3](lazy).sel(gene="missing").data.todense()).all()


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_one_block_joins_to_itself_not_a_copy(axis: int) -> None:
    """dask joins a column of blocks along each axis in turn: a copy of each would be held
    beside every block and the result."""
    block = mark_read(sparse.COO.from_numpy(random_dense(np.random.default_rng(1), (5, 4), 0.4)))
    assert concatenate_in_order([block], axis=axis) is block


def test_anyone_elses_blocks_are_joined_by_sparse_itself_after_a_store_is_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's ``sparse.COO`` blocks, or a join of them with a read's, go to
    ``sparse.concatenate`` (a copy of one block, as sparse makes it), as in a process that never
    opened a store; the read's blocks alone are joined here."""
    dense = random_dense(np.random.default_rng(8), (30, 20), 0.3)
    sd.to_sporadik(dense, tmp_path / "s.zarr")
    xr.open_dataset(tmp_path / "s.zarr", engine="sporadik", chunks={})
    join = concatenate_lookup.dispatch(sparse.COO)
    assert join is concatenate_in_order
    calls: list[int] = []
    joined = sparse.concatenate

    def counted(arrays: Any, axis: int = 0) -> Any:
        calls.append(axis)
        return joined(arrays, axis=axis)

    monkeypatch.setattr(sparse, "concatenate", counted)
    user = [sparse.COO.from_numpy(dense[:, :8]), sparse.COO.from_numpy(dense[:, 8:])]
    read = [mark_read(sparse.COO.from_numpy(dense[:, 8:]))]
    for blocks in (user, user[:1], user[:1] + read):
        got = join(blocks, axis=1)
        assert not is_read_sparse(got) and all(got is not block for block in blocks)
    assert calls == [1, 1, 1]
    both = join([mark_read(user[0]), *read], axis=1)
    assert calls == [1, 1, 1] and is_read_sparse(both)
    np.testing.assert_array_equal(both.todense(), dense)
    user_blocks = da.from_array(sparse.COO.from_numpy(dense), chunks=(10, 7), asarray=False)
    with dask.config.set(scheduler="sync"):
        computed = user_blocks.compute()
    assert not is_read_sparse(computed) and len(calls) > 3
    np.testing.assert_array_equal(computed.todense(), dense)


@pytest.mark.parametrize("shape", [(7, 5), (4, 5, 3)], ids=["rank 2", "rank 3"])
def test_lazy_variables_expand_and_broadcast_as_loaded_ones_and_numpy_do(
    tmp_path: Path, shape: tuple[int, ...]
) -> None:
    """``expand_dims`` and ``xr.broadcast`` as users spell them; xarray alone broadcasts the
    lazy wrapper with ``np.broadcast_to`` (``Variable.set_dims``), which asks for dense values."""
    dense = random_dense(np.random.default_rng(len(shape)), shape, 0.4)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(dense, path)
    lazy = xr.open_dataset(path, engine="sporadik")["s"]
    loaded = xr.open_dataset(path, engine="sporadik")["s"].load()
    other = xr.DataArray(np.arange(3.0), dims="z")
    dims = lazy.dims
    wide = (*shape, 3)
    # each case, and numpy's answer with its dims
    cases: list[tuple[Callable[[xr.DataArray], xr.DataArray], Any, tuple[Hashable, ...]]] = [
        (lambda v: v.expand_dims("new"), dense[None], ("new", *dims)),
        (
            lambda v: v.expand_dims(new=3, axis=1),
            np.repeat(dense[:, None], 3, axis=1),
            (dims[0], "new", *dims[1:]),
        ),
        (
            lambda v: v.expand_dims({"a": 2, "b": 1}),
            np.broadcast_to(dense, (2, 1, *shape)),
            ("a", "b", *dims),
        ),
        (
            lambda v: xr.broadcast(v, other)[0],
            np.broadcast_to(dense[..., None], wide),
            (*dims, "z"),
        ),
        (
            lambda v: xr.broadcast(other, v)[1],
            np.broadcast_to(dense[..., None], wide),
            (*dims, "z"),
        ),
        (lambda v: v * other, dense[..., None] * np.arange(3.0), (*dims, "z")),
    ]
    for case, numpy, numpy_dims in cases:
        got, expected = case(lazy), case(loaded)
        assert isinstance(got.data, sparse.COO)
        assert got.dims == expected.dims and got.shape == expected.shape
        np.testing.assert_array_equal(got.data.todense(), expected.data.todense())
        np.testing.assert_array_equal(got.transpose(*numpy_dims).data.todense(), numpy)
    fresh = xr.open_dataset(path, engine="sporadik")["s"].variable
    assert backend_under(fresh.set_dims(fresh.dims)._data).backend is not None  # nothing read
    assert installed(next(p for p in PATCHES if p.symbol.endswith("Variable.set_dims")))
