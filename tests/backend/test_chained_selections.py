"""Chains of selections, in every way a store is opened, against numpy on the dense array.

A chain is resolved to positions before anything is read: negative steps after another
selection, integers after lists, masks and steps, and pointwise indexers leaving dims whole, which
``sparse`` 0.19, dask and xarray's lazy indexing each got wrong or refused."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
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
from sporadik_dask.read.dask_model import EXPRESSIONS
from tests.helpers import open_dataset, random_dense

SHAPES = {2: (11, 9), 3: (11, 9, 7)}
DIMS = ("a", "b", "c")
#: Every way to open a store: xarray lazily, with its preferred chunks and with small ones, loaded
#: into memory; and from_sporadik with its own blocks and with small ones.
MODES = (
    "lazy",
    "chunks={}",
    "chunks={'a': 5, 'b': 4}",
    "load",
    "from_sporadik",
    "from_sporadik chunks=(5, 4, 3)",
)

Chain = list[tuple[str, Any]]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[Path, npt.NDArray[Any]]]:
    """A store of each rank, written with a zarr chunk smaller than an axis, and its values."""
    made = {}
    for rank, shape in SHAPES.items():
        dense = random_dense(np.random.default_rng(rank), shape, 0.4)
        path = tmp_path_factory.mktemp("chained") / "s.zarr"
        dims = DIMS[:rank]
        data = xr.DataArray(sparse.COO.from_numpy(dense), dims=dims, name="x")
        sd.to_sporadik(data, path, chunk=16)
        made[rank] = (path, dense)
    return made


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # chunks separating stored chunks
        yield


def opened(path: Path, mode: str) -> Any:
    """The store at ``path`` opened in ``mode`` (one of :data:`MODES`)."""
    if mode == "from_sporadik":
        return sd.from_sporadik(path)
    if mode == "from_sporadik chunks=(5, 4, 3)":
        return sd.from_sporadik(path, chunks=(5, 4, 3)[: len(sd.StoreReader(path).shape)])
    chunks = {"lazy": None, "load": None, "chunks={}": {}}.get(mode, {"a": 5, "b": 4})
    variable = open_dataset(path, chunks=chunks)["x"]
    return variable.load() if mode == "load" else variable


def selected(array: Any, chain: Chain) -> npt.NDArray[Any]:
    """``chain`` applied to ``array`` (a DataArray by ``isel``, an array by numpy's keys), as
    dense numpy."""
    dims = list(DIMS[: array.ndim])
    for dim, part in chain:
        if isinstance(array, xr.DataArray):
            array = array.isel({dim: part})
        else:
            array = array[(slice(None),) * dims.index(dim) + (part,)]
        if np.ndim(part) == 0 and not isinstance(part, slice):
            dims.remove(dim)
    data = array.data if isinstance(array, xr.DataArray) else array
    data = data.compute() if hasattr(data, "compute") else data
    return data.todense() if hasattr(data, "todense") else np.asarray(data)


def assert_numpys(path: Path, dense: npt.NDArray[Any], chain: Chain, mode: str) -> None:
    expected = selected(dense, chain)
    got = selected(opened(path, mode), chain)
    assert (got.shape, got.dtype) == (expected.shape, expected.dtype), (mode, chain)
    np.testing.assert_array_equal(got, expected, err_msg=f"{mode}: {chain}")


@st.composite
def parts(draw: st.DrawFn, size: int) -> Any:
    """One axis's indexer: an integer, a slice of any step with bounds past either end, a list
    (unsorted, repeated, negative) or a mask."""
    kind = draw(st.sampled_from(["int", "slice", "list", "mask"] if size else ["slice", "mask"]))
    if kind == "int":
        return draw(st.integers(-size, size - 1))
    if kind == "slice":
        bound = st.none() | st.integers(-size - 3, size + 3)
        step = st.none() | st.integers(-3, 3).filter(lambda s: s != 0)
        return slice(draw(bound), draw(bound), draw(step))
    if kind == "list":
        listed = draw(st.lists(st.integers(-size, size - 1), max_size=6))
        return np.array(listed, dtype=np.int64)
    return np.array(draw(st.lists(st.booleans(), min_size=size, max_size=size)), dtype=bool)


@st.composite
def chains(draw: st.DrawFn, shape: tuple[int, ...]) -> Chain:
    """One to three selections, each along one of the dims still there."""
    sizes = dict(zip(DIMS, shape, strict=False))
    chain: Chain = []
    for _ in range(draw(st.integers(1, 3))):
        if not sizes:
            break
        dim = draw(st.sampled_from(sorted(sizes)))
        part = draw(parts(sizes[dim]))
        chain.append((dim, part))
        if np.ndim(part) == 0 and not isinstance(part, slice):
            del sizes[dim]
        else:
            sizes[dim] = len(np.arange(sizes[dim])[part])
    return chain


@pytest.mark.slow
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_random_chain_of_selections_gives_numpys_values_in_every_mode(
    stores: dict[int, tuple[Path, npt.NDArray[Any]]], data: st.DataObject
) -> None:
    path, dense = stores[data.draw(st.sampled_from(sorted(stores)), label="rank")]
    chain = data.draw(chains(dense.shape), label="chain")
    for mode in MODES:
        assert_numpys(path, dense, chain, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rank", sorted(SHAPES))
@pytest.mark.parametrize(
    "chain",
    [
        [("b", slice(None, -2, -2))],  # sparse reads it as every other position
        # dask cuts the step into per-block slices, which sparse reads wrongly
        [("a", slice(1, None)), ("a", slice(None, -8, -2))],
        [("b", slice(-20, None, -1))],  # xarray's lazy view read the whole axis reversed
        [("a", np.array([1, 3])), ("a", 0)],  # an integer after a list failed in np.diff
        [("a", slice(None, None, 2)), ("a", 1)],
        [("b", np.arange(9) % 3 == 0), ("a", -1), ("b", slice(None, None, -1))],
    ],
    ids=lambda chain: " then ".join(f"{dim}={part!r}".replace(" ", "") for dim, part in chain),
)
def test_the_chains_users_met_give_numpys_values(
    stores: dict[int, tuple[Path, npt.NDArray[Any]]], rank: int, mode: str, chain: Chain
) -> None:
    path, dense = stores[rank]
    assert_numpys(path, dense, chain, mode)


@pytest.mark.parametrize("mode", [m for m in MODES if not m.startswith("from_sporadik")])
@pytest.mark.parametrize(
    ("dims", "first"),
    [
        (("a", "b"), None),
        (("a", "c"), None),
        (("c", "b"), None),
        (("a", "b"), ("b", slice(1, None))),
        (("a", "c"), ("b", slice(None, None, -2))),
        (("a", "b"), ("c", 2)),
        (("c", "b"), ("a", np.array([3, 1, 1]))),
    ],
)
def test_pointwise_indexers_over_some_dims_read_the_cells_they_name(
    stores: dict[int, tuple[Path, npt.NDArray[Any]]],
    mode: str,
    dims: tuple[str, str],
    first: tuple[str, Any] | None,
) -> None:
    """The dims left whole follow the points' dim, as xarray puts them for a dense array."""
    if EXPRESSIONS and mode.startswith("chunks"):
        pytest.skip(
            "xarray moves a dask array's points' axis by moveaxis (and reads points by vindex), "
            "which dask's expression model lacks for any dask array"
        )
    path, dense = stores[3]
    expected = xr.DataArray(dense, dims=DIMS)
    variable = opened(path, mode)
    if first is not None:
        expected, variable = (
            expected.isel({first[0]: first[1]}),
            variable.isel({first[0]: first[1]}),
        )
    rng = np.random.default_rng(5)
    along = {
        dim: xr.DataArray(rng.integers(-expected.sizes[dim], expected.sizes[dim], 6), dims="p")
        for dim in dims
    }
    want = expected.isel(along)
    got = variable.isel(along)
    assert got.dims == want.dims
    data = got.data.compute() if hasattr(got.data, "compute") else got.data
    np.testing.assert_array_equal(data.todense(), want.values)


@pytest.mark.parametrize("chunks", ["auto", 3])
def test_from_sporadik_reads_points_beside_a_whole_axis_and_after_a_selection(
    stores: dict[int, tuple[Path, npt.NDArray[Any]]], chunks: Any
) -> None:
    path, dense = stores[3]
    x = sd.from_sporadik(path, chunks=chunks)
    rows, columns = np.array([1, -3, 1, 0]), np.array([0, 4, 4, -1])
    np.testing.assert_array_equal(
        x.vindex[rows, :, columns].compute().todense(), dense[rows, :, columns]
    )
    later = x[1:, ::-2]
    np.testing.assert_array_equal(
        later.vindex[rows, columns].compute().todense(), dense[1:, ::-2][rows, columns]
    )
