"""`from_sporadik(...)[key]` gives numpy's `dense[key]` for every key numpy takes, and a list, a
mask or a stepped slice of it is a new read of a window of the store, reading only its runs."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import numpy.typing as npt
import pytest
import sparse
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.storage import LocalStore

import sporadik_dask as sd
from sporadik_dask.read.dask_model import EXPRESSIONS, source_of
from sporadik_dask.read.window import SporadikArray
from tests.helpers import SHARDED_SLOW, RecordingStore, open_dataset, random_dense
from tests.read.test_indexing import Written, indexers
from tests.read.test_indexing import stores as stores  # rank 2 to 4, on every store kind


def backwards(size: int) -> st.SearchStrategy[slice]:
    """A slice with a negative step, bounds past either end too: the slices dask cuts into
    per-block slices that ``sparse`` 0.19 reads wrongly (one in ten over short axes)."""
    bound = st.none() | st.integers(-size - 2, size + 2)
    return st.builds(slice, bound, bound, st.integers(-3, -1))


@st.composite
def numpy_keys(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[Any, ...]:
    """A key numpy takes: an indexer of any kind per axis (one list, array or mask at most, so
    numpy's indexing is not pointwise), sometimes a position past an end, ``None`` or ``...``."""
    parts: list[Any] = []
    for size in shape:
        part = draw(indexers(size) | backwards(size))
        listed = any(not isinstance(p, (int, slice)) for p in parts)
        parts.append(slice(None) if listed and not isinstance(part, (int, slice)) else part)
    if draw(st.integers(0, 5)) == 0:  # past an end: numpy raises IndexError
        axis = draw(st.integers(0, len(shape) - 1))
        past = draw(st.sampled_from([-shape[axis] - 1, shape[axis]]))
        parts[axis] = [*parts[axis], past] if isinstance(parts[axis], list) else past
    if draw(st.booleans()):
        start = draw(st.integers(0, len(parts)))
        parts[start : draw(st.integers(start, len(parts)))] = [Ellipsis]
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), None)
    return tuple(parts)


def dense_of(result: Any) -> npt.NDArray[Any]:
    return result.todense() if hasattr(result, "todense") else np.asarray(result)


@pytest.mark.parametrize("module_store_kind", SHARDED_SLOW, indirect=True)
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_any_key_numpy_takes_gives_numpys_values_dtype_and_shape(
    stores: dict[int, Written], data: st.DataObject
) -> None:
    dense, where, options = stores[data.draw(st.sampled_from(sorted(stores)), label="rank")]
    chunks = tuple(data.draw(st.integers(1, size), label="block") for size in dense.shape)
    key = data.draw(numpy_keys(dense.shape), label="key")
    x = sd.from_sporadik(where, chunks=chunks, **options)
    try:
        expected = dense[key]
    except IndexError:
        with pytest.raises(IndexError):
            x[key]
        return
    got = dense_of(x[key].compute())
    assert (got.shape, got.dtype) == (expected.shape, expected.dtype)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    "key",
    [
        (slice(None), 0, Ellipsis, []),  # the ellipsis stands for no axis, and still parts them
        (slice(None), 0, Ellipsis, [3, 1, 1]),
        (0, Ellipsis, [2, 0]),
        (slice(None), 0, [3, 1]),  # side by side: the array's axis stays where it is
        ([4, 0], None, 1),
    ],
)
def test_an_array_and_an_integer_an_ellipsis_or_none_apart_go_first_as_in_numpy(
    stores: dict[int, Written], key: tuple[Any, ...]
) -> None:
    dense, where, options = stores[3]
    got = dense_of(sd.from_sporadik(where, chunks=(1, 1, 1), **options)[key].compute())
    assert got.shape == dense[key].shape
    np.testing.assert_array_equal(got, dense[key])


@pytest.mark.parametrize("key", [slice(None, 2, -3), slice(3, 2, -2), slice(None, -8, -2)])
def test_a_negative_step_across_blocks_gives_numpys_rows(tmp_path: Path, key: slice) -> None:
    """dask cuts these into per-block slices that sparse 0.19 reads wrongly."""
    dense = random_dense(np.random.default_rng(3), (13, 7), 0.5)
    sd.to_sporadik(dense, tmp_path / "s.zarr")
    x = sd.from_sporadik(tmp_path / "s.zarr", chunks=(4, 7))
    np.testing.assert_array_equal(x[key].compute().todense(), dense[key])


