"""Chunks compressed on a kept context are numcodecs' bytes, chunks decoded in place are its
values, and neither faults fresh pages per chunk; a cut or short chunk object is refused."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import xarray as xr

import sporadik_dask as sd
from sporadik_dask.store import zstd
from tests.helpers import random_dense

CHUNK = 32_768


def _samples() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [
        np.sort(rng.integers(0, 20_000, CHUNK)).astype(np.int32),
        rng.poisson(2, CHUNK).astype(np.float32),
        rng.standard_normal(CHUNK),  # float64, hardly compressible
        np.arange(CHUNK, dtype=np.int64),
        np.zeros(CHUNK, dtype=np.uint16),
        np.zeros(0, dtype=np.float32),
    ]


@pytest.mark.parametrize(("level", "checksum"), [(0, False), (1, False), (5, True), (-3, False)])
def test_a_kept_context_writes_numcodecs_bytes(level: int, checksum: bool) -> None:
    codec = numcodecs.Zstd(level=level, checksum=checksum)
    encode = zstd.encoder(codec)
    assert encode != codec.encode, "numcodecs' zstd functions were not found: the fallback ran"
    for sample in _samples():
        assert encode(sample) == codec.encode(sample), sample.dtype
        # twice on the same thread: a reused context must not carry anything over
        assert encode(sample) == codec.encode(sample), sample.dtype


def test_threads_each_keep_their_own_context() -> None:
    codec = numcodecs.Zstd(level=0)
    encode = zstd.encoder(codec)
    samples = _samples() * 20
    with ThreadPoolExecutor(4) as pool:
        ours = list(pool.map(encode, samples))
    assert ours == [codec.encode(sample) for sample in samples]


_FAULTS = """
import json, resource, sys
import numcodecs, numpy as np
from sporadik_dask.store import zstd
codec = numcodecs.Zstd(level=0)
chunks = [np.sort(np.random.default_rng(k).integers(0, 20_000, 32_768)).astype(np.int32)
          for k in range(20)]
def faults_per_item(step, items):
    step(items[0])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        for item in items:
            step(item)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / (10 * len(items))
blobs, out = [codec.encode(chunk) for chunk in chunks], np.empty(32_768, np.int32)
decode = zstd.decoder()
found = {
    "numcodecs": faults_per_item(codec.encode, chunks),
    "kept": faults_per_item(zstd.encoder(codec), chunks),
    "numcodecs decode": faults_per_item(codec.decode, blobs),
    "in place": faults_per_item(lambda blob: decode(blob, out), blobs),
}
print(json.dumps(found))
"""


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="MALLOC_TRIM_THRESHOLD_ is glibc's",
)
def test_a_kept_context_faults_no_pages_under_the_nannys_trim_threshold() -> None:
    """A distributed nanny starts its workers with MALLOC_TRIM_THRESHOLD_=65536; under it,
    numcodecs' fresh context per chunk faults its tables in each time."""
    environment = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536"}
    done = subprocess.run(
        [sys.executable, "-c", _FAULTS], env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    faults = json.loads(done.stdout)
    assert faults["numcodecs"] > 50, faults  # the cost this module exists to avoid is real here
    assert faults["kept"] < 2, faults
    # a new 128 KiB buffer a chunk, 32 pages: 33 faults a chunk in most runs, 16 in one
    assert faults["numcodecs decode"] > 8 and faults["in place"] < 2, faults


def test_a_chunk_decoded_in_place_is_numcodecs_values() -> None:
    codec = numcodecs.Zstd(level=0)
    decode = zstd.decoder()
    assert decode is not None, "numcodecs' zstd functions were not found"
    for sample in _samples()[:-1]:  # numcodecs cannot decode the frame of no bytes
        out = np.empty_like(sample)
        assert decode(codec.encode(sample), out) == sample.nbytes
        np.testing.assert_array_equal(
            out, np.frombuffer(codec.decode(codec.encode(sample)), dtype=sample.dtype)
        )
    whole = codec.encode(np.arange(CHUNK, dtype=np.int32))
    out = np.empty(CHUNK, dtype=np.int32)
    assert decode(whole[:-9], out) == -1  # cut
    assert decode(b"not a frame", out) == -1
    assert decode(whole, np.empty(CHUNK // 2, dtype=np.int32)) == -1  # more than the array


@pytest.mark.parametrize("damage", ["cut", "short"])
def test_a_cut_or_short_chunk_object_is_refused_by_every_read(tmp_path: Path, damage: str) -> None:
    dense = random_dense(np.random.default_rng(4), (300, 200), 0.3)
    store = tmp_path / "s.zarr"
    sd.to_sporadik(dense, store, chunk=512)
    for layout in ("axis0", "axis1"):
        chunk = store / "layouts" / layout / "data" / "c" / "1"
        if damage == "cut":
            chunk.write_bytes(chunk.read_bytes()[:-20])
        else:  # a whole zstd frame of 100 values where 512 belong
            chunk.write_bytes(numcodecs.Zstd(level=0).encode(np.ones(100, dtype=dense.dtype)))
    with pytest.raises(sd.LayoutError, match="truncated or corrupt"):
        sd.from_sporadik(store, axis=0).compute()
    ds = xr.open_dataset(store, engine="sporadik")
    with pytest.raises(sd.LayoutError, match="truncated or corrupt"):
        ds[next(iter(ds.data_vars))].sporadik.totals("dim_1")
    with pytest.raises(sd.LayoutError, match="truncated or corrupt"):
        _ = ds[next(iter(ds.data_vars))].isel(dim_0=slice(0, 150)).data
