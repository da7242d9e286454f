"""The tree shows the architecture: each folder of the package a layer, imports pointing down,
and every module in the map of ``docs/architecture.md``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sporadik_dask"

#: The layers, lowest first: a module may import from its own layer and the ones before it.
LAYERS = (
    "format",
    "store",
    "kernels",
    "planning",
    "read",
    "reduce",
    "write",
    "backend",
    "analysis",
    "cli",
)

#: Imports that point up, each made inside the function that needs it, with why.
UPWARD = {
    # a reduction of a dask read is a pass over the store's runs, not dask's over its blocks
    ("sporadik_dask.read.reductions", "sporadik_dask.reduce.fields"),
    ("sporadik_dask.read.reductions", "sporadik_dask.reduce.results"),
    ("sporadik_dask.read.reductions", "sporadik_dask.reduce.selection"),
    ("sporadik_dask.read.reductions", "sporadik_dask.reduce.spans"),
    ("sporadik_dask.read.reductions", "sporadik_dask.reduce.target"),
}


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _imported(path: Path) -> set[str]:
    """Every module of the package ``path`` imports, at any depth, under ``TYPE_CHECKING`` too."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return {name for name in names if name.startswith("sporadik_dask.")}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def _imports_by_layer() -> list[tuple[str, str]]:
    """(importer, imported) for every import between two layers of the package."""
    return [
        (_module(path), name)
        for path in sorted(PACKAGE.rglob("*.py"))
        if _layer(_module(path)) is not None
        for name in sorted(_imported(path))
        if _layer(name) is not None
    ]


def test_every_folder_of_the_package_is_a_layer() -> None:
    folders = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    assert folders == set(LAYERS)


def test_no_layer_imports_one_above_it_but_the_imports_named_with_their_reason() -> None:
    up = {
        (importer, imported)
        for importer, imported in _imports_by_layer()
        if LAYERS.index(str(_layer(imported))) > LAYERS.index(str(_layer(importer)))
    }
    assert up == UPWARD


def test_the_format_imports_no_layer_but_itself() -> None:
    found = [pair for pair in _imports_by_layer() if pair[0].startswith("sporadik_dask.format")]
    assert found, "no import within the format layer was found: the parser is broken"
    assert {_layer(imported) for _, imported in found} == {"format"}


def test_reading_imports_no_writing_backend_or_command() -> None:
    for importer, imported in _imports_by_layer():
        if _layer(importer) == "read":
            assert _layer(imported) not in {"write", "backend", "cli"}, (importer, imported)


def test_the_backend_never_imports_the_command() -> None:
    found = [pair for pair in _imports_by_layer() if _layer(pair[0]) == "backend"]
    assert found
    assert all(_layer(imported) != "cli" for _, imported in found), found


def _doc_map() -> dict[str, set[str]]:
    """The map in docs/architecture.md: each folder ('' for the package's root) to its modules."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("## Layers", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    folders: dict[str, set[str]] = {}
    folder = None
    for line in block.splitlines():
        heading = re.match(r"^ (\w+)/\s", line + " ")
        entry = re.match(r"^   (\w+\.py)\s", line + " ")
        if heading:
            folder = "" if heading.group(1) == "sporadik_dask" else heading.group(1)
            folders[folder] = set()
        elif entry and folder is not None:
            folders[folder].add(entry.group(1))
    return folders


def test_the_architecture_map_names_every_module_of_the_package_and_no_other() -> None:
    tree: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__init__.py" and path.parent != PACKAGE:
            continue
        folder = "" if path.parent == PACKAGE else path.parent.name
        tree.setdefault(folder, set()).add(path.name)
    assert _doc_map() == tree
