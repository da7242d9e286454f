"""Reads: every selection through the reader, xarray (lazy and chunked) and `from_sporadik` gives
the dense array's values; routing, waves and request counts are measured at the store."""

from __future__ import annotations

import asyncio
import itertools
import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import sparse
import xarray as xr
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.storage import LocalStore

import sporadik_dask as sd
from sporadik_dask.backend.entrypoint import SporadikBackendEntrypoint
from tests.helpers import (
    S3_SLOW,
    RecordingStore,
    StoreKind,
    first_block,
    labelled,
    open_dataset,
    random_dense,
    stored,
    write_reference,
    zarr_array,
)


def outer(dense: npt.NDArray[Any], key: tuple[Any, ...]) -> npt.NDArray[Any]:
    """``key`` applied to ``dense`` one axis at a time (xarray's outer indexing)."""
    result = dense
    dropped = []
    for axis, part in enumerate(key):
        if isinstance(part, (int, np.integer)):
            result = np.take(result, [int(part)], axis=axis)
            dropped.append(axis)
        elif isinstance(part, slice):
            result = result[(slice(None),) * axis + (part,)]
        else:
            result = np.take(result, np.asarray(part, dtype=int), axis=axis)
    return result.reshape([s for a, s in enumerate(result.shape) if a not in dropped])


def indexer(size: int, backwards: bool = True) -> st.SearchStrategy[Any]:
    """An int, a slice with a step, or a list with repeats and negatives, along one axis.

    ``backwards=False`` leaves out negative steps, which xarray's own outer-indexing
    decomposition fails on when the slice is empty (an IndexError inside xarray, any backend).
    """
    steps = st.integers(-3, -1) if backwards else st.integers(1, 3)
    positions = st.integers(-size, size - 1) if size else st.nothing()
    return st.one_of(
        positions,
        st.builds(
            slice,
            st.one_of(st.none(), st.integers(-size - 1, size)),
            st.one_of(st.none(), st.integers(-size - 1, size)),
            st.one_of(st.none(), st.integers(1, 3), steps),
        ),
        st.lists(positions, min_size=0, max_size=5) if size else st.just([]),
    )


@st.composite
def stores(
    draw: st.DrawFn, backwards: bool = True
) -> tuple[npt.NDArray[Any], dict[int, tuple[int, ...]], tuple[Any, ...]]:
    rank = draw(st.integers(2, 4))
    shape = tuple(draw(st.lists(st.integers(0, 6), min_size=rank, max_size=rank)))
    axes = draw(st.sets(st.integers(0, rank - 1), min_size=1))
    orders = {
        axis: tuple(draw(st.permutations([a for a in range(rank) if a != axis]))) for axis in axes
    }
    density = draw(st.floats(0, 1))
    seed = draw(st.integers(0, 2**16))
    dense = random_dense(np.random.default_rng(seed), shape, density)
    key = tuple(draw(indexer(size, backwards)) for size in shape)
    return dense, orders, key


SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(case=stores())
def test_any_selection_reads_the_dense_values_through_the_reader(
    tmp_path_factory: pytest.TempPathFactory, case: Any
) -> None:
    dense, orders, key = case
    path = write_reference(tmp_path_factory.mktemp("s") / "s.zarr", dense, orders, chunk=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sd.ScanWarning)
        result = sd.StoreReader(path).read(key)
    if all(isinstance(part, int) for part in key):  # one cell: a scalar, as in numpy
        assert np.ndim(result) == 0
        result = sparse.COO.from_numpy(np.asarray(result))
    assert isinstance(result, sparse.COO)
    if result.ndim:  # C order, as sparse.COO(sorted=True) promises
        assert np.all(np.diff(np.ravel_multi_index(tuple(result.coords), result.shape)) > 0)
    np.testing.assert_array_equal(result.todense(), outer(dense, key))


