"""Writing and reading through a real S3-protocol server on loopback (moto's standalone server),
from the client and from cluster workers, with URLs and ``storage_options`` as dask users pass."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import sparse
import xarray as xr

import sporadik_dask as sd
from tests.helpers import random_dense


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, Any]]:
    """A bucket on a moto server started here, and the storage_options that reach it."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    options = {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    }
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        # An S3 CreateBucket is a plain PUT on the bucket's path.
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/sporadik-tests", method="PUT"))
        yield {"storage_options": options, "bucket": "sporadik-tests"}
    finally:
        server.terminate()
        server.wait(timeout=10)


def _url(s3: dict[str, Any]) -> str:
    return f"s3://{s3['bucket']}/{uuid.uuid4().hex}/counts.zarr"


def test_a_store_written_to_s3_reads_back_through_every_reader(s3: dict[str, Any]) -> None:
    dense = random_dense(np.random.default_rng(0), (90, 60), 0.2)
    url, options = _url(s3), s3["storage_options"]
    x = da.from_array(sparse.COO.from_numpy(dense), chunks=(30, 30), asarray=False)
    description = sd.to_sporadik(x, url, storage_options=options, chunk=64)
    assert description.indexed_axes == (0, 1)
    assert sd.describe(url, storage_options=options).nnz == np.count_nonzero(dense)
    sd.validate(url, storage_options=options)
    ds = xr.open_dataset(url, engine="sporadik", storage_options=options)
    np.testing.assert_array_equal(ds["counts"].isel(dim_1=[4, 1]).data.todense(), dense[:, [4, 1]])
    y = sd.from_sporadik(url, storage_options=options, axis=1)
    np.testing.assert_array_equal(y.compute().todense(), dense)


def test_a_torn_upload_in_s3_is_refused(s3: dict[str, Any]) -> None:
    url, options = _url(s3), s3["storage_options"]
    write = sd.to_sporadik(
        np.eye(20, dtype=np.float32), url, storage_options=options, compute=False
    )
    assert isinstance(write, sd.StoreWrite)
    with pytest.raises(sd.IncompleteError):
        xr.open_dataset(url, engine="sporadik", storage_options=options)
    write.compute()
    assert sd.describe(url, storage_options=options).nnz == 20


def test_cluster_workers_write_straight_into_the_bucket(s3: dict[str, Any], tmp_path: Path) -> None:
    from distributed import Client, LocalCluster

    dense = random_dense(np.random.default_rng(1), (80, 50), 0.2)
    url, options = _url(s3), s3["storage_options"]
    x = da.from_array(sparse.COO.from_numpy(dense), chunks=(20, 25), asarray=False)
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster),
    ):
        sd.to_sporadik(x, url, storage_options=options, chunk=32, partition_bytes=2000)
        y = sd.from_sporadik(url, storage_options=options, chunks=(20, 50))
        np.testing.assert_array_equal(y.compute().todense(), dense)
