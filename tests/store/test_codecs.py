"""The codec chains a write may choose: read back by us, by the reference and by zarr alone, the
chunk objects byte for byte zarr's, and a broken blosc chunk refused rather than read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sporadik
import zarr
from zarr.codecs import BloscCodec, ZstdCodec

import sporadik_dask as sd
from sporadik_dask.format.errors import LayoutError
from sporadik_dask.store.codecs import Codec
from tests.helpers import random_dense, zarr_array

CHAINS: list[Codec] = ["zstd", "blosc-zstd", "blosc-lz4"]


def _counts(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Small integer counts as float32, as a count matrix holds them."""
    dense = random_dense(np.random.default_rng(seed), shape, 0.3)
    counts: np.ndarray = np.ceil(np.abs(dense) * 5).astype(np.float32)
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("codecs", CHAINS)
@pytest.mark.parametrize("shape", [(60, 40), (9, 8, 7)], ids=["rank2", "rank3"])
@pytest.mark.parametrize("shard", [None, 64], ids=["chunks", "shards"])
def test_every_chain_reads_back_the_values_by_us_and_by_the_reference(
    tmp_path: Path, codecs: Codec, shape: tuple[int, ...], shard: int | None
) -> None:
    dense = _counts(shape)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(dense, path, chunk=16, shard=shard, codecs=codecs)
    with sporadik.open_array(path) as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), dense)
    np.testing.assert_array_equal(sd.from_sporadik(path).compute().todense(), dense)
    assert sd.validate(path).nnz == np.count_nonzero(dense)
    data = zarr_array(zarr.open_group(path / "layouts" / "axis0", mode="r"), "data")
    chain = data.compressors[0] if shard is None else data.metadata.codecs[0].codecs[1]  # type: ignore[union-attr]
    assert isinstance(chain, ZstdCodec if codecs == "zstd" else BloscCodec)


def test_one_chain_per_array_by_name_zstd_for_those_not_named_and_describe_names_each(
    tmp_path: Path,
) -> None:
    dense = _counts((50, 30))
    path = tmp_path / "s.zarr"
    sd.to_sporadik(dense, path, chunk=16, codecs={"data": "blosc-lz4", "indices": "blosc-zstd"})
    group = zarr.open_group(path / "layouts" / "axis1", mode="r")
    found = {name: zarr_array(group, name).compressors[0] for name in ("data", "indices", "indptr")}
    assert isinstance(found["data"], BloscCodec) and found["data"].cname.name == "lz4"
    assert found["data"].shuffle.name == "bitshuffle"
    assert isinstance(found["indices"], BloscCodec) and found["indices"].cname.name == "zstd"
    assert found["indices"].shuffle.name == "shuffle"
    assert isinstance(found["indptr"], ZstdCodec)
    assert sd.describe(path).layouts[1].codecs == {
        "data": "blosc-lz4/bitshuffle",
        "indices": "blosc-zstd/shuffle",
        "indptr": "zstd",
    }
    with sporadik.open_array(path) as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), dense)


def test_a_layout_added_later_takes_its_own_chain(tmp_path: Path) -> None:
    dense = _counts((40, 30), seed=4)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(dense, path, axes=(0,), chunk=16)
    sd.add_axis(path, 1, codecs="blosc-lz4")
    layouts = sd.describe(path).layouts
    assert set(layouts[0].codecs.values()) == {"zstd"}
    assert layouts[1].codecs["data"] == "blosc-lz4/bitshuffle"
    with sporadik.open_array(path) as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), dense)
    np.testing.assert_array_equal(sd.from_sporadik(path, axis=1).compute().todense(), dense)


@pytest.mark.parametrize("codecs", ["blosc-zstd", "blosc-lz4"])
def test_our_blosc_chunks_are_the_bytes_zarr_writes_for_the_same_values(
    tmp_path: Path, codecs: Codec
) -> None:
    dense = _counts((80, 30), seed=2)
    ours = tmp_path / "ours.zarr"
    sd.to_sporadik(dense, ours, axes=(0,), chunk=64, codecs=codecs)
    group = zarr.open_group(ours / "layouts" / "axis0", mode="r")
    for name in ("data", "indices", "indptr"):
        array = zarr_array(group, name)
        again = zarr.create_array(
            tmp_path / f"{name}.zarr",
            shape=array.shape,
            chunks=array.chunks,
            dtype=array.dtype,
            compressors=array.compressors,
            fill_value=0,
        )
        again[:] = array[:]
        theirs = tmp_path / f"{name}.zarr" / "c"
        mine = ours / "layouts" / "axis0" / name / "c"
        assert sorted(p.name for p in theirs.iterdir()) == sorted(p.name for p in mine.iterdir())
        for chunk in theirs.iterdir():
            assert (mine / chunk.name).read_bytes() == chunk.read_bytes(), (name, chunk.name)


@pytest.mark.parametrize("damage", ["truncated", "another length"])
def test_a_broken_blosc_chunk_is_refused_rather_than_read(tmp_path: Path, damage: str) -> None:
    dense = _counts((64, 40), seed=3)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(dense, path, axes=(0,), chunk=64, codecs="blosc-zstd")
    chunk = path / "layouts" / "axis0" / "data" / "c" / "0"
    if damage == "truncated":
        chunk.write_bytes(chunk.read_bytes()[:-9])
    else:  # a whole blosc frame of half a chunk: blosc would fill half the table, leave the rest
        from numcodecs import Blosc

        half = np.ones(32, dtype="<f4")
        chunk.write_bytes(Blosc("zstd", 5, Blosc.BITSHUFFLE, typesize=4).encode(half))
    with pytest.raises(LayoutError, match="truncated or corrupt"):
        sd.from_sporadik(path).compute()


def test_a_chain_or_array_this_package_does_not_write_is_refused_before_anything_is(
    tmp_path: Path,
) -> None:
    dense = _counts((10, 10))
    with pytest.raises(LayoutError, match="choose one of 'zstd'"):
        sd.to_sporadik(dense, tmp_path / "a.zarr", codecs="gzip")  # type: ignore[call-overload]
    with pytest.raises(LayoutError, match="names the array 'values'"):
        sd.to_sporadik(dense, tmp_path / "b.zarr", codecs={"values": "blosc-lz4"})
    with pytest.raises(LayoutError, match="contradict"):
        sd.to_sporadik(dense, tmp_path / "c.zarr", codecs="blosc-lz4", byte_addressable=True)
    assert not any(tmp_path.iterdir())