@pytest.mark.slow
@SETTINGS
@given(case=stores(backwards=False))
def test_any_selection_reads_the_dense_values_through_xarray_lazily_and_chunked(
    tmp_path_factory: pytest.TempPathFactory, case: Any
) -> None:
    dense, orders, key = case
    path = write_reference(tmp_path_factory.mktemp("s") / "s.zarr", dense, orders, chunk=5)
    dims = [f"dim_{a}" for a in range(dense.ndim)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sd.ScanWarning)
        warnings.filterwarnings("ignore", "The specified chunks separate", UserWarning)
        lazy = xr.open_dataset(path, engine="sporadik")["s"]
        chunked = xr.open_dataset(path, engine="sporadik", chunks={dims[0]: 2})["s"]
        selection = dict(zip(dims, key, strict=True))
        expected = outer(dense, key)
        lazy_data = lazy.isel(selection).data
        computed = chunked.isel(selection).data.compute()
        for result in (lazy_data, computed):
            if expected.ndim:
                assert isinstance(result, sparse.COO)
                result = result.todense()
            np.testing.assert_array_equal(result, expected)


#: Each rank in each chunking on a local directory, a memory store and a sharded store; on the
#: S3 server (every chunk a request, each case seconds) the rank-4 store in blocks of its own.
#: The quick set keeps that case alone of the sharded ones: the others' blocks are the local ones'.
FROM_SPORADIK_CASES = [
    pytest.param(
        rank,
        chunks,
        store,
        marks=[pytest.mark.slow]
        if store == "s3" or (store == "sharded" and (rank, chunks) != (4, (5, 4, 2, 4)))
        else [],
    )
    for store in ("local", "memory", "sharded", "s3")
    for rank in (2, 3, 4)
    for chunks in ("auto", 3, (5, 4, 2, 4))
    if store != "s3" or (rank, chunks) == (4, (5, 4, 2, 4))
]


@pytest.mark.parametrize(
    ("rank", "chunks", "store_kind"), FROM_SPORADIK_CASES, indirect=["store_kind"]
)
def test_from_sporadik_gives_sparse_chunks_with_the_dense_values(
    tmp_path: Path, store_kind: StoreKind, rank: int, chunks: Any
) -> None:
    shape = (9, 7, 5, 4)[:rank]
    dense = random_dense(np.random.default_rng(rank), shape, 0.3)
    orders = {a: tuple(reversed([o for o in range(rank) if o != a])) for a in range(rank)}
    where = store_kind.holding_reference(dense, orders, 7, tmp_path)
    blocks = chunks[:rank] if isinstance(chunks, tuple) else chunks
    for axis in range(rank):
        x = sd.from_sporadik(where, chunks=blocks, axis=axis, **store_kind.options)
        assert isinstance(x._meta, sparse.COO)
        np.testing.assert_array_equal(x.compute().todense(), dense)
        np.testing.assert_array_equal(x.sum(axis=0).compute().todense(), dense.sum(axis=0))


@pytest.mark.parametrize("store_kind", S3_SLOW, indirect=True)
@pytest.mark.parametrize("rank", [2, 3])
def test_gcxs_chunks_are_the_layouts_own_arrays_and_hold_the_dense_values(
    tmp_path: Path, store_kind: StoreKind, rank: int
) -> None:
    shape = (9, 7, 5)[:rank]
    dense = random_dense(np.random.default_rng(rank), shape, 0.3)
    orders = {a: tuple(o for o in range(rank) if o != a) for a in range(rank)}
    where = store_kind.holding_reference(dense, orders, 7, tmp_path)
    for axis in range(rank):
        whole = sd.from_sporadik(
            where,
            axis=axis,
            format="gcxs",
            chunks=tuple(3 if a == axis else size for a, size in enumerate(shape)),
            **store_kind.options,
        )
        assert isinstance(whole._meta, sparse.GCXS)
        block = first_block(whole)
        assert isinstance(block, sparse.GCXS) and block.compressed_axes == (axis,)
        np.testing.assert_array_equal(whole.compute().todense(), dense)
        other = (axis + 1) % rank
        np.testing.assert_array_equal(
            whole.sum(axis=other).compute().todense(), dense.sum(axis=other)
        )
        split = sd.from_sporadik(where, axis=axis, format="gcxs", chunks=2, **store_kind.options)
        np.testing.assert_array_equal(split.compute().todense(), dense)


