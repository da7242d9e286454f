"""Selections of a variable once it is in memory (``.load()``): numpy's values, C order, by the
same assembly a read from the store uses, not ``sparse``'s indexing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import sparse
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import sporadik_dask as sd
from sporadik_dask.backend.loaded import select_loaded
from tests.helpers import first_block, random_dense


def _outer(dense: npt.NDArray[Any], key: tuple[Any, ...]) -> npt.NDArray[Any]:
    """numpy's outer (orthogonal) indexing, one axis at a time."""
    for axis in reversed(range(dense.ndim)):
        dense = dense[(slice(None),) * axis + (key[axis],)]
    return dense


def _c_ordered(array: sparse.COO) -> bool:
    linear = np.ravel_multi_index(tuple(array.coords), array.shape)
    return bool(np.all(linear[1:] > linear[:-1]))


@st.composite
def _part(draw: st.DrawFn, size: int) -> Any:
    kind = draw(st.sampled_from(["whole", "mask", "list", "int", "step"]))
    if kind == "whole":
        return slice(None)
    if kind == "mask":
        return np.array(draw(st.lists(st.booleans(), min_size=size, max_size=size)))
    if kind == "list":  # unsorted, repeated and negative positions
        return np.array(draw(st.lists(st.integers(-size, size - 1), max_size=6)), dtype=np.int64)
    if kind == "int":
        return draw(st.integers(0, size - 1))
    return slice(draw(st.integers(0, size - 1)), None, draw(st.integers(1, 3)))


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    shape=st.lists(st.integers(1, 6), min_size=2, max_size=4),
    data=st.data(),
)
def test_an_outer_selection_in_memory_is_numpys_in_c_order(
    seed: int, shape: list[int], data: st.DataObject
) -> None:
    dense = random_dense(np.random.default_rng(seed), tuple(shape), 0.4, np.float32)
    key = tuple(data.draw(_part(size)) for size in shape)
    got = select_loaded(sparse.COO.from_numpy(dense), key)
    if not any(isinstance(part, np.ndarray) for part in key):
        assert got is None  # basic keys stay sparse's
        return
    expected = _outer(dense, key)
    if isinstance(got, sparse.COO):
        np.testing.assert_array_equal(got.todense(), expected)
        assert got.dtype == dense.dtype
        assert got.nnz == 0 or _c_ordered(got)
    else:
        np.testing.assert_array_equal(got, expected)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, npt.NDArray[Any]]:
    dense = random_dense(np.random.default_rng(5), (50, 40), 0.2, np.int32)
    path = tmp_path_factory.mktemp("h") / "s.zarr"
    cells = [f"c{i}" for i in range(50)]
    genes = [f"g{i}" for i in range(40)]
    array = xr.DataArray(
        sparse.COO.from_numpy(dense),
        dims=("cell", "gene"),
        coords={"cell": cells, "gene": genes},
        name="x",
    )
    sd.to_sporadik(array, path)
    return path, dense


@pytest.mark.slow
def test_a_loaded_variable_selects_as_the_store_does(store: tuple[Path, npt.NDArray[Any]]) -> None:
    path, _ = store
    lazy = xr.open_dataset(path, engine="sporadik")["x"]
    loaded = xr.open_dataset(path, engine="sporadik")["x"].load()
    assert isinstance(loaded.variable._data, sparse.COO)
    cached = xr.open_dataset(path, engine="sporadik")["x"]
    assert isinstance(cached.data, sparse.COO)  # xarray keeps what .data read, in memory
    mask = np.random.default_rng(1).random(50) < 0.6
    names = ["g7", "g3", "g3", "g30", "g0"]
    selections: list[Callable[[xr.DataArray], xr.DataArray]] = [
        lambda x: x.sel(cell=mask),
        lambda x: x.sel(gene=names),
        lambda x: x.isel(cell=[9, 2, 2, -1], gene=slice(None, None, 2)),
        lambda x: x.sel(cell=x.cell[mask], gene=names),
    ]
    for select in selections:
        reference = select(lazy)
        for got in (select(loaded), select(cached)):
            assert isinstance(got.data, sparse.COO)
            np.testing.assert_array_equal(got.data.todense(), reference.data.todense())
            assert list(got.gene.values) == list(reference.gene.values)
            assert _c_ordered(got.data)


def test_pushdown_false_leaves_a_loaded_selection_to_sparse(
    store: tuple[Path, npt.NDArray[Any]],
) -> None:
    import dask

    path, dense = store
    loaded = xr.open_dataset(path, engine="sporadik")["x"].load()
    with dask.config.set({"sporadik.pushdown": False}):
        assert select_loaded(loaded.data, (np.array([3, 1]), slice(None))) is None
        got = loaded.isel(cell=[3, 1])
    np.testing.assert_array_equal(got.data.todense(), dense[[3, 1]])


def test_a_loaded_variable_takes_pointwise_indexers_as_the_lazy_one_does(
    store: tuple[Path, npt.NDArray[Any]],
) -> None:
    """xarray refuses vectorized indexing of a ``sparse.COO`` it holds ("Vectorized indexing is
    not supported"), where the lazy variable takes it."""
    path, dense = store
    lazy = xr.open_dataset(path, engine="sporadik")["x"]
    loaded = xr.open_dataset(path, engine="sporadik")["x"].load()
    cells = np.array([[3, 3, 49], [0, 17, 3]])
    genes = np.array([[5, 5, 0], [39, 2, 5]])
    selections: list[Callable[[xr.DataArray], xr.DataArray]] = [
        lambda x: x.isel(
            cell=xr.DataArray(cells, dims=("p", "q")), gene=xr.DataArray(genes, dims=("p", "q"))
        ),
        lambda x: x.isel(cell=xr.DataArray([7, 1], dims="p"), gene=xr.DataArray([0, 39], dims="p")),
        lambda x: x.isel(
            cell=xr.DataArray(np.zeros(0, dtype=int), dims="p"),
            gene=xr.DataArray(np.zeros(0, dtype=int), dims="p"),
        ),
    ]
    for select in selections:
        got, reference = select(loaded), select(lazy)
        assert got.dims == reference.dims
        np.testing.assert_array_equal(
            np.asarray(got.data.todense()), np.asarray(reference.data.todense())
        )
    expected = dense[cells, genes]
    np.testing.assert_array_equal(selections[0](loaded).data.todense(), expected)


def test_chunking_a_variable_after_its_data_was_read_keeps_blocks_sparse(
    store: tuple[Path, npt.NDArray[Any]],
) -> None:
    """Once ``.data`` was read, xarray holds the ``sparse.COO``; its dask manager would chunk it
    with numpy meta and dense blocks."""
    path, dense = store
    ds = xr.open_dataset(path, engine="sporadik")
    assert isinstance(ds["x"].data, sparse.COO)  # read, and kept by xarray
    chunked = ds.chunk({"cell": 7})["x"]
    assert isinstance(chunked.data._meta, sparse.COO)
    assert isinstance(first_block(chunked.data), sparse.COO)
    np.testing.assert_array_equal(chunked.data.compute().todense(), dense)
    np.testing.assert_array_equal(chunked.sum("cell").compute().values, dense.sum(axis=0))
