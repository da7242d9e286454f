"""The package: its dependencies agree across files, and it never imports the reference."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import sporadik_dask

ROOT = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    """The distribution name of a requirement, without extras or versions."""
    match = re.match(r"[A-Za-z0-9_.\-]+", requirement.strip())
    assert match, requirement
    return match.group(0).lower().replace("_", "-")


def test_environment_yml_names_the_same_dependencies_as_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_name(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        declared |= {_name(r) for r in extra}

    conda: set[str] = set()
    text = (ROOT / "environment.yml").read_text()
    for line in text.splitlines():
        item = re.match(r"^\s+- ([^:#\s][^#]*)$", line)
        if item and item.group(1).strip() not in ("conda-forge",):
            conda.add(_name(item.group(1)))
    conda -= {"python", "pip"}
    assert conda == declared


def test_the_package_runs_without_the_reference_installed(tmp_path: Path) -> None:
    script = (
        "import sys; sys.modules['sporadik'] = None\n"
        "import sporadik_dask, pkgutil, importlib\n"
        "for m in pkgutil.walk_packages(sporadik_dask.__path__, 'sporadik_dask.'):\n"
        "    importlib.import_module(m.name)\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_every_public_name_is_exported_and_exists() -> None:
    for name in sporadik_dask.__all__:
        assert hasattr(sporadik_dask, name), name
