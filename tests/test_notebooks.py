"""Every notebook runs top to bottom on a real kernel."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_the_notebook_runs_and_is_kept_without_outputs(
    notebook: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    document = nbformat.read(notebook, as_version=4)
    code = [cell for cell in document.cells if cell.cell_type == "code"]
    assert code and all(not cell.get("outputs") for cell in code)
    assert all(cell.get("execution_count") is None for cell in code)  # no count kept from a run
    monkeypatch.setenv("QUICKSTART_CELLS", "4000")
    monkeypatch.setenv("NOTEBOOK_CELLS", "4000")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    NotebookClient(document, timeout=300, kernel_name="python3").execute()  # raises on an error
    # Every code cell ran, once and in order, on this kernel.
    assert [cell.get("execution_count") for cell in code] == list(range(1, len(code) + 1))
