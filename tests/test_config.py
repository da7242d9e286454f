"""The ``sporadik`` keys of ``dask.config``: one YAML of defaults, registered with dask,
equal to the constants the code falls back on, and each in the documentation's table."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import dask

from sporadik_dask import config
from sporadik_dask.planning import budgets
from sporadik_dask.reduce.results import DENSE_RESULT_CELLS
from sporadik_dask.store import ranges, shards
from sporadik_dask.write import kept

ROOT = Path(__file__).resolve().parents[1]


def _keys_read() -> set[str]:
    """Every ``sporadik.`` key the package reads from ``dask.config``."""
    found: set[str] = set()
    for path in (ROOT / "sporadik_dask").rglob("*.py"):
        found |= set(re.findall(r"config\.get\(\s*\"sporadik\.([a-z-]+)\"", path.read_text()))
    found |= (
        {"patches"} if 'SWITCH = "sporadik.patches"' in _source("backend/patches.py") else set()
    )
    return found


def _source(name: str) -> str:
    return (ROOT / "sporadik_dask" / name).read_text()


def test_every_key_the_package_reads_has_its_default_in_the_yaml() -> None:
    assert _keys_read() == set(config.DEFAULTS["sporadik"])


def test_the_defaults_are_the_constants_the_code_falls_back_on() -> None:
    describe = importlib.import_module("sporadik_dask.store.describe")
    defaults = config.DEFAULTS["sporadik"]
    assert defaults["partition-bytes"] == budgets.PARTITION_BYTES
    assert defaults["spill-bytes"] == budgets.SPILL_BYTES
    assert defaults["keep-pieces"] == kept.KEEP_PIECES[0]
    assert defaults["max-positions"] == describe.MAX_POSITIONS
    assert defaults["whole-shard"] == shards.WHOLE_SHARD
    assert defaults["coalesce-gap"] == ranges.COALESCE_GAP
    assert defaults["coalesce-max"] == ranges.COALESCE_MAX
    assert defaults["dense-result-cells"] == DENSE_RESULT_CELLS
    assert defaults["dense-partials-bytes"] == budgets.DENSE_PARTIALS_BYTES
    assert defaults["selection-read-values"] == budgets.SELECTION_READ_VALUES
    assert defaults["group-table-bytes"] == budgets.GROUP_TABLE_BYTES
    assert all(defaults[k] is True for k in ("patches", "pushdown", "join-in-order"))
    assert defaults["decode-threads"] is None  # the cores


def test_importing_the_package_registers_every_default_with_dask() -> None:
    for key, default in config.DEFAULTS["sporadik"].items():
        assert dask.config.get(f"sporadik.{key}") == default, key
    with dask.config.set({"sporadik.spill-bytes": 0}):
        assert dask.config.get("sporadik.spill-bytes") == 0


def test_the_environment_overrides_a_default() -> None:
    code = "import sporadik_dask, dask; print(dask.config.get('sporadik.spill-bytes'))"
    env = {**os.environ, "DASK_SPORADIK__SPILL_BYTES": "0", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "0", out.stderr


def test_every_key_is_in_the_documentations_table() -> None:
    table = (ROOT / "docs" / "configuration.md").read_text()
    documented = set(re.findall(r"^\| `sporadik\.([a-z-]+)` \|", table, flags=re.MULTILINE))
    assert documented == set(config.DEFAULTS["sporadik"])
