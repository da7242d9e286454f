"""Reductions of `from_sporadik(...)`, dask's methods and numpy's functions, along some axes or
all, skipping NaNs or not: one pass over a layout's runs, with numpy's values and dtypes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import sparse

import sporadik_dask as sd
from sporadik_dask.read.dask_model import graph_names


def dense_of(result: Any) -> npt.NDArray[Any]:
    return result.todense() if hasattr(result, "todense") else np.asarray(result)


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_reductions_of_from_sporadik_along_some_axes_are_one_pass_with_numpys_values(
    tmp_path: Path, dtype: type
) -> None:
    """``sparse``'s own reduction of COO blocks re-sorts every block; along some axes of a
    whole read these are one pass over a layout's runs, as dask arrays of COO, numpy's dtypes
    and NaNs."""
    rng = np.random.default_rng(14)
    signs = rng.integers(-50, 50, (300, 40))
    dense: npt.NDArray[Any] = ((rng.random((300, 40)) < 0.2) * signs).astype(dtype)
    if dtype == np.float64:
        dense[5, 3] = np.nan
    sd.to_sporadik(dense, tmp_path / "s.zarr")
    x = sd.from_sporadik(tmp_path / "s.zarr", chunks=(100, 40))
    for op in ("sum", "mean", "max", "min"):
        for axis in (0, 1, (-1,)):
            got = getattr(x, op)(axis=axis)
            assert any("sporadik-" + op in name for name in graph_names(got)), (op, axis)
            computed = got.compute()
            expected = getattr(dense, op)(axis=axis)
            assert isinstance(computed, sparse.COO) and computed.dtype == expected.dtype
            np.testing.assert_allclose(computed.todense(), expected, rtol=1e-6)
    whole = x.sum()  # the whole array's too: sparse's sum of uint64 near 2**64 is 0
    assert any("sporadik-sum" in name for name in graph_names(whole))
    np.testing.assert_allclose(dense_of(whole.compute()), dense.sum())
    kept = x.sum(axis=0, keepdims=True).compute()  # dask's own too
    np.testing.assert_allclose(dense_of(kept), dense.sum(0, keepdims=True))


@pytest.mark.slow
def test_numpys_reductions_of_from_sporadik_over_all_axes_and_skipping_nans_are_numpys(
    tmp_path: Path,
) -> None:
    """``np.nanvar`` and friends of a read (dask's of ``sparse`` blocks raise on fill values),
    ``var`` of booleans, and a whole sum of uint64 values near 2**64 (``sparse`` gives 0): one
    pass each, numpy's values; an array of no cell gives numpy's answer or error."""
    big = np.zeros((3, 4), dtype=np.uint64)
    big[1, 2] = 2**64 - 2
    sd.to_sporadik(big, tmp_path / "big.zarr")
    x = sd.from_sporadik(tmp_path / "big.zarr", chunks=2)
    assert int(np.sum(x).compute()) == 2**64 - 2
    assert x.sum().compute().dtype == np.uint64
    rng = np.random.default_rng(3)
    dense = np.where(rng.random((30, 7)) < 0.3, rng.normal(1e8, 1, (30, 7)), 0.0)
    dense[4, 2] = np.nan
    sd.to_sporadik(dense, tmp_path / "nan.zarr")
    y = sd.from_sporadik(tmp_path / "nan.zarr", chunks=(10, 7))
    for name in ("nansum", "nanmean", "nanmax", "nanmin", "nanvar", "nanstd", "var", "std"):
        for axis in (None, 0, 1):
            got = dense_of(getattr(np, name)(y, axis=axis).compute())
            np.testing.assert_allclose(got, getattr(np, name)(dense, axis=axis), rtol=1e-9)
    np.testing.assert_allclose(dense_of(y.var(axis=0, ddof=1).compute()), dense.var(0, ddof=1))
    flags = rng.random((6, 5)) < 0.5
    sd.to_sporadik(flags, tmp_path / "flags.zarr")
    z = sd.from_sporadik(tmp_path / "flags.zarr", chunks=2, format="gcxs")
    np.testing.assert_allclose(dense_of(z.var(axis=1).compute()), flags.var(axis=1))
    sd.to_sporadik(np.zeros((0, 3)), tmp_path / "empty.zarr")
    empty = sd.from_sporadik(tmp_path / "empty.zarr")
    assert dense_of(np.nanvar(empty, axis=0).compute()).shape == (3,)
    with pytest.raises(ValueError, match="zero-size"):
        np.max(empty, axis=0).compute()