@pytest.mark.slow
def test_gcxs_of_float16_values_is_refused_naming_the_cause_and_coo_still_reads(
    tmp_path: Path,
) -> None:
    dense = random_dense(np.random.default_rng(2), (9, 7), 0.3, np.float16)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(dense, path)
    with pytest.raises(sd.SporadikError, match=r"float16.*numba.*format='coo'"):
        sd.from_sporadik(path, format="gcxs")
    with pytest.raises(sd.SporadikError, match="float16"):
        sd.StoreReader(path, axis=0, format="gcxs")
    coo = sd.from_sporadik(path, format="coo", chunks=4)
    np.testing.assert_array_equal(coo.compute().todense(), dense)
    gcxs = coo.astype(np.float32).map_blocks(lambda b: b.asformat("gcxs", compressed_axes=(0,)))
    np.testing.assert_array_equal(gcxs.compute().todense(), dense.astype(np.float32))


def test_auto_chunks_balance_values_along_the_indexed_axis(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(1), (400, 60), 0.2)
    dense[:5] = 7  # five heavy positions
    path = write_reference(tmp_path / "s.zarr", dense, {0: (1,)}, chunk=64)
    import dask

    with dask.config.set({"array.chunk-size": "10kB"}):
        x = sd.from_sporadik(path)
    assert x.chunks[1] == (60,)
    per_block = [np.count_nonzero(b) for b in np.split(dense, np.cumsum(x.chunks[0])[:-1])]
    assert len(per_block) > 3 and max(per_block) <= 2 * np.median(per_block) + 64
    np.testing.assert_array_equal(x.compute().todense(), dense)


def _store(tmp_path: Path, orders: dict[int, tuple[int, ...]]) -> tuple[Path, npt.NDArray[Any]]:
    dense = random_dense(np.random.default_rng(2), (300, 200), 0.1)
    return write_reference(tmp_path / "s.zarr", dense, orders, chunk=256), dense


def test_opening_with_xarray_reads_metadata_documents_only(tmp_path: Path) -> None:
    path, _ = _store(tmp_path, {0: (1,), 1: (0,)})
    store = RecordingStore(LocalStore(path, read_only=True))
    ds = open_dataset(store)
    assert ds["data"].shape == (300, 200)
    assert store.reads and all(key.endswith("zarr.json") for key in store.reads), store.reads


def test_a_batch_of_positions_costs_two_waves_and_reads_each_chunk_once(tmp_path: Path) -> None:
    path, dense = _store(tmp_path, {0: (1,), 1: (0,)})
    store = RecordingStore(LocalStore(path, read_only=True))
    reader = sd.StoreReader(store)
    store.reads.clear()
    columns = np.random.default_rng(3).choice(200, 40, replace=False)
    result = reader.read((slice(None), columns))
    np.testing.assert_array_equal(result.todense(), dense[:, columns])
    chunk_reads = [key for key in store.reads if not key.endswith("zarr.json")]
    assert len(chunk_reads) == len(set(chunk_reads))  # no chunk fetched twice
    assert all(key.startswith("layouts/axis1/") for key in chunk_reads)  # routed to columns
    first_run_read = min(i for i, k in enumerate(chunk_reads) if "/indptr/" not in k)
    assert all("/indptr/" not in k for k in chunk_reads[first_run_read:])  # wave 1, then wave 2


def test_a_selection_on_two_axes_reads_through_the_layout_touching_fewer_chunks(
    tmp_path: Path,
) -> None:
    path, dense = _store(tmp_path, {0: (1,), 1: (0,)})
    store = RecordingStore(LocalStore(path, read_only=True))
    reader = sd.StoreReader(store)
    store.reads.clear()
    rows, cols = np.arange(0, 300, 2), np.array([5, 9])  # half the rows, two columns
    np.testing.assert_array_equal(reader.read((rows, cols)).todense(), dense[np.ix_(rows, cols)])
    runs = {k.split("/")[1] for k in store.reads if ("/data/c/" in k or "/indices/c/" in k)}
    assert runs == {"axis1"}


