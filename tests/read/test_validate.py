"""The checks the reference leaves out refuse stores it would read as garbage."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import sporadik
import xarray as xr
import zarr

import sporadik_dask as sd
from tests.helpers import random_dense, write_reference


def _poke(name: str, position: int, value: int) -> Callable[[Path], None]:
    def corrupt(path: Path) -> None:
        array = zarr.open_array(path / "layouts" / "axis0" / name, mode="r+")
        array[position] = value

    return corrupt


#: Each corruption, and a position whose run it spoils.
GARBAGE = {
    "indptr does not start at 0": (_poke("indptr", 0, 1), 0),
    "indptr decreases": (_poke("indptr", 5, 0), 4),
    "indptr ends before nnz": (_poke("indptr", -1, 3), 39),
    "an index past the raveled extent": (_poke("indices", 2, 30), 0),
    "a negative index": (_poke("indices", 7, -4), 0),
}


@pytest.mark.parametrize("garbage", GARBAGE, ids=list(GARBAGE))
def test_a_store_the_reference_opens_but_reads_wrongly_is_refused_by_validate(
    tmp_path: Path, garbage: str
) -> None:
    dense = random_dense(np.random.default_rng(5), (40, 30), 0.3)
    path = write_reference(tmp_path / "s.zarr", dense, {0: (1,), 1: (0,)})
    corrupt, position = GARBAGE[garbage]
    corrupt(path)

    # The reference opens it without complaint and hands out a spoiled run.
    with sporadik.open_array(path) as store:
        indices, _ = store.slice_at(position, axis=0)
    assert not np.array_equal(indices, np.flatnonzero(dense[position]))
    # Opening stays cheap here too (metadata only), so the store describes...
    sd.describe(path)
    # ...and the checks that read data refuse it, naming the layout.
    with pytest.raises(sd.LayoutError, match="layouts/axis0"):
        sd.validate(path)


def test_validate_reads_indices_one_zarr_chunk_at_a_time_and_passes_a_good_store(
    tmp_path: Path,
) -> None:
    dense = random_dense(np.random.default_rng(6), (200, 100), 0.2)
    path = write_reference(tmp_path / "s.zarr", dense, {0: (1,), 1: (0,)}, chunk=64)
    description = sd.validate(path)
    assert description.nnz == np.count_nonzero(dense)
    assert description.layouts[0].chunks["indices"] == 64


def test_an_absent_chunk_the_layout_does_not_account_for_fails_validate_unless_downgraded(
    tmp_path: Path,
) -> None:
    dense = random_dense(np.random.default_rng(9), (60, 40), 0.3)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(dense, path, chunk=64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sd.AbsentChunkWarning)
        sd.validate(path)  # every chunk present: no warning, no error
    (path / "layouts" / "axis1" / "data" / "c" / "3").unlink()  # lost after the block
    with pytest.raises(
        sd.AbsentChunkError, match=r"axis1.*1 of the \d+ chunks of 'data' \(ids 3\)"
    ):
        sd.validate(path)
    with pytest.warns(sd.AbsentChunkWarning, match=r"chunks of 'data' \(ids 3\)"):
        sd.validate(path, absent="warn")


def test_a_deleted_indices_chunk_that_reads_wrong_values_fails_validate(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(10), (80, 50), 0.3)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(dense, path, chunk=64)
    (path / "layouts" / "axis0" / "indices" / "c" / "2").unlink()
    with sporadik.open_array(path) as reference:  # every reader reads wrong values...
        wrong = reference.slices_at(np.arange(80), axis=0).to_dense()
    assert not np.array_equal(wrong, dense)
    with pytest.raises(sd.AbsentChunkError, match="'indices' \\(ids 2\\)"):
        sd.validate(path)  # ...so validate refuses it


def test_absent_chunks_the_layout_proves_to_be_zeros_pass_validate(tmp_path: Path) -> None:
    # A column vector: every run is one value at index 0, and the first 40 rows are empty, so
    # zarr leaves out the all-zero chunks of indices, of maxima and the leading ones of indptr.
    dense = np.zeros((200, 1), dtype=np.float32)
    dense[40:, 0] = np.arange(1, 161)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(dense, path, chunk=16, axes=(0,))
    layout = path / "layouts" / "axis0"
    assert not (layout / "indices" / "c" / "0").exists()
    assert not (layout / "maxima" / "c" / "0").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error", sd.AbsentChunkWarning)
        sd.validate(path)


def test_maxima_that_disagree_with_the_values_fail_validate(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(11), (50, 40), 0.3)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(dense, path, chunk=64)
    sd.validate(path)
    np.testing.assert_array_equal(sd.StoreReader(path).maxima(0), np.abs(dense).max(axis=1))
    zarr.open_array(path / "layouts" / "axis0" / "maxima", mode="r+")[7] = 1.0
    with pytest.raises(
        sd.LayoutError, match=r"maxima disagree with the values at 1 positions \(7\)"
    ):
        sd.validate(path)


def _labelled_store(path: Path) -> None:
    import pandas as pd
    import sparse
    import xarray as xr

    n = 70_000  # two chunks of each coordinate
    kinds = pd.Categorical(np.array(["b", "a"])[np.arange(n) % 2])
    counts = xr.DataArray(
        sparse.COO.from_numpy(np.eye(n, 3, dtype=np.float32)),
        dims=("cell", "gene"),
        coords={"batch": ("cell", np.zeros(n, np.int64)), "kind": ("cell", kinds)},
    )
    sd.to_sporadik(counts, path)


def test_a_coordinate_of_zeros_keeps_every_chunk_and_validates(tmp_path: Path) -> None:
    _labelled_store(tmp_path / "s.zarr")
    assert sorted(p.name for p in (tmp_path / "s.zarr/coords/batch/c").iterdir()) == ["0", "1"]
    sd.validate(tmp_path / "s.zarr")


def test_a_lost_coordinate_chunk_is_refused_and_a_cut_one_named(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    _labelled_store(path)
    (path / "coords/batch/c/1").unlink()
    with pytest.raises(sd.AbsentChunkError, match=r"1 of 'coords/batch' \(ids \[1\]\)"):
        sd.validate(path)
    with pytest.warns(sd.AbsentChunkWarning, match="coords/batch"):
        sd.validate(path, absent="warn")
    with open(path / "coords/kind/codes/c/0", "r+b") as cut:
        cut.truncate(10)
    with pytest.raises(sd.LayoutError, match=r"coordinates of .* cannot be read"):
        sd.validate(path, absent="warn")


#: Each signed integer dtype, and one that holds the magnitude of its minimum.
WIDER = {np.int8: np.int16, np.int16: np.int32, np.int32: np.int64, np.int64: object}


def _extremes(dtype: type[np.signedinteger[Any]], shape: tuple[int, ...]) -> npt.NDArray[Any]:
    """Values of ``dtype`` with its minimum and maximum in runs of several values, along with
    small ones of either sign, and an empty last position along every axis."""
    rng = np.random.default_rng(len(shape) * 10 + np.dtype(dtype).itemsize)
    info = np.iinfo(dtype)
    signs = rng.choice(np.array([-1, 1], dtype), shape)
    dense: npt.NDArray[Any] = random_dense(rng, shape, 0.6, dtype) * signs
    dense[(0,) * len(shape)] = info.min
    dense[(1,) * len(shape)] = info.max
    dense[(2,) * len(shape)] = info.min
    dense[(2, 1, *(1,) * (len(shape) - 2))] = info.max
    for axis in range(len(shape)):  # a trailing empty position
        np.moveaxis(dense, axis, 0)[-1] = 0
    return dense


def _largest_magnitudes(dense: npt.NDArray[Any], axis: int) -> npt.NDArray[Any]:
    """numpy's answer, taken in a dtype wide enough for the magnitude of the minimum."""
    others = tuple(a for a in range(dense.ndim) if a != axis)
    largest: npt.NDArray[Any] = np.abs(dense.astype(WIDER[dense.dtype.type])).max(axis=others)
    return largest


