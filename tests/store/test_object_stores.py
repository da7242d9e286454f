"""Writing and reading through a real S3-protocol server on loopback (moto's standalone server),
from the client and from cluster workers, with URLs and ``storage_options`` as dask users pass and
with zarr's obstore-backed store; through a loopback proxy that counts requests and injects
faults."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import dask
import dask.array as da
import numpy as np
import pytest
import sparse
import xarray as xr

import sporadik_dask as sd
from sporadik_dask.testing import Faults, LoopbackS3, S3Proxy
from tests.helpers import S3Bucket, open_dataset, proxied_store, random_dense, stored

#: The S3 server, its proxy or a cluster in every test: slow.
pytestmark = pytest.mark.slow


if TYPE_CHECKING:
    from distributed import LocalCluster


def _url(s3: S3Bucket) -> str:
    return f"s3://{s3['bucket']}/{uuid.uuid4().hex}/counts.zarr"


def test_a_torn_upload_in_s3_is_refused(s3: S3Bucket) -> None:
    url, options = _url(s3), s3["storage_options"]
    write = sd.to_sporadik(
        np.eye(20, dtype=np.float32), url, storage_options=options, compute=False
    )
    assert isinstance(write, sd.StoreWrite)
    with pytest.raises(sd.StoreNotFoundError):  # nothing is written before compute
        xr.open_dataset(url, engine="sporadik", storage_options=options)
    dask.get(write.__dask_graph__(), write.__dask_keys__()[:2])  # laid out, two writes
    with pytest.raises(sd.IncompleteError):
        xr.open_dataset(url, engine="sporadik", storage_options=options)
    write.compute()
    assert sd.describe(url, storage_options=options).nnz == 20


def test_cluster_workers_write_straight_into_the_bucket(
    s3: S3Bucket, tmp_path: Path, cluster: LocalCluster
) -> None:
    from distributed import Client

    dense = random_dense(np.random.default_rng(1), (80, 50), 0.2)
    url, options = _url(s3), s3["storage_options"]
    x = da.from_array(sparse.COO.from_numpy(dense), chunks=(20, 25), asarray=False)
    with Client(cluster):
        sd.to_sporadik(x, url, storage_options=options, chunk=32, partition_bytes=2000)
        y = sd.from_sporadik(url, storage_options=options, chunks=(20, 50))
        np.testing.assert_array_equal(y.compute().todense(), dense)


@pytest.mark.parametrize("kind", ["fsspec", "obstore"])
def test_transient_faults_are_retried_and_the_values_come_back_whole(
    loopback: tuple[LoopbackS3, S3Proxy], kind: str
) -> None:
    server, proxy = loopback
    dense = random_dense(np.random.default_rng(2), (60, 90), 0.2)
    store, options = proxied_store(server, proxy, kind)
    # every n-th request answers 503 SlowDown, once; botocore sleeps up to a second, at random,
    # before each retry (at every=5, fsspec met 91 faults and the test took 34 s), so it meets
    # fewer
    every = 20 if kind == "fsspec" else 5
    with proxy.failing(Faults(every=every)):
        with proxy.counting() as written:
            sd.to_sporadik(dense, store, chunk=64, **options)
        with proxy.counting() as read:
            values = sd.from_sporadik(store, axis=1, **options).compute().todense()
            ds = open_dataset(store, **options)
            name = next(iter(ds.data_vars))
            columns = ds[name].isel(dim_1=[0, 45, 89]).data.todense()
            totals = ds[name].sporadik.totals("dim_1")
            chunked = open_dataset(store, chunks={}, **options)[name]
            per_row = chunked.sum("dim_1", skipna=False).compute().values
    assert written.failed > 5 and read.failed > 2  # faults were met, and retried past
    np.testing.assert_array_equal(values, dense)
    np.testing.assert_array_equal(columns, dense[:, [0, 45, 89]])
    np.testing.assert_allclose(totals, dense.sum(axis=0, dtype=np.float64), rtol=1e-6)
    np.testing.assert_allclose(per_row, dense.sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize("kind", ["fsspec", "obstore"])
def test_a_chunk_that_cannot_be_fetched_raises_and_is_never_read_as_zeros(
    loopback: tuple[LoopbackS3, S3Proxy], kind: str
) -> None:
    server, proxy = loopback
    dense = random_dense(np.random.default_rng(3), (60, 80), 0.3)
    store, options = proxied_store(server, proxy, kind)
    sd.to_sporadik(dense, store, chunk=64, **options)
    if kind == "fsspec":  # fewer retries, so the refusal comes sooner
        fewer = server.storage_options(proxy.endpoint, retries={"max_attempts": 1})
        options = {"storage_options": fewer}
    with proxy.failing(Faults(paths=r"layouts/axis1/data/c/2$", methods=("GET",))):
        with pytest.raises(sd.FetchError, match=r"layouts/axis1/data/c/2"):
            sd.from_sporadik(store, axis=1, **options).compute()
        ds = open_dataset(store, **options)
        with pytest.raises(sd.FetchError):
            _ = ds[next(iter(ds.data_vars))].isel(dim_1=list(range(0, 80, 2))).data
        with pytest.raises(sd.FetchError, match=r"layouts/axis1/data/c/2"):
            ds[next(iter(ds.data_vars))].sporadik.totals("dim_1")
        assert proxy.counts.failed > 0
    np.testing.assert_array_equal(
        sd.from_sporadik(store, axis=1, **options).compute().todense(), dense
    )


def test_requests_per_operation_are_counted_at_the_store(
    loopback: tuple[LoopbackS3, S3Proxy],
) -> None:
    """Opening reads metadata documents only; a batch fetches each chunk it needs once."""
    server, proxy = loopback
    dense = random_dense(np.random.default_rng(4), (200, 300), 0.05)
    store, _ = proxied_store(server, proxy, "obstore")
    sd.to_sporadik(dense, store, chunk=128)
    with proxy.counting() as opened:
        ds = open_dataset(store)
    paths = [path for _, path in opened.log]
    assert paths and all(path.endswith("zarr.json") for path in paths), paths
    counts = ds[next(iter(ds.data_vars))]
    picked = sorted(np.random.default_rng(5).choice(300, 40, replace=False).tolist())
    with proxy.counting() as batch:
        values = counts.isel(dim_1=picked).data.todense()
    np.testing.assert_array_equal(values, dense[:, picked])
    chunks = [path for method, path in batch.log if method == "GET" and "/c/" in path]
    assert len(chunks) == len(set(chunks))  # each chunk fetched once
    assert {path.split("/layouts/")[1].split("/c/")[0] for path in chunks} == {
        "axis1/indptr",
        "axis1/indices",
        "axis1/data",
    }


def test_cluster_workers_write_and_read_through_obstore(
    loopback: tuple[LoopbackS3, S3Proxy], cluster: LocalCluster
) -> None:
    from distributed import Client

    server, proxy = loopback
    dense = random_dense(np.random.default_rng(6), (80, 50), 0.2)
    store, _ = proxied_store(server, proxy, "obstore")
    x = da.from_array(sparse.COO.from_numpy(dense), chunks=(20, 25), asarray=False)
    with Client(cluster):
        sd.to_sporadik(x, store, chunk=32, partition_bytes=2000)
        y = sd.from_sporadik(store, chunks=(20, 50))
        np.testing.assert_array_equal(y.compute().todense(), dense)


def test_a_chunk_zarr_itself_decodes_also_raises_when_it_cannot_be_fetched(
    loopback: tuple[LoopbackS3, S3Proxy],
) -> None:
    """Arrays with codecs this package leaves to zarr (gzip here) go through zarr's own read;
    a failed fetch there is a FetchError too, never the fill value."""
    import zarr
    from zarr.codecs import GzipCodec

    server, proxy = loopback
    dense = random_dense(np.random.default_rng(8), (60, 80), 0.3)
    store, _ = proxied_store(server, proxy, "obstore")
    sd.to_sporadik(dense, store, axes=(1,), chunk=64)
    layout = zarr.open_group(store, mode="r+", path="layouts/axis1")
    values = stored(layout, "data")
    del layout["data"]
    layout.create_array("data", data=values, chunks=(64,), compressors=GzipCodec(), fill_value=0)
    np.testing.assert_array_equal(sd.from_sporadik(store, axis=1).compute().todense(), dense)
    unfetchable = Faults(paths=r"layouts/axis1/data/c/1$", methods=("GET",))
    with (
        proxy.failing(unfetchable),
        pytest.raises(sd.FetchError, match=r"chunk 1 of layouts/axis1/data"),
    ):
        sd.StoreReader(store).read((slice(None), slice(None)))


def test_a_url_with_dot_segments_is_refused_before_anything_is_written(s3: S3Bucket) -> None:
    options, bucket = s3["storage_options"], s3["bucket"]
    url = f"s3://{bucket}/{uuid.uuid4().hex}/a/../counts.zarr"
    with pytest.raises(ValueError, match=r"'\.\.' segment.*Pass s3://"):
        sd.to_sporadik(np.eye(4), url, storage_options=options)
    with pytest.raises(ValueError, match=r"'\.\.' segment"):
        sd.describe(url, storage_options=options)
    import s3fs

    fs = s3fs.S3FileSystem(**options)
    assert not fs.find(url.replace("s3://", "").split("/a/")[0])  # nothing written anywhere


def test_an_option_typo_and_a_missing_bucket_are_named_not_called_corrupt(s3: S3Bucket) -> None:
    options, bucket = s3["storage_options"], s3["bucket"]
    url = f"s3://{bucket}/{uuid.uuid4().hex}/counts.zarr"
    sd.to_sporadik(np.eye(4), url, storage_options=options)
    typo = {**options, "anonn": True}
    with pytest.raises(sd.SporadikError, match="the key 'anonn'") as refused:
        sd.describe(url, storage_options=typo)
    assert "corrupt" not in str(refused.value)
    with pytest.raises(sd.SporadikError, match="the key 'anonn'"):
        sd.to_sporadik(np.eye(4), url.replace("counts", "other"), storage_options=typo)
    missing = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/counts.zarr"
    with pytest.raises(sd.StoreNotFoundError, match=r"bucket 'no-such-bucket-.*' does not exist"):
        sd.describe(missing, storage_options=options)
    with pytest.raises(sd.StoreNotFoundError, match=r"does not exist.*does not make buckets"):
        sd.to_sporadik(np.eye(4), missing, storage_options=options)


def test_access_denied_names_the_url_and_bucket_and_is_not_called_missing_or_corrupt(
    loopback: tuple[LoopbackS3, S3Proxy], capsys: pytest.CaptureFixture[str]
) -> None:
    """S3's ``AccessDenied`` (403), as a bucket policy or the wrong profile gives it: on opening,
    describing, writing, on the command line, and on a chunk the policy alone withholds."""
    import json

    from sporadik_dask.cli.main import main

    server, proxy = loopback
    dense = random_dense(np.random.default_rng(12), (40, 30), 0.3)
    url, options = proxied_store(server, proxy, "fsspec")
    sd.to_sporadik(dense, url, chunk=64, **options)
    fewer = server.storage_options(proxy.endpoint, retries={"max_attempts": 1})
    named = rf"Access denied.*read {url} \(bucket '{server.bucket}'"
    with proxy.failing(Faults(paths=r".", status=403)):
        with pytest.raises(sd.StoreAccessError, match=named) as refused:
            xr.open_dataset(url, engine="sporadik", storage_options=fewer)
        assert isinstance(refused.value, PermissionError)
        assert not isinstance(refused.value, FileNotFoundError)
        with pytest.raises(sd.StoreAccessError, match=named):
            sd.describe(url, storage_options=fewer)
        elsewhere = url.replace("counts", "other")
        with pytest.raises(sd.StoreAccessError, match=rf"write {elsewhere} \(bucket"):
            sd.to_sporadik(dense, elsewhere, storage_options=fewer)
        assert main(["info", url, "--storage-options", json.dumps(fewer)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"read {url} (bucket '{server.bucket}'" in err, err
    for word in ("corrupt", "does not exist", "retry,"):
        assert word not in err
    lazy = sd.from_sporadik(url, axis=1, storage_options=fewer)
    withheld = Faults(paths=r"axis1/data/c/0$", methods=("GET",), status=403)
    with proxy.failing(withheld), pytest.raises(sd.FetchError, match=r"c/0: access denied"):
        lazy.compute()