def _run_gets(store: RecordingStore) -> list[str]:
    return [k for k in store.reads if "/data/c/" in k or "/indices/c/" in k]


def test_a_range_of_cells_and_scattered_genes_reads_the_layout_with_fewer_requests(
    tmp_path: Path,
) -> None:
    """Shaped like 100,000 x 8,000 with cells 10,000:12,000 x 100 genes: the gene layout holds
    fewer of the values asked for, but they lie in as many places as there are genes."""
    dense = random_dense(np.random.default_rng(9), (4_000, 400), 0.02)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(dense, path, chunk=256)
    cells = slice(1_000, 1_200)
    genes = np.sort(np.random.default_rng(10).choice(400, 10, replace=False))
    store = RecordingStore(LocalStore(path, read_only=True))
    reader = sd.StoreReader(store)
    costs = {}
    for axis in (0, 1):
        store.reads.clear()
        np.testing.assert_array_equal(
            reader.read((cells, genes), axis=axis).todense(), dense[cells][:, genes]
        )
        costs[axis] = len(_run_gets(store))
    held = {0: np.count_nonzero(dense[cells]), 1: np.count_nonzero(dense[:, genes])}
    assert held[1] < held[0] and costs[0] < costs[1]  # the finding's shape
    store.reads.clear()
    np.testing.assert_array_equal(reader.read((cells, genes)).todense(), dense[cells][:, genes])
    gets = _run_gets(store)
    assert {k.split("/")[1] for k in gets} == {"axis0"} and len(gets) == costs[0]
    assert reader.route((cells, genes)).requests == costs[0]  # counted before, from indptr


def test_a_selection_on_two_axes_costs_two_waves_and_reads_each_indptr_chunk_once(
    tmp_path: Path,
) -> None:
    path, dense = _store(tmp_path, {0: (1,), 1: (0,)})
    store = RecordingStore(LocalStore(path, read_only=True))
    reader = sd.StoreReader(store)
    store.reads.clear()
    rows, cols = np.arange(10, 20), np.array([150, 3, 3])
    np.testing.assert_array_equal(reader.read((rows, cols)).todense(), dense[np.ix_(rows, cols)])
    chunk_reads = [key for key in store.reads if "/c/" in key]
    assert len(chunk_reads) == len(set(chunk_reads))  # the chosen layout's brackets are reused
    waves = ["indptr" if "/indptr/" in key else "runs" for key in chunk_reads]
    assert waves == sorted(waves)  # every bracket, then every run


def test_a_selection_no_layout_compresses_is_a_scan_with_a_warning(tmp_path: Path) -> None:
    path, dense = _store(tmp_path, {0: (1,)})
    with pytest.warns(sd.ScanWarning, match=r"add_axis\(store, 1\)"):
        result = sd.StoreReader(path).read((slice(None), [4, 8]))
    np.testing.assert_array_equal(result.todense(), dense[:, [4, 8]])


def test_a_corrupt_index_is_refused_where_it_is_read(tmp_path: Path) -> None:
    path, _ = _store(tmp_path, {0: (1,)})
    zarr.open_array(path / "layouts" / "axis0" / "indices", mode="r+")[0] = 10_000
    with pytest.raises(sd.LayoutError, match="outside the raveled extent 200"):
        sd.StoreReader(path).read((slice(0, 3),))


def test_a_reader_pickles_as_a_location_and_reads_inside_an_event_loop(tmp_path: Path) -> None:
    path, dense = _store(tmp_path, {0: (1,), 1: (0,)})
    reader = sd.StoreReader(path)
    reader.read((0,))
    assert reader._opened is not None
    copy: sd.StoreReader = pickle.loads(pickle.dumps(reader))
    assert copy._opened is None

    async def in_a_notebook_cell() -> npt.NDArray[Any]:
        return np.asarray(copy.read((slice(None), 3)).todense())

    np.testing.assert_array_equal(asyncio.run(in_a_notebook_cell()), dense[:, 3])


