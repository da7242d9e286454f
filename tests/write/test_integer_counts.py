"""Counts kept as floats, written with ``dtype="smallest-integer"`` (or a named integer dtype):
stored as the narrowest integer dtype holding every value, read back as the same numbers by us,
the reference, zarr, anndata and zarrita, and refused before anything is written when a value is
no whole number or does not fit."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anndata
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
import sparse
import sporadik
import zarr
from distributed import Client, LocalCluster

import sporadik_dask as sd
from sporadik_dask.store.codecs import Codec
from tests.helpers import zarr_array

ZARRITA = Path(__file__).parents[1] / "zarrita"


def _counts(shape: tuple[int, ...], top: int, seed: int = 0) -> np.ndarray:
    """Float32 counts 1..``top`` at a fifth of the cells, ``top`` among them."""
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random(shape) < 0.2, rng.integers(1, top + 1, shape), 0)
    dense.flat[np.flatnonzero(dense)[0]] = top
    counts: np.ndarray = dense.astype(np.float32)
    return counts


def _stored(path: Path, layout: str = "axis0") -> dict[str, np.dtype[Any]]:
    group = zarr.open_group(path / "layouts" / layout, mode="r")
    return {name: zarr_array(group, name).dtype for name in ("data", "maxima")}


@pytest.mark.parametrize("codecs", ["zstd", "blosc-zstd", "blosc-lz4"])
@pytest.mark.parametrize(("top", "expected"), [(255, "u1"), (256, "u2"), (70_000, "u4")])
def test_float_counts_are_stored_as_the_narrowest_unsigned_dtype_and_read_back_everywhere(
    tmp_path: Path, codecs: Codec, top: int, expected: str
) -> None:
    dense = _counts((60, 40), top)
    path = tmp_path / "s.zarr"
    blocks = da.from_array(dense, chunks=(13, 17))  # out of core: 20 pieces, each checked
    sd.to_sporadik(blocks, path, chunk=16, codecs=codecs, dtype="smallest-integer")
    for layout in ("axis0", "axis1"):
        assert _stored(path, layout) == {"data": np.dtype(expected), "maxima": np.dtype(expected)}
    assert sd.describe(path).dtype == np.dtype(expected)
    with sporadik.open_array(path) as store:
        read = store.to_array().to_dense()
    assert read.dtype == np.dtype(expected)
    np.testing.assert_array_equal(read, dense)
    ours = sd.from_sporadik(path, axis=1).compute()
    assert ours.dtype == np.dtype(expected)
    np.testing.assert_array_equal(ours.todense(), dense)
    np.testing.assert_array_equal(sd.StoreReader(path).maxima(0), dense.max(axis=1))
    elem = anndata.io.read_elem(zarr.open_group(path / "layouts" / "axis1", mode="r"))
    np.testing.assert_array_equal(elem.toarray(), dense)
    assert sd.validate(path).nnz == np.count_nonzero(dense)


@pytest.mark.parametrize(
    "how", [{"chunk": 16, "shard": 64}, {"byte_addressable": True}], ids=["shards", "raw"]
)
def test_sharded_and_byte_addressable_stores_take_the_integer_dtype_too(
    tmp_path: Path, how: dict[str, Any]
) -> None:
    dense = _counts((50, 30), 1_000)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(da.from_array(dense, chunks=11), path, dtype="smallest-integer", **how)
    assert _stored(path, "axis1") == {"data": np.dtype("u2"), "maxima": np.dtype("u2")}
    with sporadik.open_array(path) as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), dense)
    assert sd.validate(path).nnz == np.count_nonzero(dense)


@pytest.mark.parametrize(
    ("low", "high", "expected"), [(-128, 127, "i1"), (-129, 5, "i2"), (-3, 40_000, "i4")]
)
def test_negative_whole_numbers_are_stored_signed_their_maxima_unsigned(
    tmp_path: Path, low: int, high: int, expected: str
) -> None:
    dense = np.zeros((8, 6), dtype=np.float64)
    dense[1, 2], dense[5, 0], dense[7, 5] = low, high, 1
    path = tmp_path / "s.zarr"
    sd.to_sporadik(sparse.COO.from_numpy(dense), path, dtype="smallest-integer")
    found = _stored(path)
    assert found["data"] == np.dtype(expected)
    assert found["maxima"] == np.dtype(expected.replace("i", "u"))
    with sporadik.open_array(path) as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), dense)
    np.testing.assert_array_equal(sd.StoreReader(path).maxima(0), np.abs(dense).max(axis=1))


def test_repeats_summed_past_the_range_of_each_value_are_stored_wide_enough(
    tmp_path: Path,
) -> None:
    rows = da.from_array(np.array([0, 1, 0, 2]), chunks=2)
    cols = da.from_array(np.array([0, 1, 0, 2]), chunks=2)
    values = da.from_array(np.array([200.0, 3.0, 200.0, 255.0], dtype=np.float32), chunks=2)
    path = tmp_path / "s.zarr"
    sd.to_sporadik((values, (rows, cols)), path, shape=(3, 3), dtype="smallest-integer")
    assert _stored(path)["data"] == np.dtype("u2")  # 400 at (0, 0), though each value fits u1
    with sporadik.open_array(path) as store:
        np.testing.assert_array_equal(np.diag(store.to_array().to_dense()), [400, 3, 255])


def test_a_value_that_is_no_whole_number_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    dense = _counts((40, 30), 9)
    dense[-1, -1] = 2.5  # in the last of the pieces
    path = tmp_path / "s.zarr"
    with pytest.raises(sd.LayoutError, match=r"hold 2\.5, which is no whole number"):
        sd.to_sporadik(da.from_array(dense, chunks=10), path, dtype="smallest-integer")
    assert not path.exists()
    with pytest.raises(sd.LayoutError, match="nan"):
        sd.to_sporadik(sp.csr_matrix(np.array([[np.nan, 1.0]])), path, dtype="uint8")
    assert not path.exists()


def test_a_named_integer_dtype_is_used_when_it_holds_every_value_and_refused_when_not(
    tmp_path: Path,
) -> None:
    dense = _counts((30, 20), 300)
    sd.to_sporadik(dense, tmp_path / "wide.zarr", dtype="int32")
    assert _stored(tmp_path / "wide.zarr")["data"] == np.dtype("i4")
    with sporadik.open_array(tmp_path / "wide.zarr") as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), dense)
    with pytest.raises(sd.LayoutError, match=r"holds 0\.\.255, but the values run from"):
        sd.to_sporadik(dense, tmp_path / "narrow.zarr", dtype="uint8")
    assert not (tmp_path / "narrow.zarr").exists()
    with pytest.raises(sd.LayoutError, match="cast the input first"):
        sd.to_sporadik(dense, tmp_path / "float.zarr", dtype="float16")


@pytest.mark.slow
def test_on_a_cluster_the_workers_find_the_range_and_a_stray_on_one_refuses_the_write(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    dense = _counts((60, 40), 300)
    strayed = dense.copy()
    strayed[-1, -1] = 0.25
    with Client(cluster):
        sd.to_sporadik(da.from_array(dense, chunks=(15, 40)), tmp_path / "s.zarr", dtype="uint16")
        with pytest.raises(sd.LayoutError, match=r"hold 0\.25"):
            sd.to_sporadik(
                da.from_array(strayed, chunks=(15, 40)),
                tmp_path / "t.zarr",
                dtype="smallest-integer",
            )
    assert _stored(tmp_path / "s.zarr", "axis1")["data"] == np.dtype("u2")
    with sporadik.open_array(tmp_path / "s.zarr") as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), dense)
    assert not (tmp_path / "t.zarr").exists()


def test_a_pending_write_fixes_its_dtype_when_planned_and_keeps_it_when_computed(
    tmp_path: Path,
) -> None:
    dense = _counts((30, 20), 60)
    path = tmp_path / "s.zarr"
    pending = sd.to_sporadik(
        da.from_array(dense, chunks=7), path, dtype="smallest-integer", compute=False
    )
    assert not path.exists()
    description = pending.compute()
    assert description.dtype == np.dtype("u1")
    np.testing.assert_array_equal(sd.from_sporadik(path).compute().todense(), dense)


def test_without_dtype_the_values_keep_their_own(tmp_path: Path) -> None:
    dense = _counts((30, 20), 60)
    sd.to_sporadik(dense, tmp_path / "s.zarr")
    assert _stored(tmp_path / "s.zarr")["data"] == np.dtype("f4")


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not on this machine")
@pytest.mark.parametrize("codecs", ["zstd", "blosc-zstd", "blosc-lz4"])
def test_zarrita_reads_counts_stored_as_integers(tmp_path: Path, codecs: Codec) -> None:
    assert (ZARRITA / "node_modules" / "zarrita").is_dir(), "run scripts/setup to install zarrita"
    dense = _counts((70, 50), 1000)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(dense, path, chunk=64, codecs=codecs, dtype="smallest-integer")
    done = subprocess.run(
        ["node", str(ZARRITA / "read_layout.mjs"), str(path), "layouts/axis0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout)
    assert read["data"]["dtype"] == "uint16"
    np.testing.assert_array_equal(read["data"]["values"], sp.csr_matrix(dense).data)
