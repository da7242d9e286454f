"""The package: its dependencies agree across files, and it never imports the reference."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

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


@pytest.mark.slow
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


def test_the_public_names_are_these_and_no_other() -> None:
    assert sporadik_dask.__all__ == [
        "SPEC_VERSION",
        "AbsentChunkError",
        "AbsentChunkWarning",
        "Batch",
        "FetchError",
        "IncompleteError",
        "LayoutDescription",
        "LayoutError",
        "MinibatchDataset",
        "Minibatches",
        "ScanWarning",
        "SpecError",
        "SporadikError",
        "StoreAccessError",
        "StoreDescription",
        "StoreExistsError",
        "StoreNotFoundError",
        "StoreReader",
        "StoreReplacedError",
        "StoreWrite",
        "__version__",
        "add_axis",
        "describe",
        "from_sporadik",
        "highly_variable_genes",
        "pca",
        "to_sporadik",
        "validate",
    ]


#: Public names that need an optional dependency, and the module it is.
OPTIONAL = {"MinibatchDataset": "torch"}


def test_every_public_name_is_exported_and_exists() -> None:
    """Every name exists; one that needs an optional dependency that is not installed says
    which, and how to install it."""
    import importlib.util

    for name in sporadik_dask.__all__:
        needed = OPTIONAL.get(name)
        if needed is not None and importlib.util.find_spec(needed) is None:
            with pytest.raises(ImportError, match=rf"pip install 'sporadik-dask\[{needed}\]'"):
                getattr(sporadik_dask, name)
            continue
        assert hasattr(sporadik_dask, name), name


@pytest.mark.slow
def test_public_names_load_on_first_use_and_a_submodule_never_hides_a_function() -> None:
    script = (
        "import sys\n"
        "import sporadik_dask as sd\n"
        "assert not {'zarr', 'dask.array', 'sparse', 'numba'} & set(sys.modules), 'eager'\n"
        "import sporadik_dask.store.describe, sporadik_dask.read.validate, sporadik_dask.read\n"
        "assert callable(sd.describe) and callable(sd.validate), (sd.describe, sd.validate)\n"
        "from sporadik_dask import to_sporadik, describe\n"
        "assert to_sporadik.__module__ == 'sporadik_dask.write.writer'\n"
        "assert describe is sd.describe\n"
        "assert set(sd.__all__) <= set(dir(sd))\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def _imports(path: Path) -> set[str]:
    """The modules ``path`` imports when it runs (imports under ``TYPE_CHECKING`` left out), with
    ``from package import name`` counted as importing ``package.name`` too."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def _import_graph() -> dict[str, set[str]]:
    """Each module of the package to the modules of the package it imports, the package's own
    ``__init__`` left out (every submodule's import runs it, so it is no one's dependency)."""
    files = {
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): path
        for path in (ROOT / "sporadik_dask").rglob("*.py")
    }
    return {
        name: {other for other in _imports(path) if other in files} - {name, "sporadik_dask"}
        for name, path in files.items()
    }


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    stack = [start]
    while stack:
        for other in graph[stack.pop()] - seen:
            seen.add(other)
            stack.append(other)
    return seen


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = _import_graph()
    cycles = sorted(name for name in graph if name in _reachable(graph, name))
    assert not cycles, cycles


def test_the_xarray_backend_never_imports_the_writer() -> None:
    graph = _import_graph()
    backend = [name for name in graph if name.startswith("sporadik_dask.backend")]
    assert len(backend) >= 5, backend
    for name in backend:
        assert not {"sporadik_dask.write.writer", "sporadik_dask.write.sources"} & _reachable(
            graph, name
        ), name
