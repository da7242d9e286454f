"""A read of an axis as long as a genome (here 5e9 positions, a few values) costs what it reads:
every read mode gives the values of a small dense computation, and no array as long as the axis
is made on the way, measured by ``tracemalloc`` (numpy's buffers are traced)."""

from __future__ import annotations

import resource
import tracemalloc
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import sparse
import xarray as xr

import sporadik_dask as sd
from sporadik_dask.read.dask_model import EXPRESSIONS

#: A genome's length and more: past 2**31 and 2**32, so an int32 position would wrap.
LENGTH = 5_000_000_000
SAMPLES = 2
#: The stored cells (sample, position) and their values.
ROWS = np.array([0, 0, 0, 0, 1, 1, 1, 1])
POSITIONS = np.array([5, 2**31 + 7, 2**32 + 1, LENGTH - 1, 0, 5, 3_000_000_000, LENGTH - 2])
VALUES = np.arange(1, ROWS.size + 1, dtype=np.int32)
#: Far below an array of the axis (40 GB of int64, 5 GB of a boolean mask).
PEAK_BYTES = 64 * 2**20


@pytest.fixture(scope="module", params=[(0,), (0, 1)], ids=["row layout", "both layouts"])
def store(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """The row layout alone, or both: then a region, positions and points read the runs of
    the position layout, whose ``indptr`` holds 5e9 offsets."""
    path = tmp_path_factory.mktemp("long") / "long.zarr"
    x = sparse.COO(np.stack([ROWS, POSITIONS]), VALUES, shape=(SAMPLES, LENGTH))
    sd.to_sporadik(x, path, axes=request.param)
    return path


@pytest.fixture(autouse=True)
def bounded_address_space() -> Iterator[None]:
    """A read that did build an array of the axis fails with MemoryError, rather than taking
    the machine's memory: the address space is held to what the process has plus 2 GiB."""
    status = Path("/proc/self/status").read_text()
    size = next(int(line.split()[1]) * 1024 for line in status.splitlines() if "VmSize" in line)
    before = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (size + 2 * 2**30, before[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, before)


def expected(key: tuple[Any, Any]) -> dict[tuple[int, ...], int]:
    """The result's cells, from a dense array over the stored positions alone (the rest of the
    axis holds no value): numpy selects its rows; a slice's positions are a ``range`` (exact
    arithmetic), a list's are where each stored position is asked for."""
    rows, part = key
    stored = np.unique(POSITIONS)
    dense = np.zeros((SAMPLES, stored.size), dtype=np.int32)
    dense[ROWS, np.searchsorted(stored, POSITIONS)] = VALUES
    kept = dense[rows]
    chosen = range(LENGTH)[part] if isinstance(part, slice) else list(part)
    found = {}
    for column, position in enumerate(stored.tolist()):
        slots = [chosen.index(position)] if position in chosen else []
        if not isinstance(part, slice):
            slots = [slot for slot, asked in enumerate(chosen) if asked == position]
        held = kept[..., column]
        for at in np.argwhere(held).tolist() if held.ndim else [[]] * bool(held):
            for slot in slots:
                found[(*at, slot)] = int(held[tuple(at)])
    return found


def cells(result: Any) -> dict[tuple[int, ...], int]:
    """A sparse result's stored cells, computed if lazy, as ``{coordinates: value}``."""
    if isinstance(result, xr.DataArray):
        result = result.data
    if hasattr(result, "dask"):
        result = result.compute()
    return {tuple(map(int, c)): int(v) for c, v in zip(result.coords.T, result.data, strict=True)}


def measured(read: Callable[[], Any]) -> tuple[Any, int]:
    """``read()``'s result and the peak of memory allocated while it ran."""
    tracemalloc.start()
    try:
        result = cells(read())
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def opened(store: Path, how: str) -> Any:
    """The store's array: a reader, ``from_sporadik``, or an opened variable (lazy, chunked, or
    loaded: a ``sparse.COO`` xarray holds, selected by :mod:`sporadik_dask.backend.loaded`)."""
    if how == "reader":
        return sd.StoreReader(store)
    if how == "from_sporadik":
        return sd.from_sporadik(store)
    chunks: dict[str, int] | None = {} if how == "chunks={}" else None
    (variable,) = xr.open_dataset(store, engine="sporadik", chunks=chunks).data_vars.values()
    variable = variable.rename(dict(zip(variable.dims, ("sample", "pos"), strict=True)))
    return variable.load() if how == "loaded" else variable


def select(array: Any, key: tuple[Any, ...]) -> Any:
    if isinstance(array, xr.DataArray):
        return array.isel(dict(zip(("sample", "pos"), key, strict=False)))
    return array[key]


MODES = ["reader", "from_sporadik", "lazy", "chunks={}", "loaded"]
#: Keys that leave the long axis whole, slice it, list or step through it, and mask the samples.
KEYS = {
    "one row": (1, slice(None)),
    "every row": (slice(None), slice(None)),
    "a sample mask": (np.array([False, True]), slice(None)),
    "a region": (slice(None), slice(2**31, 2**32 + 2)),
    "a region at the end": (0, slice(LENGTH - 10, None)),
    "sorted positions": (slice(None), np.array([5, 2**32 + 1, LENGTH - 2])),
    "unsorted, repeated positions": (0, np.array([LENGTH - 1, 5, 5, 2**31 + 7])),
    "a stepped slice": (slice(None), slice(1, None, 2**31 + 6)),
    "a reversed axis": (0, slice(None, None, -1)),
}


@pytest.mark.parametrize("how", MODES)
@pytest.mark.parametrize("name", list(KEYS))
def test_a_selection_of_a_genome_length_axis_reads_its_values_without_an_array_of_the_axis(
    store: Path, how: str, name: str
) -> None:
    key = KEYS[name]
    array = opened(store, how)
    with dask.config.set(scheduler="synchronous"):
        got, peak = measured(lambda: select(array, key))
    assert got == expected(key)
    assert peak < PEAK_BYTES


#: Reductions of a selection, and what they give from the stored values alone.
_IN_REGION = (POSITIONS >= 2**31) & (POSITIONS < 2**32 + 2)
REDUCTIONS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "a region's sum": (
        lambda x: x.isel(pos=slice(2**31, 2**32 + 2)).sum(),
        int(VALUES[_IN_REGION].sum()),
    ),
    "a region's sum per sample": (
        lambda x: x.isel(pos=slice(2**31, 2**32 + 2)).sum("pos"),
        np.bincount(ROWS[_IN_REGION], VALUES[_IN_REGION], minlength=SAMPLES),
    ),
    "a list of samples' sum per position": (
        lambda x: x.isel(sample=[1]).sum("sample"),
        {(int(p),): int(v) for p, v in zip(POSITIONS[ROWS == 1], VALUES[ROWS == 1], strict=True)},
    ),
}


@pytest.mark.parametrize("how", ["lazy", "chunks={}"])
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_a_reduction_of_a_selection_of_a_genome_length_axis_makes_no_array_of_the_axis(
    store: Path, how: str, name: str
) -> None:
    """A lazily opened variable's selection is held as ranges where it slices: a reduction of
    it (pushed down, or read then reduced) costs what the selection holds."""
    reduce, want = REDUCTIONS[name]
    array = opened(store, how)
    tracemalloc.start()
    try:
        with dask.config.set(scheduler="synchronous"):
            result = reduce(array)
            got = result.data.compute() if hasattr(result.data, "dask") else result.data
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    if isinstance(want, dict):
        assert cells(got) == want
    else:
        np.testing.assert_array_equal(np.asarray(got), want)
    assert peak < PEAK_BYTES


#: Cells named one by one: past 2**31, at the axis's end, at positions holding no value.
POINTS = (np.array([0, 1, 1, 0, 1]), np.array([LENGTH - 1, 3_000_000_000, 4, 5, 2**32 + 1]))


@pytest.mark.parametrize("how", MODES)
def test_points_of_a_genome_length_axis_read_their_values_without_an_array_of_the_axis(
    store: Path, how: str
) -> None:
    array = opened(store, how)
    if isinstance(array, xr.DataArray):
        rows, positions = (xr.DataArray(part, dims="point") for part in POINTS)
        read = lambda: array.isel(sample=rows, pos=positions)  # noqa: E731
    else:
        read = lambda: array.vindex[POINTS]  # noqa: E731
    with dask.config.set(scheduler="synchronous"):
        got, peak = measured(read)
    assert got == {(0,): 4, (1,): 7, (3,): 1}
    assert peak < PEAK_BYTES


def test_a_store_without_coordinates_opens_without_an_index_of_the_axis(store: Path) -> None:
    tracemalloc.start()
    try:
        dataset = xr.open_dataset(store, engine="sporadik")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert dict(dataset.sizes) == {"dim_0": SAMPLES, "dim_1": LENGTH}
    assert not dataset.coords and not dataset.xindexes
    assert peak < PEAK_BYTES


def run_reads(store: Any) -> list[str]:
    """The chunks of runs (``indices`` and ``data``) a recording store was asked for."""
    return [key for key in store.reads if "/data/c/" in key or "/indices/c/" in key]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The row layout, each sample's run in a zarr chunk of its own, behind a store recording
    every key read: a chunk read twice is a run read twice."""
    from zarr.storage import LocalStore

    from tests.helpers import RecordingStore

    path = tmp_path_factory.mktemp("long") / "runs.zarr"
    x = sparse.COO(np.stack([ROWS, POSITIONS]), VALUES, shape=(SAMPLES, LENGTH))
    sd.to_sporadik(x, path, axes=(0,), chunk=int(np.count_nonzero(ROWS == 0)))
    return RecordingStore(LocalStore(path, read_only=True))


def chunked(store: Any, how: str, chunks: dict[str, int]) -> Any:
    """The store's array in blocks of ``chunks`` (by dim, the rest whole): ``from_sporadik`` or
    a variable opened with ``chunks=``."""
    sizes = {"sample": SAMPLES, "pos": LENGTH}
    if how == "from_sporadik":
        return sd.from_sporadik(store, chunks=tuple(chunks.get(d, n) for d, n in sizes.items()))
    from tests.helpers import open_dataset

    names = dict(zip(sizes, ("dim_0", "dim_1"), strict=True))
    with warnings.catch_warnings():  # blocks that cut the store's zarr chunks: as asked
        warnings.simplefilter("ignore", UserWarning)
        dataset = open_dataset(store, chunks={names[d]: n for d, n in chunks.items()})
    (variable,) = dataset.data_vars.values()
    return variable.rename(dict(zip(variable.dims, sizes, strict=True)))


#: Positions asked for as a list: past 2**31 and 2**32, holding values or not, unsorted.
LISTED = np.array([2**32 + 1, 5, LENGTH - 2, 7, 2**31 + 7])


@pytest.mark.parametrize("how", ["from_sporadik", "chunks="])
def test_a_list_of_a_genome_length_axis_in_blocks_of_samples_reads_each_run_once(
    recorded: Any, how: str
) -> None:
    """Blocks of the list, each whole along the samples, would each read every sample's run
    through the row layout."""
    recording = recorded
    array = chunked(recording, how, {"sample": 1})
    recording.reads.clear()
    with dask.config.set(scheduler="synchronous"), warnings.catch_warnings():
        warnings.simplefilter("ignore", sd.ScanWarning)
        got = cells(select(array, (slice(None), LISTED)))
    assert got == expected((slice(None), LISTED))
    reads = run_reads(recording)
    assert reads and len(reads) == len(set(reads))


@pytest.mark.parametrize("how", ["from_sporadik", "chunks="])
@pytest.mark.parametrize(
    "key", [(slice(None), slice(None)), (slice(None), slice(3, LENGTH - 1))], ids=["all", "slice"]
)
def test_blocks_along_a_genome_length_axis_read_each_run_once(
    recorded: Any, how: str, key: tuple[slice, slice]
) -> None:
    """Blocks of 2**31 positions, each whole along the samples, would each read every sample's
    run through the row layout, and keep its part of it."""
    recording = recorded
    array = chunked(recording, how, {"pos": 2**31})
    recording.reads.clear()
    with dask.config.set(scheduler="synchronous"), warnings.catch_warnings():
        warnings.simplefilter("ignore", sd.ScanWarning)
        picked = select(array, key)
        assert len((picked.data if isinstance(picked, xr.DataArray) else picked).chunks[1]) > 1
        got = cells(picked)
    assert got == expected(key)
    reads = run_reads(recording)
    assert reads and len(reads) == len(set(reads))


#: Per stored position, over the samples: the sum, the values held, the largest magnitude.
PER_POSITION = {
    "sum": lambda x, over: x.sum(over),
    "nnz": lambda x, over: (x != 0).sum(over),
    "maxima": lambda x, over: abs(x).max(over),
}


@pytest.mark.parametrize("how", ["from_sporadik", "lazy", "chunks={}"])
@pytest.mark.parametrize("what", list(PER_POSITION))
def test_statistics_per_position_of_a_genome_length_axis_are_sparse_reductions(
    store: Path, how: str, what: str
) -> None:
    if what == "maxima" and how == "lazy" and len(sd.StoreReader(store).description.layouts) > 1:
        pytest.skip(
            "abs() of a lazy variable reads it in blocks of 2**24 positions (dask's 'auto'), "
            "each bracketed in the position layout: minutes at this length"
        )
    if EXPRESSIONS:
        pytest.skip(
            "under dask's expression model some of these reductions at this length ran past 10 "
            "minutes, the cause not yet found"
        )
    array = opened(store, how)
    over = "sample" if isinstance(array, xr.DataArray) else 0
    with dask.config.set(scheduler="synchronous"):
        got, peak = measured(lambda: PER_POSITION[what](array, over))
    stored = {"sum": VALUES, "nnz": np.ones_like(VALUES), "maxima": VALUES}[what]
    want: dict[tuple[int, ...], int] = {}
    for position, value in zip(POSITIONS.tolist(), stored.tolist(), strict=True):
        want[(position,)] = (
            max(want.get((position,), 0), value)
            if what == "maxima"
            else (want.get((position,), 0) + value)
        )
    assert got == want
    assert peak < PEAK_BYTES


def test_a_stored_statistic_per_position_of_a_genome_length_axis_is_refused_naming_reductions(
    store: Path,
) -> None:
    variable = opened(store, "lazy")
    with pytest.raises(sd.SporadikError, match=r"\(da != 0\)\.sum\('sample'\)"):
        variable.sporadik.nnz("pos")
    with pytest.raises(sd.SporadikError, match=r"da\.sum\('sample'\)"):
        variable.sporadik.totals("pos")
    assert variable.sporadik.nnz("sample").values.tolist() == [4, 4]


@pytest.mark.parametrize("how", ["lazy", "chunks={}"])
def test_a_range_index_labels_a_genome_length_axis_without_an_array_of_it(
    store: Path, how: str
) -> None:
    """xarray's ``RangeIndex`` holds a start and a step: positions counted from 1, as a genome
    browser counts them, select by label and read only the region (its ``sel`` leaves a
    slice's stop out, where a pandas index keeps it)."""
    from xarray.indexes import RangeIndex

    def labelled() -> Any:
        variable = opened(store, how)
        index = RangeIndex.arange(1, LENGTH + 1, 1, dim="pos", coord_name="pos")
        variable = variable.assign_coords(xr.Coordinates.from_xindex(index))
        return variable.sel(pos=slice(2**31 + 1, 2**32 + 3), method="nearest").data

    with dask.config.set(scheduler="synchronous"):
        got, peak = measured(labelled)
    assert got == expected((slice(None), slice(2**31, 2**32 + 2)))
    assert peak < PEAK_BYTES


@pytest.mark.parametrize("how", ["lazy", "chunks={}"])
def test_a_stored_range_of_genome_positions_is_written_and_opened_without_an_array_of_them(
    tmp_path: Path, how: str
) -> None:
    """Positions counted from 1, as a genome browser counts them, stored as a pandas
    ``RangeIndex``: the store keeps its formula, and opening it, a row and a region selected by
    label make no array of the 3.1e9 positions."""
    import pandas as pd

    length = 3_100_000_000
    where = np.array([5, 2**31 + 7, length - 1])
    x = sparse.COO(np.stack([[0, 1, 1], where]), VALUES[:3], shape=(SAMPLES, length))
    calls = xr.DataArray(
        x, dims=("sample", "pos"), coords={"pos": pd.RangeIndex(1, length + 1)}, name="calls"
    )

    kept: dict[str, xr.DataArray] = {}

    def written_and_read() -> Any:
        sd.to_sporadik(calls, tmp_path / "s.zarr", axes=(0,))
        chunks: dict[str, int] | None = {} if how == "chunks={}" else None
        kept["opened"] = xr.open_dataarray(tmp_path / "s.zarr", engine="sporadik", chunks=chunks)
        kept["row"] = kept["opened"].isel(sample=1).compute()
        kept["region"] = kept["opened"].sel(pos=slice(2**31, 2**31 + 10)).compute()
        return kept["region"]

    with dask.config.set(scheduler="synchronous"), warnings.catch_warnings():
        warnings.simplefilter("ignore", sd.ScanWarning)  # a region read through the rows
        got, peak = measured(written_and_read)
    assert got == {(1, 8): 2}
    assert kept["region"]["pos"].values.tolist() == list(range(2**31, 2**31 + 11))
    assert isinstance(kept["opened"].xindexes["pos"].to_pandas_index(), pd.RangeIndex)
    row = kept["row"]
    assert row.data.coords.tolist() == [[2**31 + 7, length - 1]]
    assert row["pos"][-1] == length and row.sizes["pos"] == length
    assert peak < PEAK_BYTES


def test_a_stored_coordinate_left_out_by_drop_variables_is_not_read(tmp_path: Path) -> None:
    """A coordinate along a genome's positions is 8 bytes a position: dropping it at open skips
    its chunks, where it was read whole and then dropped."""
    from zarr.storage import LocalStore

    from tests.helpers import RecordingStore, open_dataset

    dense = np.zeros((2, 1_000), dtype=np.int32)
    dense[ROWS % 2, POSITIONS % 1_000] = VALUES
    array = xr.DataArray(
        dense, dims=("sample", "pos"), coords={"pos": np.arange(1_000) ** 2}, name="calls"
    )
    sd.to_sporadik(array, tmp_path / "s.zarr")
    store = RecordingStore(LocalStore(tmp_path / "s.zarr", read_only=True))
    dataset = open_dataset(store, drop_variables=["pos"])
    assert "pos" not in dataset.coords and dataset["calls"].shape == (2, 1_000)
    assert not [key for key in store.reads if key.startswith("coords/pos/c")], store.reads
    kept = open_dataset(RecordingStore(LocalStore(tmp_path / "s.zarr", read_only=True)))
    assert kept["pos"].values[-1] == 999**2


#: A store short enough for zarr chunks of 8 elements (its ``indptr`` too), and a region of it.
REGION_STORE_LENGTH = 20_000
REGION = slice(10_000, 10_100)


@pytest.fixture(scope="module")
def recorded_both(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Both layouts behind a store recording every key read: many samples, each holding values
    along the whole axis, and a region whose runs in the position layout fill a few small
    chunks, so a block of samples reads the region through the position layout."""
    from zarr.storage import LocalStore

    from tests.helpers import RecordingStore

    rng = np.random.default_rng(3)
    samples, per_sample, length = 16, 40, REGION_STORE_LENGTH
    rows = np.repeat(np.arange(samples), per_sample)
    positions = np.concatenate(
        [np.sort(rng.choice(length, per_sample, replace=False)) for _ in range(samples)]
    )
    positions[::8] = REGION.start + rng.integers(0, 100, positions[::8].size)  # the region's
    cells = np.unique(rows.astype(np.int64) * length + positions)
    rows, positions = cells // length, cells % length
    x = sparse.COO(np.stack([rows, positions]), np.arange(1, rows.size + 1), shape=(16, length))
    path = tmp_path_factory.mktemp("long") / "both.zarr"
    sd.to_sporadik(x, path, axes=(0, 1), chunk=8)
    return RecordingStore(LocalStore(path, read_only=True)), x


def test_a_region_in_blocks_of_samples_reads_each_run_of_the_position_layout_once(
    recorded_both: Any,
) -> None:
    """A block of samples reads the region through its samples' whole rows, or through the
    position layout's runs, again for every block: the region is read once, by its runs."""
    from tests.helpers import open_dataset

    recording, x = recorded_both
    region = REGION
    with warnings.catch_warnings():  # blocks that cut the store's zarr chunks: as asked
        warnings.simplefilter("ignore", UserWarning)
        dataset = open_dataset(recording, chunks={"dim_0": 2})
    (variable,) = dataset.data_vars.values()
    recording.reads.clear()
    with dask.config.set(scheduler="synchronous"):
        picked = variable.isel(dim_1=region).data
        assert len(picked.chunks[0]) == 8
        got = picked.compute()
    np.testing.assert_array_equal(got.todense(), x[:, region].todense())
    reads = run_reads(recording)
    assert reads and all("axis1" in key for key in reads)
    assert len(reads) == len(set(reads))
