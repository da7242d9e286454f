"""Object stores at scale: a proxy that adds a cloud's latency, sharded layouts, and reads that
fetch the inner chunks of a shard in as few ranged requests as their gaps allow."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import sporadik_dask as sd
from sporadik_dask.testing import Latency, LoopbackS3, RequestCounts, S3Proxy
from tests.helpers import random_dense


@pytest.fixture(scope="module")
def loopback() -> Iterator[tuple[LoopbackS3, S3Proxy]]:
    """A moto server and a counting, delaying proxy in front of it."""
    with LoopbackS3() as server, S3Proxy(server) as proxy:
        yield server, proxy


def _store(server: LoopbackS3, proxy: S3Proxy) -> Any:
    return server.obstore(f"{uuid.uuid4().hex}/counts.zarr", proxy.endpoint)


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
    assert took < 0.2 * counts.total


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


def test_waves_count_rounds_of_overlapping_requests() -> None:
    counts = RequestCounts(spans=[(0.0, 1.0), (0.5, 1.2), (1.1, 2.0), (3.0, 4.0), (3.5, 3.6)])
    assert counts.waves == 2
    assert RequestCounts().waves == 0
