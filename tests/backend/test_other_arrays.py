"""Opening, reducing, grouping and writing a store changes nothing for any other array.

``tests/backend/other_arrays.py`` runs one set of xarray and dask operations on numpy,
dask-of-numpy, ``sparse.COO``, dask-of-sparse and ``scipy.sparse`` arrays, in a fresh process that
never imports the package and in one that first uses a store every way a user would; every
result's types and values (or the error it raised) must be the same in both, in either of dask's
array models (``array.query-planning`` is read from the environment the test runs in).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(mode: str, tmp_path: Path) -> dict[tuple[str, str], Any]:
    out = tmp_path / f"{mode}.pkl"
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in paths if path)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.backend.other_arrays",
            mode,
            str(tmp_path / "s.zarr"),
            str(out),
        ],
        cwd=ROOT,
        env=env,
        check=True,
    )
    with out.open("rb") as file:
        results: dict[tuple[str, str], Any] = pickle.load(file)
    return results


def _differences(before: Any, after: Any, at: str) -> list[str]:
    """Where ``after`` differs from ``before``: types, dtypes, shapes and values, NaN equal."""
    if isinstance(before, np.ndarray) or isinstance(after, np.ndarray):
        if not (isinstance(before, np.ndarray) and isinstance(after, np.ndarray)):
            return [f"{at}: {before!r} became {after!r}"]
        if (before.dtype, before.shape) != (after.dtype, after.shape):
            return [f"{at}: {before.dtype}{before.shape} became {after.dtype}{after.shape}"]
        if before.dtype.kind == "O":
            equal = [repr(a) == repr(b) for a, b in zip(before.ravel(), after.ravel(), strict=True)]
            return [] if all(equal) else [f"{at}: {before!r} became {after!r}"]
        nan = before.dtype.kind in "fc"
        return [] if np.array_equal(before, after, equal_nan=nan) else [f"{at}: values differ"]
    if isinstance(before, dict) and isinstance(after, dict):
        if before.keys() != after.keys():
            return [f"{at}: fields {sorted(before)} became {sorted(after)}"]
        return [d for key in before for d in _differences(before[key], after[key], f"{at}.{key}")]
    if isinstance(before, (tuple, list)) and isinstance(after, (tuple, list)):
        if type(before) is not type(after) or len(before) != len(after):
            return [f"{at}: {before!r} became {after!r}"]
        pairs = zip(before, after, strict=True)
        return [d for i, (b, a) in enumerate(pairs) for d in _differences(b, a, f"{at}[{i}]")]
    if type(before) is not type(after):
        return [f"{at}: {before!r} became {after!r}"]
    same = before == after or (before != before and after != after)  # NaN fill values
    return [] if same else [f"{at}: {before!r} became {after!r}"]


@pytest.mark.slow
def test_using_a_store_changes_no_result_of_any_other_array(tmp_path: Path) -> None:
    before = _run("plain", tmp_path)
    after = _run("after-sporadik", tmp_path)
    assert before.keys() == after.keys()
    differences = [
        d for key in before for d in _differences(before[key], after[key], " ".join(key))
    ]
    assert not differences, "\n".join(differences)
