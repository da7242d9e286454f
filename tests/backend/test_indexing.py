"""Every indexer through xarray, lazily and with chunks=, against the dense numpy array."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import sparse
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sporadik_dask as sd
from sporadik_dask.read.dask_model import names_beneath
from tests.helpers import open_dataset, random_dense

SHAPES = {2: (23, 17), 3: (11, 9, 7), 4: (6, 5, 4, 7)}
DIMS = ("cell", "gene", "spot", "scan")


@pytest.fixture(scope="module", params=sorted(SHAPES))
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, npt.NDArray[Any]]:
    shape = SHAPES[request.param]
    dense = random_dense(np.random.default_rng(request.param), shape, 0.3)
    path = tmp_path_factory.mktemp("i") / "s.zarr"
    dims = DIMS[: len(shape)]
    sd.to_sporadik(xr.DataArray(sparse.COO.from_numpy(dense), dims=dims, name="x"), path, chunk=16)
    return path, dense


@st.composite
def indexer(draw: st.DrawFn, size: int) -> int | slice | npt.NDArray[np.int64 | np.bool]:
    """One axis's indexer of any kind xarray users write."""
    kind = draw(st.sampled_from(["int", "slice", "array", "mask", "empty"]))
    if kind == "int":
        return draw(st.integers(-size, size - 1))
    if kind == "slice":
        # not below -size: dask, and xarray over any backend, read slice(-size - 1, None, -1)
        # as the whole axis reversed, where numpy reads nothing
        bound = st.none() | st.integers(-size, size + 2)
        step = draw(st.none() | st.integers(-3, 3).filter(lambda s: s != 0))
        return slice(draw(bound), draw(bound), step)
    if kind == "array":  # unsorted, repeated, negative
        return np.array(draw(st.lists(st.integers(-size, size - 1), min_size=1, max_size=12)))
    if kind == "mask":
        return np.array(draw(st.lists(st.booleans(), min_size=size, max_size=size)))
    return np.zeros(0, dtype=np.int64)


@pytest.mark.slow
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_indexer_reads_numpys_values_lazily_and_through_dask(
    store: tuple[Path, npt.NDArray[Any]], data: st.DataObject
) -> None:
    path, dense = store
    dims = DIMS[: dense.ndim]
    picked = {
        dim: data.draw(indexer(size), label=dim)
        for dim, size in zip(dims, dense.shape, strict=True)
    }
    expected = xr.DataArray(dense, dims=dims).isel(picked)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # chunks separating stored chunks
        for chunks in (None, {"cell": 5}):
            variable = xr.open_dataset(path, engine="sporadik", chunks=chunks)["x"]
            got = variable.isel(picked)
            values = got.data.compute() if chunks is not None else got.data
            values = values.todense() if hasattr(values, "todense") else np.asarray(values)
            assert got.dims == expected.dims
            assert values.dtype == dense.dtype
            np.testing.assert_array_equal(values, expected.values)


def test_pointwise_indexers_read_the_cells_they_name(store: tuple[Path, npt.NDArray[Any]]) -> None:
    path, dense = store
    rng = np.random.default_rng(0)
    points = {
        d: xr.DataArray(rng.integers(-s, s, 30), dims="p")
        for d, s in zip(DIMS, dense.shape, strict=False)
    }
    got = xr.open_dataset(path, engine="sporadik")["x"].isel(points)
    expected = xr.DataArray(dense, dims=DIMS[: dense.ndim]).isel(points)
    assert got.dims == ("p",)
    np.testing.assert_array_equal(got.data.todense(), expected.values)


@pytest.mark.parametrize("key", [-24, 23, [3, -24], [0, 23]])
def test_a_position_past_either_end_raises_index_error(
    store: tuple[Path, npt.NDArray[Any]], key: Any
) -> None:
    path, dense = store
    if dense.shape[0] != 23:
        pytest.skip("sized for the rank-2 store")
    variable = xr.open_dataset(path, engine="sporadik")["x"]
    with pytest.raises(IndexError):
        variable.isel(cell=key)
    with pytest.raises(IndexError):
        np.asarray(dense)[(key,)]  # as numpy


@pytest.mark.parametrize("kind", ["list", "mask"])
def test_a_chunked_selection_with_a_list_or_mask_reads_only_its_runs(
    tmp_path: Path, kind: str
) -> None:
    from zarr.storage import LocalStore

    from tests.helpers import RecordingStore

    dense = random_dense(np.random.default_rng(7), (400, 300), 0.2)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(xr.DataArray(dense, dims=("cell", "gene"), name="x"), path, chunk=64)
    store = RecordingStore(LocalStore(path, read_only=True))
    variable = open_dataset(store, chunks={"cell": 100})["x"]
    genes = np.array([250, 3, 3, 77]) if kind == "list" else np.arange(300) % 97 == 0
    store.reads.clear()
    picked = variable.isel(gene=genes)
    assert not any("getitem" in name for name in names_beneath(picked.data))
    values = picked.data.compute()
    np.testing.assert_array_equal(values.todense(), dense[:, genes])
    runs = {key for key in store.reads if "/data/c/" in key or "/indices/c/" in key}
    everything = {str(p.relative_to(path)) for p in path.glob("layouts/*/*/c/*")}
    assert runs and all(key.startswith("layouts/axis1/") for key in runs)  # the gene layout
    assert len(runs) < len({k for k in everything if "axis1" in k and "indptr" not in k}) / 2


def test_a_stepped_slice_through_dask_reads_numpys_values(
    store: tuple[Path, npt.NDArray[Any]],
) -> None:
    """dask cuts [:-8:-2] into per-block slices that sparse reads wrongly (6 values for 4)."""
    path, dense = store
    picked = {"cell": slice(None, -8, -2), "gene": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        variable = xr.open_dataset(path, engine="sporadik", chunks={"cell": 5})["x"]
    got = variable.isel(picked).data.compute()
    expected = xr.DataArray(dense, dims=DIMS[: dense.ndim]).isel(picked).values
    np.testing.assert_array_equal(got.todense(), expected)
