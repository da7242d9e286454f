"""A store rewritten under arrays opened before: each read returns the state it opened, or raises
``StoreReplacedError``; never another write's values, nor zeros for chunks a torn write left
missing. Real stores on disk and on a moto S3 server, overwritten by a real process killed with
``SIGKILL`` midway, or by a write that finishes."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pytest
import xarray as xr

import sporadik_dask as sd
from sporadik_dask.testing import LoopbackS3, S3Proxy
from tests.helpers import S3Bucket, open_dataset, proxied_store, random_dense

if TYPE_CHECKING:
    from distributed import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
REWRITTEN = "rewritten since it was opened"


def _counts(seed: int) -> tuple[npt.NDArray[Any], xr.DataArray]:
    """200 cells by 120 genes, labelled, and the same values in dense numpy."""
    dense = random_dense(np.random.default_rng(seed), (200, 120), 0.2)
    cells = [f"cell-{i}" for i in range(200)]
    genes = [f"gene-{j}" for j in range(120)]
    x = xr.DataArray(
        dense, dims=("cell", "gene"), coords={"cell": cells, "gene": genes}, name="counts"
    )
    return dense, x


@pytest.fixture(params=["local", "s3"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any] | None]:
    """Where a store goes: a local path, or a URL on the moto server with its options."""
    if request.param == "local":
        return str(tmp_path / "counts.zarr"), None
    s3: S3Bucket = request.getfixturevalue("s3")
    return f"s3://{s3['bucket']}/{uuid.uuid4().hex}/counts.zarr", s3["storage_options"]


def _overwrite_killed_midway(
    location: str, options: dict[str, Any] | None, x: xr.DataArray, after: int, scratch: Path
) -> None:
    """Overwrite the store at ``location`` with ``x`` in a process of its own, and kill that
    process with ``SIGKILL`` once it has written ``after`` chunk objects."""
    source, marker, log = scratch / "input.pickle", scratch / "stalled", scratch / "child.log"
    source.write_bytes(pickle.dumps(x))
    arguments = json.dumps(
        {
            "location": location,
            "storage_options": options,
            "input": str(source),
            "after": after,
            "marker": str(marker),
            "chunk": 64,
        }
    )
    code = (
        f"from tests.helpers import overwrite_until_stalled; overwrite_until_stalled({arguments!r})"
    )
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT.parent)])}
    with log.open("w") as output:
        child = subprocess.Popen([sys.executable, "-c", code], env=environment, stderr=output)
    try:
        while not marker.exists():
            if child.poll() is not None:
                raise AssertionError(f"the overwrite ended before stalling:\n{log.read_text()}")
            time.sleep(0.02)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


def _reads_opened_before(
    location: str, options: dict[str, Any] | None, x: xr.DataArray
) -> dict[str, Callable[[], Any]]:
    """Every way of reading the store, each opened now: whole reads, gene lists, cell slices
    by label, sums under ``chunks={}``, ``from_sporadik`` and ``StoreReader``."""
    counts = xr.open_dataset(location, engine="sporadik", storage_options=options)["counts"]
    chunked = xr.open_dataset(location, engine="sporadik", storage_options=options, chunks={})
    lazy = sd.from_sporadik(location, chunks=(50, 120), storage_options=options)
    reader = sd.StoreReader(location, storage_options=options)
    cells = list(x["cell"].values[[7, 3, 150]])
    return {
        "whole": lambda: counts.compute().data.todense(),
        "gene list": lambda: counts.isel(gene=[3, 70, 11]).compute().data.todense(),
        "cells by label": lambda: counts.sel(cell=cells).compute().data.todense(),
        "sums under chunks={}": lambda: chunked["counts"].sum("gene").compute().values,
        "from_sporadik": lambda: lazy.compute().todense(),
        "StoreReader": lambda: reader[5:9].todense(),
    }


@pytest.mark.slow
def test_arrays_opened_before_an_overwrite_killed_midway_raise_rather_than_read_zeros(
    location: tuple[str, dict[str, Any] | None], tmp_path: Path
) -> None:
    """An overwrite killed with ``SIGKILL`` among its chunk writes leaves the old store's
    objects deleted and some of the new ones written: zarr reads the missing ones as zeros, so
    without a check every array opened before read zeros and the new write's values."""
    where, options = location
    dense, x = _counts(1)
    sd.to_sporadik(x, where, storage_options=options, chunk=64)
    reads = _reads_opened_before(where, options, x)
    np.testing.assert_array_equal(reads["whole"](), dense)  # as it was opened
    np.testing.assert_array_equal(reads["StoreReader"](), dense[5:9])
    _, other = _counts(2)
    _overwrite_killed_midway(where, options, other, after=150, scratch=tmp_path)
    with pytest.raises(sd.IncompleteError):
        xr.open_dataset(where, engine="sporadik", storage_options=options)
    for what, read in reads.items():
        with pytest.raises(sd.StoreReplacedError, match=REWRITTEN):
            read()
            pytest.fail(f"{what} read the torn store")


