"""Compiled kernels are cached in the user's cache directory, never beside the package's sources,
and a new process loads them from there rather than compiling them again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from numba.core.caching import UserProvidedCacheLocator

from sporadik_dask.kernels import numba_cache

#: One kernel compiled in a fresh process; prints its cache hits and misses as numba counts them.
_CALL = """
import json
import numpy as np
from sporadik_dask.kernels import sort
counts = np.array([2, 1, 1])
sort.sort_by_key(np.array([2, 0, 1, 0]), counts, np.arange(4)[None, :], np.arange(4.0))
stats = sort._scatter.stats
hits, misses = sum(stats.cache_hits.values()), sum(stats.cache_misses.values())
print(json.dumps({"hits": hits, "misses": misses}))
"""


def _fresh_call(cache: Path) -> dict[str, int]:
    env = {**os.environ, "SPORADIK_DASK_CACHE_DIR": str(cache)}
    env.pop("NUMBA_CACHE_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", _CALL], env=env, capture_output=True, text=True, check=True
    )
    counted: dict[str, int] = json.loads(done.stdout.splitlines()[-1])
    return counted


def test_the_package_locator_comes_right_after_the_one_numba_cache_dir_sets() -> None:
    from numba.core.caching import CacheImpl

    numba_cache.install()
    numba_cache.install()
    classes = CacheImpl._locator_classes
    assert classes.count(numba_cache.PackageCacheLocator) == 1
    assert classes.index(numba_cache.PackageCacheLocator) == 1
    assert classes[0] is UserProvidedCacheLocator  # NUMBA_CACHE_DIR still wins


@pytest.mark.slow
def test_a_new_process_loads_the_kernels_its_predecessor_compiled(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _fresh_call(cache)
    written = sorted(p.name for p in cache.rglob("*") if p.is_file())
    assert first["misses"] >= 1 and first["hits"] == 0
    assert any(name.startswith("sort._scatter") and name.endswith(".nbi") for name in written)
    again = _fresh_call(cache)
    assert again["hits"] >= 1 and again["misses"] == 0


@pytest.mark.slow
def test_kernels_are_not_cached_beside_the_sources(tmp_path: Path) -> None:
    sources = Path(numba_cache.__file__).parent / "__pycache__"
    before = set(sources.glob("sort._scatter*.nbi")) if sources.exists() else set()
    _fresh_call(tmp_path / "elsewhere")
    after = set(sources.glob("sort._scatter*.nbi")) if sources.exists() else set()
    assert after == before


def test_only_the_packages_own_functions_are_located_there() -> None:
    def elsewhere() -> None:
        """A function of another file: left to numba's own locators."""

    assert numba_cache.PackageCacheLocator.from_function(elsewhere, __file__) is None


def test_the_cache_directory_is_the_users_unless_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPORADIK_DASK_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):  # platformdirs reads XDG_CACHE_HOME on Linux only
        assert numba_cache.cache_dir() == tmp_path / "xdg" / "sporadik-dask" / "numba"
    monkeypatch.setenv("SPORADIK_DASK_CACHE_DIR", str(tmp_path / "named"))
    assert numba_cache.cache_dir() == tmp_path / "named"


#: A sum of gcxs blocks of a store in a fresh process; prints what sparse's kernels did.
_SPARSE_CALL = """
import json, sys
import numpy as np
import sparse
from numba.core.caching import NullCache
from numba.core.registry import CPUDispatcher
import sporadik_dask as sd
x = sd.from_sporadik(sys.argv[1], axis=1, format="gcxs")
if sys.argv[3] == "sum":
    np.testing.assert_allclose(x.sum(axis=0).compute().todense(), np.load(sys.argv[2]), rtol=1e-5)
else:  # the blocks alone: fewer kernels to compile
    np.testing.assert_array_equal(x.compute().todense(), np.load(sys.argv[2]))
kernels = [
    value
    for name, module in list(sys.modules.items())
    if name.startswith("sparse") and module is not None
    for value in vars(module).values()
    if isinstance(value, CPUDispatcher)
]
used = [k for k in kernels if k.overloads]
print(json.dumps({
    "cached": sum(not isinstance(k._cache, NullCache) for k in kernels),
    "hits": sum(sum(k.stats.cache_hits.values()) for k in used),
    "misses": sum(sum(k.stats.cache_misses.values()) for k in used),
    "used": len(used),
}))
"""


def _fresh_sparse_call(tmp_path: Path, call: str = "sum", **env: str) -> dict[str, int]:
    """``call``: "sum" (of gcxs blocks along an axis) or "read" (the blocks, densified)."""
    store, sums = tmp_path / "s.zarr", tmp_path / "sum.npy"
    if not store.exists():
        import numpy as np

        import sporadik_dask as sd
        from tests.helpers import random_dense

        dense = random_dense(np.random.default_rng(0), (300, 200), 0.1)
        sd.to_sporadik(dense, store)
        np.save(sums, dense.sum(axis=0))
        np.save(tmp_path / "read.npy", dense)
    full = {**os.environ, "SPORADIK_DASK_CACHE_DIR": str(tmp_path / "cache"), **env}
    full.pop("NUMBA_CACHE_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", _SPARSE_CALL, str(store), str(tmp_path / f"{call}.npy"), call],
        env=full,
        capture_output=True,
        text=True,
        check=True,
    )
    counted: dict[str, int] = json.loads(done.stdout.splitlines()[-1])
    return counted


@pytest.mark.slow
def test_sparses_kernels_a_read_meets_are_loaded_from_the_cache_by_a_new_process(
    tmp_path: Path,
) -> None:
    first = _fresh_sparse_call(tmp_path)
    assert first["cached"] > 10 and first["used"] >= 1 and first["misses"] >= 1
    assert any((tmp_path / "cache").glob("_compressed_*/*.nbi"))
    again = _fresh_sparse_call(tmp_path)
    assert again["misses"] == 0 and again["hits"] >= again["used"] >= 1  # loaded, none compiled


@pytest.mark.slow
def test_switched_off_sparse_compiles_as_it_always_has(tmp_path: Path) -> None:
    # one process reading blocks is enough: no kernel has a cache, none was loaded, and none was
    # written for a later process to load (a sum compiles 20 s more of kernels, and a second
    # process would compile them all again)
    off = _fresh_sparse_call(tmp_path, "read", DASK_SPORADIK__CACHE_SPARSE_KERNELS="False")
    assert off["cached"] == 0
    assert off["hits"] == 0 and off["used"] >= 1
    assert not any((tmp_path / "cache").glob("_compressed_*"))