def _write_with(source: str, dense: npt.NDArray[Any], path: Path) -> None:
    import dask.array as da
    import scipy.sparse as sp
    import sparse

    if source == "numpy":
        sd.to_sporadik(dense, path, chunk=4)
    elif source == "scipy":
        sd.to_sporadik(sp.csr_matrix(dense), path)
    elif source == "dask of numpy":
        sd.to_sporadik(da.from_array(dense, chunks=3), path, partition_bytes=64)
    elif source == "dask of sparse":
        blocks = da.from_array(dense, chunks=2).map_blocks(sparse.COO.from_numpy)
        sd.to_sporadik(blocks, path)
    else:  # add_axis, from the layout of axis 0
        sd.to_sporadik(dense, path, axes=(0,))
        for axis in range(1, dense.ndim):
            sd.add_axis(path, axis, partition_bytes=64)


#: Each write path, and the shapes it takes (scipy matrices have rank 2).
SOURCES = [
    (source, shape)
    for source in ("numpy", "scipy", "dask of numpy", "dask of sparse", "add_axis")
    for shape in ((9, 7), (6, 5, 4))
    if source != "scipy" or len(shape) == 2
]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", list(WIDER), ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize(
    ("source", "shape"), SOURCES, ids=[f"{s} rank {len(shape)}" for s, shape in SOURCES]
)
def test_maxima_of_a_signed_integer_minimum_are_its_magnitude_in_every_write(
    tmp_path: Path,
    dtype: type[np.signedinteger[Any]],
    source: str,
    shape: tuple[int, ...],
) -> None:
    dense = _extremes(dtype, shape)
    path = tmp_path / "s.zarr"
    _write_with(source, dense, path)
    sd.validate(path)
    opened = xr.open_dataset(path, engine="sporadik")["s"]
    with sporadik.open_array(path) as theirs:
        np.testing.assert_array_equal(theirs.to_array().to_dense(), dense)
        for axis in range(dense.ndim):
            expected = _largest_magnitudes(dense, axis)
            ours = sd.StoreReader(path).maxima(axis)
            assert ours.dtype == np.dtype(f"u{np.dtype(dtype).itemsize}")
            np.testing.assert_array_equal(ours.astype(object), expected)
            accessor = opened.sporadik.maxima(f"dim_{axis}")
            np.testing.assert_array_equal(accessor.values.astype(object), expected)
            np.testing.assert_array_equal(theirs.maxima(axis=axis).astype(object), expected)