@pytest.mark.parametrize("key", [slice(None, 2, -3), slice(3, 2, -2), slice(None, -8, -2)])
def test_a_chunked_variable_takes_a_negative_step_as_numpy_does(tmp_path: Path, key: slice) -> None:
    """A stepped selection of a variable opened with ``chunks=`` is a read of the store, not
    dask's per-block slices that sparse gets wrong; its ``.data`` is a plain dask array, which
    xarray computes beside any other."""
    dense = random_dense(np.random.default_rng(3), (13, 7), 0.5)
    sd.to_sporadik(dense, tmp_path / "s.zarr")
    ds = open_dataset(tmp_path / "s.zarr", chunks={"dim_0": 4})
    variable = ds[next(iter(ds.data_vars))]
    assert type(variable.data) is da.Array
    picked = variable.isel(dim_0=key)
    assert type(picked.data) is da.Array
    np.testing.assert_array_equal(picked.data.compute().todense(), dense[key])


@pytest.mark.parametrize("axis", [0, 1])
def test_a_strip_split_into_blocks_gives_each_block_its_own_values_empty_blocks_too(
    tmp_path: Path, axis: int
) -> None:
    """A region of one axis in blocks of the other is read once, as a strip, and split: along
    the first axis by where each block starts among the strip's rows (C order), along another
    by sorting each value to its block."""
    dense = random_dense(np.random.default_rng(5), (12, 40), 0.4)
    dense[2:6] = 0  # two whole blocks of rows without a value
    dense[:, 8:12] = 0  # and one of columns
    stored = dense if axis == 0 else dense.T
    sd.to_sporadik(stored, tmp_path / "s.zarr", axes=(0, 1))
    ds = open_dataset(tmp_path / "s.zarr", chunks={f"dim_{axis}": 2})
    variable = ds[next(iter(ds.data_vars))]
    picked = variable.isel({f"dim_{1 - axis}": slice(3, 30)}).data
    expected = stored[(slice(None), slice(3, 30)) if axis == 0 else (slice(3, 30), slice(None))]
    with dask.config.set(scheduler="synchronous"):
        edges = [np.cumsum((0, *c)) for c in picked.chunks]
        # each block by its slice: dask's expression model has no .blocks
        for at in np.ndindex(*picked.numblocks):
            cut = tuple(slice(e[i], e[i + 1]) for e, i in zip(edges, at, strict=True))
            np.testing.assert_array_equal(picked[cut].compute().todense(), expected[cut])
        np.testing.assert_array_equal(picked.compute().todense(), expected)


@pytest.mark.parametrize("kind", ["list", "mask"])
def test_a_list_or_mask_of_from_sporadik_reads_only_its_runs(tmp_path: Path, kind: str) -> None:
    dense = random_dense(np.random.default_rng(7), (400, 300), 0.2)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(dense, path, chunk=64)
    store = RecordingStore(LocalStore(path, read_only=True))
    x = sd.from_sporadik(store, chunks=(100, 300))  # blocks of cells, read by the cell layout
    genes = np.array([250, 3, 3, 77]) if kind == "list" else np.arange(300) % 97 == 0
    store.reads.clear()
    picked = x[:, genes]
    np.testing.assert_array_equal(picked.compute().todense(), dense[:, genes])
    assert isinstance(picked, SporadikArray) and source_of(picked) is not None  # a read, no take
    runs = {key for key in store.reads if "/data/c/" in key or "/indices/c/" in key}
    everything = {str(p.relative_to(path)) for p in path.glob("layouts/axis1/*/c/*")}
    assert runs and all(key.startswith("layouts/axis1/") for key in runs)  # the gene layout
    assert len(runs) < len({key for key in everything if "indptr" not in key}) / 2


def test_a_selection_has_as_many_blocks_as_its_share_of_the_cells_fills(tmp_path: Path) -> None:
    """Blocks of a small selection would each be held beside their join (50,000 x 2,000
    scattered of 60,000 x 20,000 peaked at 3.4x the result): it is one block, read by one task,
    and a selection of most cells keeps the blocks of the store's read."""
    dense = random_dense(np.random.default_rng(8), (400, 300), 0.2)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(dense, path, chunk=64)
    x = sd.from_sporadik(path, chunks=(50, 300))
    rng = np.random.default_rng(9)
    cells, genes = rng.choice(400, 100, replace=False), rng.choice(300, 60, replace=False)
    small = x[cells][:, genes]
    assert small.numblocks == (1, 1)
    np.testing.assert_array_equal(small.compute().todense(), dense[cells][:, genes])
    most = rng.choice(400, 380, replace=False)
    large = x[most]
    assert large.numblocks == (8, 1)
    np.testing.assert_array_equal(large.compute().todense(), dense[most])


