"""Every error this package raises crosses a process boundary as itself, with its message: through
``pickle``, through the reducer distributed installs for exceptions, from a real
``LocalCluster``'s worker to the client, and from there to the command line's one line and exit
status 2."""

from __future__ import annotations

import json
import pickle
from typing import TYPE_CHECKING

import numpy as np
import pytest

import sporadik_dask as sd
import sporadik_dask.format.errors as errors
from sporadik_dask.cli.main import main
from sporadik_dask.testing import Faults, LoopbackS3, S3Proxy
from tests.helpers import proxied_store, random_dense

#: Clusters and subprocesses: slow.
pytestmark = pytest.mark.slow


if TYPE_CHECKING:
    from distributed import LocalCluster

ERRORS = [
    getattr(errors, name)
    for name in errors.__all__
    if issubclass(getattr(errors, name), Exception)
    and not issubclass(getattr(errors, name), Warning)
]


def _raised(kind: type[Exception]) -> Exception:
    """``kind`` raised with a message from an ``OSError``, as a failed fetch raises it."""
    try:
        try:
            raise OSError(16, "Device or resource busy")
        except OSError as cause:
            raise kind("what was found, why it matters, what to do") from cause
    except Exception as raised:
        return raised


@pytest.mark.parametrize("kind", ERRORS, ids=lambda kind: kind.__name__)
def test_every_error_pickles_and_crosses_distributed_as_itself(kind: type[Exception]) -> None:
    from distributed.core import clean_exception, error_message

    raised = _raised(kind)
    back = pickle.loads(pickle.dumps(raised))
    assert type(back) is kind and str(back) == str(raised)
    # what a worker sends (tblib's reducer, installed by distributed) and the client rebuilds
    _, sent, _ = clean_exception(error_message(raised)["exception"].data)
    assert isinstance(sent, kind) and type(sent) is kind and str(sent) == str(raised)
    assert isinstance(sent.__cause__, OSError)


def test_a_chunk_that_cannot_be_fetched_on_a_cluster_is_caught_as_a_fetch_error(
    loopback: tuple[LoopbackS3, S3Proxy], cluster: LocalCluster
) -> None:
    from distributed import Client

    server, proxy = loopback
    dense = random_dense(np.random.default_rng(8), (60, 80), 0.3)
    store, options = proxied_store(server, proxy, "fsspec")
    sd.to_sporadik(dense, store, chunk=64, **options)
    fewer = server.storage_options(proxy.endpoint, retries={"max_attempts": 1})
    lazy = sd.from_sporadik(store, axis=1, storage_options=fewer)
    failing = proxy.failing(Faults(paths=r"axis1/data/c/2$", methods=("GET",)))
    with Client(cluster), failing, pytest.raises(sd.FetchError, match=r"axis1/data/c/2") as failed:
        lazy.compute()
    assert isinstance(failed.value, OSError)
    with Client(cluster):
        np.testing.assert_array_equal(lazy.compute().todense(), dense)


def test_a_failed_fetch_on_a_cluster_is_one_line_and_exit_status_two(
    loopback: tuple[LoopbackS3, S3Proxy], cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """``convert`` adding a layout on a cluster, its workers reading the one there."""
    server, proxy = loopback
    dense = random_dense(np.random.default_rng(9), (60, 80), 0.3)
    store, options = proxied_store(server, proxy, "fsspec")
    sd.to_sporadik(dense, store, chunk=64, axes=(0,), **options)
    fewer = server.storage_options(proxy.endpoint, retries={"max_attempts": 1})
    command = ["convert", store, store, "--quiet"]
    command += ["--storage-options", json.dumps(fewer), "--scheduler", cluster.scheduler_address]
    with proxy.failing(Faults(paths=r"axis0/data/c/2$", methods=("GET",))):
        assert main(command) == 2
    err = capsys.readouterr().err
    assert err.startswith("sporadik-dask: Could not fetch elements") and err.count("\n") == 1, err
    assert "layouts/axis0/data" in err
