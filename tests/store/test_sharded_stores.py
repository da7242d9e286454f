"""Object stores at scale: a proxy that adds a cloud's latency, sharded layouts, and reads that
fetch the inner chunks of a shard in as few ranged requests as their gaps allow."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anndata
import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
import sparse
import zarr

import sporadik_dask as sd
from sporadik_dask.testing import Faults, Latency, LoopbackS3, RequestCounts, S3Proxy
from tests.helpers import proxied_store, random_dense, zarr_array

#: The S3 server behind a proxy adding a cloud's latency, or the CLI in a subprocess: slow.
pytestmark = pytest.mark.slow


if TYPE_CHECKING:
    from distributed import LocalCluster

ZARRITA = Path(__file__).resolve().parents[1] / "zarrita"


def _store(server: LoopbackS3, proxy: S3Proxy) -> Any:
    store, _ = proxied_store(server, proxy)
    return store


def test_the_proxy_holds_each_request_for_its_delay_and_concurrent_ones_wait_together(
    loopback: tuple[LoopbackS3, S3Proxy],
) -> None:
    server, proxy = loopback
    store = _store(server, proxy)
    sd.to_sporadik(np.eye(50, dtype=np.float32), store)
    with proxy.slowed(Latency(delay=0.2)), proxy.counting() as counts:
        started = time.monotonic()
        sd.describe(store)
        took = time.monotonic() - started
    assert proxy.latency == Latency()  # lifted after the block
    # describe reads its documents in two sequential batches, whatever their number
    assert counts.total > counts.waves >= 1
    assert took >= 0.2 * counts.waves


def test_the_bandwidth_cap_holds_a_large_body_for_its_size(
    loopback: tuple[LoopbackS3, S3Proxy],
) -> None:
    server, proxy = loopback
    store = _store(server, proxy)
    dense = random_dense(np.random.default_rng(0), (400, 400), 0.5)
    sd.to_sporadik(dense, store, axes=(0,), byte_addressable=True)
    with proxy.slowed(Latency(bandwidth=2e6)), proxy.counting() as counts:
        started = time.monotonic()
        sd.from_sporadik(store).compute()
        took = time.monotonic() - started
    # one uncompressed object per array: ~80,000 float32 values in one body of ~320 KB
    assert counts.bytes_in > 600_000
    assert took >= 300_000 / 2e6


def test_a_gathered_delay_answers_requests_sent_with_pauses_together(
    loopback: tuple[LoopbackS3, S3Proxy],
) -> None:
    """Three requests sent 0.3 s apart under a gathered delay of 1 s are one wave, answered
    together 1 s after the last; held from their own arrivals they would be answered apart."""
    server, proxy = loopback
    store, options = proxied_store(server, proxy, "fsspec")
    sd.to_sporadik(np.eye(50, dtype=np.float32), store, **options)
    url = f"{proxy.endpoint}/{store.removeprefix('s3://')}/zarr.json"  # moto serves it unsigned

    def get() -> None:
        with urllib.request.urlopen(url) as response:
            response.read()

    threads = [threading.Thread(target=get) for _ in range(3)]
    with proxy.slowed(Latency(delay=1.0, gathered=True)), proxy.counting() as counts:
        for thread in threads:
            thread.start()
            time.sleep(0.3)
        for thread in threads:
            thread.join()
    assert counts.total == 3 and counts.waves == 1, counts.spans
    (last_arrival, _), answers = max(counts.spans), [stop for _, stop in counts.spans]
    assert min(answers) >= last_arrival + 1.0


def test_waves_count_rounds_of_overlapping_requests() -> None:
    counts = RequestCounts(spans=[(0.0, 1.0), (0.5, 1.2), (1.1, 2.0), (3.0, 4.0), (3.5, 3.6)])
    assert counts.waves == 2
    assert RequestCounts().waves == 0


# --- sharded layouts ------------------------------------------------------------------------


def _objects(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_our_shard_objects_are_the_bytes_zarr_writes_for_the_same_values(tmp_path: Path) -> None:
    """Inner chunks of only zeros are left out of a shard and a shard of only zeros is not
    written, as zarr does; a last shard past the array's end included."""
    from sporadik_dask.store.chunks import write_chunks
    from sporadik_dask.store.shards import shard_of

    values = random_dense(np.random.default_rng(1), (1, 1000), 0.5)[0].astype(np.float32)
    values[256:512] = 0  # shard 1: no object
    values[600:640] = 0  # an empty inner chunk inside shard 2
    arrays = []
    for name in ("zarr", "ours"):
        arrays.append(
            zarr.create_array(
                tmp_path / name,
                shape=(1000,),
                chunks=(64,),
                shards=(256,),
                dtype="float32",
                fill_value=0,
                compressors="auto",
            )
        )
    assert shard_of(arrays[1]) is not None
    arrays[0][:] = values
    write_chunks(arrays[1], 0, values)
    assert _objects(tmp_path / "ours") == _objects(tmp_path / "zarr")
    assert "c/1" not in _objects(tmp_path / "ours")
    for name in _objects(tmp_path / "zarr"):
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "zarr" / name).read_bytes()