@pytest.mark.parametrize("dtype", list(WIDER), ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("shape", [(5, 4), (4, 5, 3)], ids=["rank 2", "rank 3"])
def test_maxima_the_reference_writes_as_a_negative_minimum_read_as_its_magnitude(
    tmp_path: Path, dtype: type[np.signedinteger[Any]], shape: tuple[int, ...]
) -> None:
    # the minimum alone in each of its slices: where it shares one, the reference's maximum in
    # the values' dtype keeps the other value (its abs, wrapped, is the smallest)
    info = np.iinfo(dtype)
    dense = np.zeros(shape, dtype=dtype)
    dense[(0,) * len(shape)] = info.min
    dense[(slice(1, None),) * len(shape)] = random_dense(
        np.random.default_rng(3), [n - 1 for n in shape], 0.7, dtype
    )
    dense[(-1,) * len(shape)] = -info.max  # no empty last position: the reference cuts a run short
    path = write_reference(
        tmp_path / "s.zarr",
        dense,
        {a: tuple(b for b in range(len(shape)) if b != a) for a in range(len(shape))},
    )
    stored = zarr.open_array(path / "layouts" / "axis0" / "maxima", mode="r")
    assert stored.dtype == np.dtype(dtype) and stored[0] == info.min
    sd.validate(path)
    opened = xr.open_dataset(path, engine="sporadik")["s"]
    for axis in range(len(shape)):
        expected = _largest_magnitudes(dense, axis)
        np.testing.assert_array_equal(sd.StoreReader(path).maxima(axis).astype(object), expected)
        accessor = opened.sporadik.maxima(f"dim_{axis}")
        np.testing.assert_array_equal(accessor.values.astype(object), expected)


def test_a_store_whose_only_coordinate_is_a_range_validates(tmp_path: Path) -> None:
    import pandas as pd
    import sparse
    import xarray as xr

    counts = xr.DataArray(
        sparse.COO.from_numpy(np.eye(6, 3, dtype=np.float32)),
        dims=("cell", "gene"),
        coords={"cell": pd.RangeIndex(6)},
    )
    sd.to_sporadik(counts, tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr/coords").exists()  # a range is its formula, not a node
    assert sd.validate(tmp_path / "s.zarr").nnz == 3
