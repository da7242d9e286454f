"""Each patch of xarray and dask names the upstream symbol it replaces, acts only while switched
on, and is installed once; a release that moves a symbol fails here, by name."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import sparse
import xarray as xr

import sporadik_dask as sd
from sporadik_dask.backend import patches
from sporadik_dask.backend.patches import PATCHES, Patch
from tests.helpers import random_dense


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dense = random_dense(np.random.default_rng(1), (80, 70), 0.2, np.float64)
    path = tmp_path_factory.mktemp("patches") / "s.zarr"
    sd.to_sporadik(xr.DataArray(sparse.COO.from_numpy(dense), dims=("cell", "gene")), path)
    return path


def _open(path: Path, chunks: Any = None) -> xr.DataArray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return xr.open_dataset(path, engine="sporadik", chunks=chunks)["s"]


@pytest.mark.parametrize("patch", PATCHES, ids=[p.symbol for p in PATCHES])
def test_each_replaced_symbol_is_upstreams_own_function(patch: Patch) -> None:
    function = patches.original(patch)
    assert callable(function), patch.symbol
    package = patch.module.partition(".")[0]
    assert function.__module__.partition(".")[0] == package, (patch.symbol, function.__module__)
    assert function.__name__ == patch.name, (patch.symbol, function.__name__)


def test_opening_a_store_installs_every_patch_once(store: Path) -> None:
    _open(store)
    assert all(patches.installed(p) for p in PATCHES), [
        p.symbol for p in PATCHES if not patches.installed(p)
    ]
    held = [patches.upstream(p) for p in PATCHES]
    replacements = [getattr(patches._owner(p), p.name) for p in PATCHES]
    _open(store)
    patches.install()
    assert [patches.upstream(p) for p in PATCHES] == held
    assert [getattr(patches._owner(p), p.name) for p in PATCHES] == replacements


class _Upstream:
    def method(self, x: int) -> str:
        return f"upstream {x}"


def test_a_replacement_calls_the_original_as_given_while_switched_off() -> None:
    patch = Patch(__name__, "_Upstream", "method", lambda original: lambda self, x: f"ours {x}")
    original = _Upstream.method
    try:
        patches.install_one(patch)
        patches.install_one(patch)  # once
        assert patches.installed(patch) and patches.original(patch) is original
        assert _Upstream().method(1) == "ours 1"
        with dask.config.set({patches.SWITCH: False}):
            assert _Upstream().method(2) == "upstream 2"
    finally:
        _Upstream.method = original  # type: ignore[method-assign]


def test_switched_off_a_store_is_xarrays_as_any_backends(store: Path) -> None:
    """No pushdown, no sparse chunks: what xarray alone does with a backend of sparse data."""
    lazy = _open(store)
    weights = xr.DataArray(np.ones(lazy.sizes["gene"]), dims="gene")
    with dask.config.set({patches.SWITCH: False}):
        assert isinstance(lazy.sum("cell").data, sparse.COO)  # xarray's own reduction
        assert isinstance(xr.dot(lazy, weights).data, sparse.COO)  # sparse's einsum
        chunked = _open(store, {})
        assert isinstance(chunked.data._meta, np.ndarray)  # dask's manager's numpy meta
    assert isinstance(lazy.sum("cell").data, np.ndarray)
    assert isinstance(xr.dot(lazy, weights).data, np.ndarray)
    assert isinstance(_open(store, {}).data._meta, sparse.COO)