@pytest.mark.parametrize("shards", [None, 256])
@pytest.mark.parametrize("value", [0, 7, -3])
def test_a_stretch_of_one_value_is_written_as_the_objects_zarr_writes_for_it(
    tmp_path: Path, shards: int | None, value: int
) -> None:
    """One object encoded for every whole chunk (or shard) of a stretch holding one value (an
    ``indptr`` over empty positions), the array's last partial chunk padded, zeros not written;
    and a stretch of values repeating within some chunks written by :func:`write_chunks`."""
    from sporadik_dask.store.chunks import write_chunks, write_constant

    arrays = [
        zarr.create_array(
            tmp_path / name,
            shape=(1000,),
            chunks=(64,),
            shards=None if shards is None else (shards,),
            dtype="int32",
        )
        for name in ("zarr", "ours")
    ]
    values = np.full(1000, value, dtype=np.int32)
    values[:256] = np.repeat(np.arange(4), 64)  # chunks of 0, 1, 2, 3 repeated
    values[300] = 9  # a chunk (and a shard) of many values
    arrays[0][:] = values
    write_chunks(arrays[1], 0, values[:512])
    write_constant(arrays[1], 512, 1000, value)
    assert _objects(tmp_path / "ours") == _objects(tmp_path / "zarr")
    for name in _objects(tmp_path / "zarr"):
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "zarr" / name).read_bytes()
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "ours")[:], values)


@pytest.mark.parametrize("where", ["directory", "memory"])
def test_our_chunk_objects_are_the_bytes_zarr_writes_in_a_directory_and_in_memory(
    tmp_path: Path, where: str
) -> None:
    """A local directory's chunks are written straight into their files, any other store's
    through zarr's store API: both give zarr's objects, a chunk of only zeros left out, and
    nothing else (no temporary file) beside them."""
    from zarr.storage import MemoryStore

    from sporadik_dask.store.chunks import write_chunks
    from sporadik_dask.store.zarr_adapter import buffer_prototype, run

    values = random_dense(np.random.default_rng(2), (1, 1000), 0.5)[0].astype(np.int32)
    values[128:192] = 0  # chunk 2: no object
    stores: list[Any] = (
        [tmp_path / "zarr", tmp_path / "ours"]
        if where == "directory"
        else [MemoryStore(), MemoryStore()]
    )
    arrays = [
        zarr.create_array(store, shape=(1000,), chunks=(64,), dtype="int32", fill_value=0)
        for store in stores
    ]
    arrays[0][:] = values
    write_chunks(arrays[1], 0, values)

    def objects(array: Any) -> dict[str, bytes]:
        store = array.store_path.store
        keys = run(_keys(store))
        return {k: run(store.get(k, buffer_prototype())).to_bytes() for k in keys}

    theirs, ours = objects(arrays[0]), objects(arrays[1])
    assert "c/2" not in ours and "c/3" in ours
    assert ours == theirs
    np.testing.assert_array_equal(arrays[1][:], values)


async def _keys(store: Any) -> list[str]:
    return sorted([key async for key in store.list()])


def _sharded(tmp_path: Path, **options: Any) -> tuple[Path, sp.csr_matrix]:
    matrix = sp.random(300, 200, density=0.1, format="csr", random_state=3, dtype=np.float32)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(matrix, path, chunk=64, shard=256, partition_bytes=3000, **options)
    return path, matrix