def test_guess_can_open_says_yes_only_for_a_store_with_a_block(tmp_path: Path) -> None:
    path, _ = _store(tmp_path, {0: (1,)})
    plain = zarr.open_group(tmp_path / "plain.zarr", mode="w")
    plain.create_array("x", shape=(3,), dtype="f4")
    entry = SporadikBackendEntrypoint()
    assert entry.guess_can_open(path)
    assert entry.guess_can_open(str(path))
    for other in (tmp_path / "plain.zarr", tmp_path / "missing.zarr", 42, None, "s3://b/x"):
        assert entry.guess_can_open(other) is False
    assert "sporadik" in xr.backends.list_engines()


@pytest.mark.parametrize("store_kind", S3_SLOW, indirect=True)
def test_a_written_dataarray_opens_with_its_labels(store_kind: StoreKind) -> None:
    dense = random_dense(np.random.default_rng(4), (6, 4), 0.5)
    where, options = store_kind.store, store_kind.options
    sd.to_sporadik(labelled(sparse.COO.from_numpy(dense)), where, **store_kind.writing(), **options)
    opened = open_dataset(where, **options)["counts"]
    assert opened.name == "counts" and opened.dims == ("cell", "gene")
    assert opened.attrs == {"units": "reads"}
    assert list(opened["gene"].values) == ["a", "b", "c", "d"]
    picked = opened.sel(gene=["c", "a"]).data
    np.testing.assert_array_equal(picked.todense(), dense[:, [2, 0]])


def test_per_position_counts_and_maxima_come_without_reading_values(
    tmp_path: Path, store_kind: StoreKind
) -> None:
    dense = random_dense(np.random.default_rng(2), (300, 200), 0.1)
    where = store_kind.holding_reference(dense, {0: (1,), 1: (0,)}, 256, tmp_path)
    (opened,) = open_dataset(where, **store_kind.options).data_vars.values()
    np.testing.assert_array_equal(opened.sporadik.nnz("dim_1"), np.count_nonzero(dense, axis=0))
    np.testing.assert_array_equal(opened.sporadik.maxima("dim_0"), np.abs(dense).max(axis=1))
    with pytest.raises(sd.SporadikError, match="whole store"):
        opened.isel(dim_0=slice(0, 5)).sporadik.nnz("dim_1")


@SETTINGS
@given(case=stores(), dtype=st.sampled_from(["float32", "float64", "int32", "uint8"]))
def test_totals_are_the_dense_sums_along_every_present_layout(
    tmp_path_factory: pytest.TempPathFactory, case: Any, dtype: str
) -> None:
    dense, orders, _ = case
    dense = dense.astype(dtype)
    path = write_reference(tmp_path_factory.mktemp("s") / "s.zarr", dense, orders, chunk=2)
    reader = sd.StoreReader(path)
    for axis in orders:
        others = tuple(a for a in range(dense.ndim) if a != axis)
        expected = dense.sum(axis=others, dtype=np.float64 if dtype[0] == "f" else None)
        np.testing.assert_allclose(reader.totals(axis), expected, rtol=1e-6)