@pytest.mark.slow
def test_a_dataset_opened_before_its_store_was_rewritten_in_another_order_never_reads_other_cells(
    location: tuple[str, dict[str, Any] | None],
) -> None:
    """The same values with the cells in another order: the same shape, count, dtype and
    metadata documents. Selected by label through the labels opened before, each row would be
    another cell's."""
    where, options = location
    dense, x = _counts(3)
    sd.to_sporadik(x, where, storage_options=options, chunk=64)
    reads = _reads_opened_before(where, options, x)
    order = np.random.default_rng(4).permutation(200)
    sd.to_sporadik(x.isel(cell=order), where, storage_options=options, chunk=64, overwrite=True)
    for what, read in reads.items():
        with pytest.raises(sd.StoreReplacedError, match="another write finished there"):
            read()
            pytest.fail(f"{what} read the rewritten store as the one opened")
    reopened = xr.open_dataset(where, engine="sporadik", storage_options=options)["counts"]
    picked = reopened.sel(cell=["cell-7", "cell-3"]).compute().data.todense()
    np.testing.assert_array_equal(picked, dense[[7, 3]])


@pytest.mark.slow
def test_readers_opened_again_elsewhere_raise_for_a_store_torn_or_removed_since(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    """A reader travels as a location and opens the store again where it reads (a cluster's
    worker, an unpickled copy): it checks against the state opened first, not the one it finds."""
    from distributed import Client

    path = str(tmp_path / "counts.zarr")
    _, x = _counts(10)
    sd.to_sporadik(x, path, chunk=64)
    lazy = sd.from_sporadik(path, chunks=(50, 120))
    travelled = pickle.loads(pickle.dumps(sd.StoreReader(path)))  # holds a location only
    _, other = _counts(11)
    _overwrite_killed_midway(path, None, other, after=150, scratch=tmp_path)
    with Client(cluster), pytest.raises(sd.StoreReplacedError, match="no finished block"):
        lazy.compute()
    shutil.rmtree(path)
    with pytest.raises(sd.StoreReplacedError, match="nothing is stored there now"):
        travelled[3]


def test_a_store_written_again_with_the_same_values_reads_on(tmp_path: Path) -> None:
    """A finished rewrite of the very same values is the state opened (the same write's name,
    the same bytes), and ``add_axis`` keeps the layouts read: arrays opened before read on."""
    path = tmp_path / "counts.zarr"
    dense, x = _counts(5)
    sd.to_sporadik(x, path, chunk=64, axes=(0,))
    reads = _reads_opened_before(str(path), None, x)
    sd.to_sporadik(x, path, chunk=64, axes=(0,), overwrite=True)
    sd.add_axis(path, 1, chunk=64)
    np.testing.assert_array_equal(reads["whole"](), dense)
    np.testing.assert_array_equal(reads["cells by label"](), dense[[7, 3, 150]])
    np.testing.assert_allclose(reads["sums under chunks={}"](), dense.sum(axis=1), rtol=1e-5)


def test_a_read_checks_the_store_with_one_request_after_its_waves(
    loopback: tuple[LoopbackS3, S3Proxy],
) -> None:
    """The check is one GET of the root's document per read (per dask block), after the
    read's last wave, whatever the number of chunks it fetched."""
    server, proxy = loopback
    dense = random_dense(np.random.default_rng(6), (200, 300), 0.05)
    store, _ = proxied_store(server, proxy, "obstore")
    sd.to_sporadik(dense, store, chunk=128)
    opened = open_dataset(store)
    counts = opened[next(iter(opened.data_vars))]
    picked = sorted(np.random.default_rng(7).choice(300, 40, replace=False).tolist())
    with proxy.counting() as batch:
        values = counts.isel(dim_1=picked).data.todense()
    np.testing.assert_array_equal(values, dense[:, picked])
    documents = [path for method, path in batch.log if path.endswith("zarr.json")]
    chunks = [path for method, path in batch.log if method == "GET" and "/c/" in path]
    assert len(documents) == 1 and documents[0].endswith("counts.zarr/zarr.json"), documents
    assert len(chunks) > 1 and batch.log[-1][1] == documents[0]  # last: after the waves
    lazy = sd.from_sporadik(store, chunks=(50, 300))
    with proxy.counting() as blocks:
        np.testing.assert_array_equal(lazy.compute().todense(), dense)
    documents = [path for method, path in blocks.log if path.endswith("zarr.json")]
    assert len(documents) == lazy.numblocks[0] == 4