def test_a_sharded_store_holds_a_quarter_of_the_objects_and_every_reader_gets_its_values(
    tmp_path: Path,
) -> None:
    import sporadik
    import xarray as xr

    path, matrix = _sharded(tmp_path)
    plain = tmp_path / "plain.zarr"
    sd.to_sporadik(matrix, plain, chunk=64)
    chunk_objects = [name for name in _objects(path) if "/c/" in name]
    assert len(chunk_objects) * 3 < len([n for n in _objects(plain) if "/c/" in n])
    dense = matrix.toarray()
    description = sd.validate(path)
    assert description.layouts[0].shards == {"data": 256, "indices": 256, "indptr": 256}
    assert description.layouts[0].chunks == {"data": 64, "indices": 64, "indptr": 64}
    np.testing.assert_array_equal(sd.from_sporadik(path, axis=1).compute().todense(), dense)
    lazily = xr.open_dataset(path, engine="sporadik")
    name = next(iter(lazily.data_vars))
    picked = [3, 150, 5, 199]
    np.testing.assert_array_equal(lazily[name].isel(dim_1=picked).data.todense(), dense[:, picked])
    chunked = xr.open_dataset(path, engine="sporadik", chunks={"dim_0": 100})[name]
    np.testing.assert_array_equal(chunked.data.compute().todense(), dense)
    reader = sd.StoreReader(path)
    np.testing.assert_allclose(reader.totals(0), dense.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(reader.totals(1), dense.sum(axis=0), rtol=1e-5)
    with sporadik.open_array(path) as reference:
        np.testing.assert_array_equal(reference.to_array().to_dense(), dense)
    for layout, compressed in (("axis0", matrix.tocsr()), ("axis1", matrix.tocsc())):
        group = zarr.open_group(path / "layouts" / layout, mode="r")
        np.testing.assert_array_equal(zarr_array(group, "data")[:], compressed.data)
        np.testing.assert_array_equal(zarr_array(group, "indices")[:], compressed.indices)
        read = anndata.io.read_elem(group)
        np.testing.assert_array_equal(read.toarray(), dense)


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not on this machine")
def test_zarrita_reads_a_sharded_layout(tmp_path: Path) -> None:
    path, matrix = _sharded(tmp_path)
    done = subprocess.run(
        ["node", str(ZARRITA / "read_layout.mjs"), str(path), "layouts/axis1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout)
    compressed = matrix.tocsc()
    np.testing.assert_array_equal(np.array(read["data"]["values"], "float32"), compressed.data)
    np.testing.assert_array_equal(read["indices"]["values"], compressed.indices)
    np.testing.assert_array_equal(read["indptr"]["values"], compressed.indptr)


def test_a_shard_that_is_not_whole_chunks_or_is_byte_addressable_is_refused(
    tmp_path: Path,
) -> None:
    with pytest.raises(sd.LayoutError, match="multiple of chunk=64"):
        sd.to_sporadik(np.eye(20, dtype=np.float32), tmp_path / "a.zarr", chunk=64, shard=100)
    with pytest.raises(sd.LayoutError, match="contradict"):
        sd.to_sporadik(
            np.eye(20, dtype=np.float32), tmp_path / "b.zarr", shard=64, byte_addressable=True
        )


def test_a_missing_shard_object_is_refused_by_validate(tmp_path: Path) -> None:
    path, _ = _sharded(tmp_path)
    (path / "layouts" / "axis0" / "data" / "c" / "1").unlink()
    with pytest.raises(sd.AbsentChunkError, match="'data'"):
        sd.validate(path)


def test_add_axis_writes_a_sharded_layout(tmp_path: Path) -> None:
    matrix = sp.random(300, 200, density=0.1, format="csr", random_state=4, dtype=np.float32)
    path = tmp_path / "s.zarr"
    sd.to_sporadik(matrix, path, axes=(0,), chunk=64)
    description = sd.add_axis(path, 1, chunk=64, shard=128)
    assert description.layouts[0].shards is None
    assert description.layouts[1].shards == {"data": 128, "indices": 128, "indptr": 128}
    np.testing.assert_array_equal(
        sd.from_sporadik(path, axis=1).compute().todense(), matrix.toarray()
    )


def test_the_cli_converts_with_shard_and_describes_the_shard_size(tmp_path: Path) -> None:
    matrix = sp.random(300, 200, density=0.1, format="csr", random_state=5, dtype=np.float32)
    source = tmp_path / "in.h5ad"
    anndata.AnnData(X=matrix).write_h5ad(source)
    out = tmp_path / "out.zarr"
    cli = [sys.executable, "-m", "sporadik_dask.cli.main"]
    done = subprocess.run(
        [*cli, "convert", str(source), str(out), "--chunk", "64", "--shard", "256", "--quiet"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    info = subprocess.run([*cli, "info", str(out)], capture_output=True, text=True)
    assert "shards {'data': 256" in info.stdout, info.stdout
    assert sd.describe(out).layouts[1].shards == {"data": 256, "indices": 256, "indptr": 256}


# --- through the loopback object store --------------------------------------------------------


def _gets(counts: RequestCounts, array: str) -> list[str]:
    return [path for method, path in counts.log if method == "GET" and f"/{array}/c/" in path]


def test_cluster_workers_write_each_shard_in_one_put_and_a_torn_write_is_refused(
    loopback: tuple[LoopbackS3, S3Proxy], cluster: LocalCluster
) -> None:
    from distributed import Client

    server, proxy = loopback
    dense = random_dense(np.random.default_rng(6), (400, 300), 0.2)
    store = _store(server, proxy)
    x = da.from_array(sparse.COO.from_numpy(dense), chunks=(100, 150), asarray=False)
    with Client(cluster):
        write = sd.to_sporadik(
            x, store, chunk=256, shard=2048, partition_bytes=40_000, compute=False
        )
        with pytest.raises(sd.StoreNotFoundError):  # nothing is written before compute
            sd.describe(store)
        with proxy.counting() as counts:
            description = write.compute()
    puts = [path for method, path in counts.log if method == "PUT" and "/c/" in path]
    assert len(puts) == len(set(puts))  # each shard object written once, in one PUT
    nnz = np.count_nonzero(dense)
    # per layout: data and indices, and one shard each of indptr and maxima
    shards = 2 * (2 * -(-nnz // 2048) + 2)
    assert len(puts) == shards, sorted(puts)
    assert description.layouts[1].shards == {"data": 2048, "indices": 2048, "indptr": 512}
    np.testing.assert_array_equal(sd.from_sporadik(store, axis=0).compute().todense(), dense)


@pytest.fixture
def batches_of_16() -> Iterator[None]:
    """Up to 16 requests in flight. The first read of a store of 6 shards asks 13 shard indexes at
    once (6 each of data and indices, indptr's one): past zarr's default of 10 in flight, the last
    3 wait for a slot and, once the first 10 are all answered, start a wave of their own."""
    with zarr.config.set({"async.concurrency": 16}):
        yield


@pytest.mark.usefixtures("batches_of_16")
def test_reads_fetch_each_shard_index_once_and_merge_adjacent_chunks_into_one_request(
    loopback: tuple[LoopbackS3, S3Proxy],
) -> None:
    server, proxy = loopback
    dense = random_dense(np.random.default_rng(7), (400, 300), 0.2)
    store = _store(server, proxy)
    sd.to_sporadik(dense, store, axes=(1,), chunk=256, shard=4096)
    reader = sd.StoreReader(store)
    # each request held, so that those sent together overlap at the proxy on a busy machine
    with proxy.slowed(_ROUND_TRIP), proxy.counting() as first:
        values = reader[:, 100:200].todense()
    np.testing.assert_array_equal(values, dense[:, 100:200])
    # genes 100:200 hold ~8,000 values: ~32 inner chunks of data in 2-3 of its 6 shards. The
    # first wave asks every shard's index (a suffix request each: 6 are few), the second one
    # ranged request per shard touched, then the root's document (the store is the one opened)
    data = _gets(first, "data")
    shards = -(-np.count_nonzero(dense) // 4096)
    assert len(set(data)) == shards
    assert shards < len(data) <= shards + 3, data
    assert first.waves <= 3
    with proxy.slowed(_ROUND_TRIP), proxy.counting() as again:
        np.testing.assert_array_equal(reader[:, 120:180].todense(), dense[:, 120:180])
    assert len(_gets(again, "data")) <= 2  # the indexes are known: ranges only
    assert again.waves <= 3
    with dask.config.set({"sporadik.coalesce-gap": 0, "sporadik.coalesce-max": 1}):
        fresh = sd.StoreReader(store)
        with proxy.counting() as split:
            np.testing.assert_array_equal(fresh[:, 100:200].todense(), dense[:, 100:200])
    assert len(_gets(split, "data")) > len(data) + 20  # one request per inner chunk
    fresh = sd.StoreReader(store)
    whole_off = dask.config.set({"sporadik.whole-shard": 0})
    with whole_off, proxy.slowed(_ROUND_TRIP), proxy.counting() as cold:
        np.testing.assert_array_equal(fresh[:, 7].todense(), dense[:, 7])
    assert cold.total == 17, cold.log
    assert cold.waves == 4, cold.log  # every index, indptr's chunk, the runs, then the root


def test_a_fault_on_one_shards_get_raises_fetch_error_naming_it(
    loopback: tuple[LoopbackS3, S3Proxy],
) -> None:
    import xarray as xr

    server, proxy = loopback
    dense = random_dense(np.random.default_rng(8), (300, 200), 0.2)
    store = _store(server, proxy)
    sd.to_sporadik(dense, store, chunk=128, shard=1024)
    unfetchable = Faults(paths=r"layouts/axis1/data/c/1$", methods=("GET",))
    with proxy.failing(unfetchable):
        with pytest.raises(sd.FetchError, match=r"shard 1 of layouts/axis1/data"):
            sd.from_sporadik(store, axis=1).compute()
        ds = xr.open_dataset(store, engine="sporadik")
        with pytest.raises(sd.FetchError, match=r"shard 1 of layouts/axis1/data"):
            _ = ds[next(iter(ds.data_vars))].isel(dim_1=list(range(0, 200, 2))).data
    np.testing.assert_array_equal(sd.from_sporadik(store, axis=1).compute().todense(), dense)


# --- waves: open, and one position after open ------------------------------------------------


#: Held in the wave tests until the client has sent nothing for this long, so requests sent
#: together are answered together: a batch splits only where a busy client pauses this long
#: between two of its requests. Held from each request's own arrival, a loaded 2-core machine
#: split a batch of eleven at 0.05 s, and at 0.2 s and 0.5 s split one into three.
_ROUND_TRIP = Latency(delay=0.5, gathered=True)


@pytest.mark.parametrize("shard", [None, 2048])
@pytest.mark.parametrize("kind", ["fsspec", "obstore"])
def test_opening_a_store_takes_two_waves_the_root_then_every_layout_document_at_once(
    loopback: tuple[LoopbackS3, S3Proxy], kind: str, shard: int | None
) -> None:
    import xarray as xr

    server, proxy = loopback
    store, options = proxied_store(server, proxy, kind)
    dense = random_dense(np.random.default_rng(11), (300, 200), 0.1)
    sd.to_sporadik(dense, store, chunk=256, shard=shard, **options)
    for open_ in (
        lambda: sd.StoreReader(store, **options),
        # chunks="auto" reads all of indptr to balance blocks by their values: a third wave
        lambda: sd.from_sporadik(store, chunks=(100, 100), **options),
        lambda: xr.open_dataset(store, engine="sporadik", **options),
    ):
        with proxy.slowed(_ROUND_TRIP), proxy.counting() as opened:
            open_()
        documents = [p for m, p in opened.log if m == "GET" and p.endswith("zarr.json")]
        assert len(documents) == 11, opened.log  # the root; per layout a group and four arrays
        assert opened.waves <= 2, opened.log


@pytest.mark.parametrize("shard", [None, 2048])
def test_one_cell_or_one_gene_takes_two_waves_and_the_check_after_open_on_a_cold_sharded_store(
    loopback: tuple[LoopbackS3, S3Proxy], shard: int | None
) -> None:
    """The first read of a freshly opened reader fetches indptr's small shard whole (its index
    comes with it) and the shard indexes of data and indices in the same wave as the brackets,
    so the runs are read in the second wave as ranges; the root's document follows, one request
    checking the store is still the one opened."""
    import xarray as xr

    server, proxy = loopback
    store = _store(server, proxy)
    dense = random_dense(np.random.default_rng(12), (300, 200), 0.1)
    sd.to_sporadik(dense, store, chunk=256, shard=shard)
    for dim, axis in (("dim_0", 0), ("dim_1", 1)):
        for position in (5, 150):
            ds = xr.open_dataset(store, engine="sporadik")
            with proxy.slowed(_ROUND_TRIP), proxy.counting() as read:
                values = ds[next(iter(ds.data_vars))].isel({dim: position}).data.todense()
            np.testing.assert_array_equal(values, np.take(dense, position, axis=axis))
            assert read.waves == 3, read.log
            reader = sd.StoreReader(store)
            key = (position, slice(None)) if axis == 0 else (slice(None), position)
            with proxy.slowed(_ROUND_TRIP), proxy.counting() as read:
                values = reader[key].todense()
            np.testing.assert_array_equal(values, np.take(dense, position, axis=axis))
            assert read.waves == 3, read.log