def test_totals_read_values_and_indptr_and_never_an_index(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(4), (300, 200), 0.1)
    path = write_reference(tmp_path / "s.zarr", dense, {0: (1,), 1: (0,)}, chunk=16)
    store = RecordingStore(LocalStore(path, read_only=True))
    opened = open_dataset(store)["data"]
    store.reads.clear()
    per_gene = opened.sporadik.totals("dim_1")
    np.testing.assert_allclose(per_gene, dense.sum(axis=0, dtype=np.float64), rtol=1e-6)
    assert per_gene.dims == ("dim_1",) and per_gene.name == "totals"
    read = {key.split("/c/")[0] for key in store.reads if "/c/" in key}
    assert read == {"layouts/axis1/indptr", "layouts/axis1/data"}, read
    data_chunks = [key for key in store.reads if key.startswith("layouts/axis1/data/c/")]
    assert len(data_chunks) == len(set(data_chunks)) == -(-np.count_nonzero(dense) // 16)


@pytest.mark.parametrize(
    "how",
    [
        {"chunks": {}},
        {"chunks": "auto"},
        {"chunks": {"dim_0": 3}},
        {"chunks": 4},
        {"chunks": {}, "chunked_array_type": "dask"},
        {"chunks": {}, "chunked_array_type": "sporadik"},
    ],
)
def test_chunks_keep_sporadik_chunks_sparse_and_leave_other_arrays_as_dask_does(
    tmp_path: Path, how: dict[str, Any]
) -> None:
    path, dense = _store(tmp_path, {0: (1,), 1: (0,)})
    xr.Dataset({"v": (("a", "b"), np.arange(6.0).reshape(2, 3))}).to_zarr(tmp_path / "plain.zarr")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The specified chunks separate", UserWarning)
        ours = xr.open_dataset(path, engine="sporadik", **how)["s"]
    assert isinstance(ours.data._meta, sparse.COO)
    assert isinstance(first_block(ours.data), sparse.COO)
    np.testing.assert_array_equal(
        ours.isel(dim_1=[3, 1]).compute().data.todense(), dense[:, [3, 1]]
    )
    np.testing.assert_allclose(ours.sum("dim_0", skipna=False).compute().values, dense.sum(axis=0))
    plain = xr.open_dataset(tmp_path / "plain.zarr", engine="zarr", **how)["v"]
    assert isinstance(plain.data._meta, np.ndarray)
    np.testing.assert_array_equal(plain.compute().values, np.arange(6.0).reshape(2, 3))


def test_chunking_a_lazily_opened_variable_later_keeps_it_sparse(tmp_path: Path) -> None:
    path, dense = _store(tmp_path, {0: (1,), 1: (0,)})
    lazy = xr.open_dataset(path, engine="sporadik")["s"]
    for chunked, expected in [
        (lazy.chunk({"dim_0": 3}), dense),
        (lazy.isel(dim_1=[3, 1]).chunk(), dense[:, [3, 1]]),
        (lazy.isel(dim_0=slice(2, 9)).chunk(2), dense[2:9]),
    ]:
        assert isinstance(chunked.data._meta, sparse.COO)
        np.testing.assert_array_equal(chunked.data.compute().todense(), expected)
    others = xr.DataArray(np.arange(12.0).reshape(3, 4), dims=("x", "y")).chunk({"x": 2})
    assert isinstance(others.data._meta, np.ndarray) and others.chunks == ((2, 1), (4,))
    assert others.chunk({"y": 2}).chunks == ((2, 1), (2, 2))  # dask's rechunk, untouched


def test_as_the_session_chunk_manager_sporadik_rechunks_dask_data(tmp_path: Path) -> None:
    path, dense = _store(tmp_path, {0: (1,), 1: (0,)})
    others = xr.DataArray(np.arange(12.0).reshape(3, 4), dims=("x", "y")).chunk({"x": 2})
    with xr.set_options(chunk_manager="sporadik"):
        ours = xr.open_dataset(path, engine="sporadik", chunks={})["s"]
        assert isinstance(ours.data._meta, sparse.COO)
        np.testing.assert_array_equal(ours.compute().data.todense(), dense)
        rechunked = others.chunk({"x": 1})
    assert isinstance(rechunked.data._meta, np.ndarray)
    assert rechunked.chunks == ((1, 1, 1), (4,))
    np.testing.assert_array_equal(rechunked.compute().values, np.arange(12.0).reshape(3, 4))


@pytest.mark.parametrize("axis", [0, 1])
def test_runs_a_writer_left_unsorted_read_in_c_order(tmp_path: Path, axis: int) -> None:
    """The format does not require indices sorted within a run; a reader must not assume it."""
    dense = random_dense(np.random.default_rng(31), (40, 30), 0.3)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(dense, path, axes=(axis,), chunk=64)
    layout = zarr.open_group(path / "layouts" / f"axis{axis}", mode="r+")
    indptr, indices, data = (stored(layout, n) for n in ("indptr", "indices", "data"))
    for lo, hi in itertools.pairwise(indptr):  # every run reversed
        indices[lo:hi], data[lo:hi] = indices[lo:hi][::-1].copy(), data[lo:hi][::-1].copy()
    zarr_array(layout, "indices")[:], zarr_array(layout, "data")[:] = indices, data
    reader = sd.StoreReader(path)
    keys: list[tuple[slice | list[int], slice | list[int]]] = [
        (slice(None), slice(None)),
        ([3, 1, 7], slice(2, 20)),
        (slice(None), [0, 29, 5]),
    ]
    for key in keys:
        result = reader.read(key)
        linear = np.ravel_multi_index(tuple(result.coords), result.shape)
        assert np.all(np.diff(linear) > 0)  # C order, as sparse.COO(sorted=True) promises
        np.testing.assert_array_equal(result.todense(), dense[key])


#: Each dtype on every store kind; the quick set keeps float32 alone on the S3 server and the
#: sharded store: the dtype changes the kernels that assemble the runs, the store kind how the
#: chunks arrive.
C_ORDER_CASES = [
    pytest.param(
        dtype,
        store,
        marks=[pytest.mark.slow] if store in ("s3", "sharded") and dtype != "float32" else [],
    )
    for dtype in ("float32", "float16", "int64", "uint8")
    for store in ("local", "memory", "sharded", "s3")
]


@pytest.mark.parametrize(("dtype", "store_kind"), C_ORDER_CASES, indirect=["store_kind"])
def test_a_read_across_the_runs_comes_back_in_c_order(store_kind: StoreKind, dtype: str) -> None:
    dense = random_dense(np.random.default_rng(5), (60, 40), 0.3).astype(dtype)
    where, options = store_kind.store, store_kind.options
    sd.to_sporadik(dense, where, axes=(1,), **store_kind.writing(), **options)
    reader = sd.StoreReader(where, **options)
    for key in [(slice(None), slice(None)), (slice(None), [5, 2, 9]), (slice(None), 4)]:
        result = reader.read(key)
        linear = np.ravel_multi_index(tuple(result.coords), result.shape)
        assert np.all(np.diff(linear) > 0)
        assert result.dtype == dense.dtype
        np.testing.assert_array_equal(result.todense(), outer(dense, key))


@pytest.mark.parametrize("store_kind", S3_SLOW, indirect=True)
def test_a_boolean_mask_selects_positions_and_non_integers_are_refused(
    tmp_path: Path, store_kind: StoreKind
) -> None:
    dense = random_dense(np.random.default_rng(2), (300, 200), 0.1)
    where = store_kind.holding_reference(dense, {0: (1,), 1: (0,)}, 256, tmp_path)
    reader = sd.StoreReader(where, **store_kind.options)
    mask = np.arange(300) % 3 == 0
    np.testing.assert_array_equal(reader[mask].todense(), dense[mask])
    np.testing.assert_array_equal(reader[:, mask[:200]].todense(), dense[:, mask[:200]])
    for refused in [mask[:-1], [1.0, 2.0], 1.5, "3", (slice(None), -201), (300,)]:
        with pytest.raises(IndexError):
            reader[refused]


def test_a_reader_is_fixed_at_construction_and_from_sporadik_names_are_deterministic(
    tmp_path: Path,
) -> None:
    path, _ = _store(tmp_path, {0: (1,), 1: (0,)})
    reader = sd.StoreReader(path, axis=1, format="gcxs")
    with pytest.raises(AttributeError):
        reader.axis = 0  # type: ignore[misc]
    copy = pickle.loads(pickle.dumps(reader))
    assert (copy.axis, copy.format) == (1, "gcxs")
    assert sd.from_sporadik(path, axis=1).name == sd.from_sporadik(path, axis=1).name
    assert sd.from_sporadik(path, axis=0).name != sd.from_sporadik(path, axis=1).name
    with pytest.raises(sd.LayoutError, match="no layout making axis 1"):
        sd.StoreReader(_store(tmp_path / "one", {0: (1,)})[0], axis=1)
