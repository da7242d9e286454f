"""Shared fixtures: a real `distributed.LocalCluster` with worker processes, and a bucket on a
real S3-protocol server on loopback, reached directly or through a counting, delaying proxy."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from tests.helpers import S3_SLOW

if TYPE_CHECKING:
    from distributed import Client, LocalCluster

    from sporadik_dask.testing import LoopbackS3, S3Proxy
    from tests.helpers import S3Bucket, StoreKind

ROOT = Path(__file__).resolve().parents[1]

#: The ``store_kind`` fixture's kinds.
STORE_KINDS = ["local", "memory", "s3", "sharded"]

# no deadline for any example: the suite must pass on a loaded machine, where a plan test took
# past hypothesis's 200 ms default
settings.register_profile("sporadik", deadline=None)
settings.load_profile("sporadik")


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    """A 2-process cluster whose workers can import this test package, shared by the session:
    a fresh worker imports the package and loads its kernels on its first tasks (~10 s here),
    which one cluster pays once. Each test, or the module's ``client``, connects a client of
    its own (``Client(cluster)``), so nothing computed outlives it; tests that kill workers
    start clusters of their own."""
    from distributed import LocalCluster

    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    with pytest.MonkeyPatch.context() as patch:  # the workers inherit it as they start
        patch.setenv("PYTHONPATH", os.pathsep.join(path for path in paths if path))
        started = LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        )
    with started:
        yield started


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    """A client of the shared cluster, the default scheduler for the module's tests."""
    from distributed import Client

    with Client(cluster) as client:
        yield client


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Bucket]:
    """A bucket on a moto server started here, and the storage_options that reach it."""
    from sporadik_dask.testing import LoopbackS3

    with LoopbackS3() as server:
        yield {"storage_options": server.storage_options(), "bucket": server.bucket}


@pytest.fixture(scope="module")
def loopback() -> Iterator[tuple[LoopbackS3, S3Proxy]]:
    """A moto server and, in front of it, a proxy that counts requests, injects faults and adds
    a cloud's latency."""
    from sporadik_dask.testing import LoopbackS3, S3Proxy

    with LoopbackS3() as server, S3Proxy(server) as proxy:
        yield server, proxy


def _store_kind(request: pytest.FixtureRequest, directory: Path) -> StoreKind:
    import uuid

    from zarr.storage import MemoryStore

    from tests.helpers import StoreKind

    kind: str = request.param
    chunked = {"chunk": 64, "shard": 256} if kind == "sharded" else {"chunk": 64}
    if kind == "memory":
        return StoreKind(kind, MemoryStore(), None, chunked)
    if kind == "s3":
        bucket: S3Bucket = request.getfixturevalue("s3")
        url = f"s3://{bucket['bucket']}/{uuid.uuid4().hex}/counts.zarr"
        return StoreKind(kind, url, bucket["storage_options"], chunked)
    return StoreKind(kind, directory / "counts.zarr", None, chunked)


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest, tmp_path: Path) -> StoreKind:
    """Where a store goes, as zarr-python's tests parametrize theirs: a local directory, a zarr
    ``MemoryStore``, a bucket on the S3 server, and a local directory written sharded. Each is a
    :class:`tests.helpers.StoreKind`: the store (a path, a store object or a URL), the
    ``storage_options`` that reach it, and what a write to it passes besides. A test taking
    fewer kinds, or marking one slow, parametrizes it with ``indirect=True``."""
    return _store_kind(request, tmp_path)


@pytest.fixture(scope="module", params=S3_SLOW)
def module_store_kind(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> StoreKind:
    """``store_kind`` shared by a module's tests, for stores written once and read by many
    cases; its S3 case, where every chunk read is a request, is marked slow."""
    return _store_kind(request, tmp_path_factory.mktemp("store-kind"))