def test_integers_and_plain_slices_are_reads_of_a_window_in_the_blocks_dask_gives(
    tmp_path: Path,
) -> None:
    """So a selection of a selection is still one read, of the positions the chain resolves to,
    and never dask's per-block slices of sparse blocks."""
    dense = random_dense(np.random.default_rng(1), (9, 8), 0.4)
    sd.to_sporadik(dense, tmp_path / "s.zarr")
    x = sd.from_sporadik(tmp_path / "s.zarr", chunks=(3, 4))
    for key in [(slice(2, 7),), (1, slice(None)), (Ellipsis, slice(-5, None)), (slice(1, None), 2)]:
        got: Any = x[key]
        np.testing.assert_array_equal(dense_of(got.compute()), dense[key])
        assert isinstance(got, SporadikArray) and source_of(got) is not None, key
        assert got.chunks == da.Array.__getitem__(x, key).chunks, key
    expanded: Any = x[None, 3]
    np.testing.assert_array_equal(dense_of(expanded.compute()), dense[None, 3])
    with pytest.raises(NotImplementedError):  # two arrays: dask's own refusal, as before
        x[[0, 1], [2, 3]]


def test_a_selection_pickles_tokenizes_and_computes_with_others(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(2), (9, 8), 0.4)
    sd.to_sporadik(dense, tmp_path / "s.zarr")
    x = sd.from_sporadik(tmp_path / "s.zarr", chunks=(3, 4))
    stepped = x[::-2, [5, 0, 5]]
    assert stepped.name == x[::-2, [5, 0, 5]].name != x[::-2, [5, 0]].name
    copy = pickle.loads(pickle.dumps(stepped))
    assert type(copy) is SporadikArray and source_of(copy) is not None
    if not EXPRESSIONS:  # the expression model tokenizes the sparse meta, as pickled
        assert dask.base.tokenize(copy) == dask.base.tokenize(stepped)
    both = dask.compute(copy, x[[4, 4]][:, ::-3])
    np.testing.assert_array_equal(both[0].todense(), dense[::-2][:, [5, 0, 5]])
    np.testing.assert_array_equal(both[1].todense(), dense[[4, 4]][:, ::-3])


def test_a_selection_of_gcxs_blocks_reads_coo_blocks_with_coo_meta(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(4), (9, 8), 0.4)
    sd.to_sporadik(dense, tmp_path / "s.zarr")
    x = sd.from_sporadik(tmp_path / "s.zarr", chunks=(3, 8), format="gcxs")
    assert isinstance(x._meta, sparse.GCXS) and isinstance(x[2:5]._meta, sparse.GCXS)
    picked = x[::-2, [7, 1]]
    assert isinstance(picked._meta, sparse.COO)
    result = picked.compute()
    assert isinstance(result, sparse.COO)
    np.testing.assert_array_equal(result.todense(), dense[::-2][:, [7, 1]])


def test_pointwise_keys_of_a_chunked_variable_and_of_from_sporadik_are_reads(
    tmp_path: Path,
) -> None:
    """dask's own vindex of sparse blocks fails in sparse (an item assignment into a COO, or an
    overflow of a uint8 position); each of these reads the cells' runs instead."""
    dense = random_dense(np.random.default_rng(11), (300, 40), 0.2)
    sd.to_sporadik(dense, tmp_path / "s.zarr", chunk=64)
    rng = np.random.default_rng(12)
    rows, columns = rng.integers(-300, 300, (5, 60)), rng.integers(0, 40, (5, 60))
    x = sd.from_sporadik(tmp_path / "s.zarr", chunks=(100, 40))
    picked = x.vindex[rows, columns]
    assert picked.shape == (5, 60)
    np.testing.assert_array_equal(picked.compute().todense(), dense[rows, columns])
    ds = open_dataset(tmp_path / "s.zarr", chunks={})
    variable = ds[next(iter(ds.data_vars))]
    along = {
        "dim_0": xr.DataArray(rows, dims=("a", "b")),
        "dim_1": xr.DataArray(columns, dims=("a", "b")),
    }
    got = variable.isel(along)
    assert type(got.data) is da.Array
    np.testing.assert_array_equal(got.compute().data.todense(), dense[rows, columns])
    with pytest.raises(IndexError):
        x.vindex[np.array([300]), np.array([0])].compute()
