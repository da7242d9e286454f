"""A store read whole with the package at a git revision and at this tree, side by side.

    .venv/bin/python benchmarks/reads.py BASE [--cells N] [--rounds R]

The store is ``benchmarks/codecs.py``'s realistic matrix of ``N`` cells, both layouts, default
codecs, written once by this tree. Each round runs, for each side in turn (the order flipped
every round, as this machine's noise is larger than many differences), a fresh process that
times a full pass (``totals`` per cell and per gene, on dask's threaded scheduler) and the bare
decode of every chunk of the cell-major layout's ``data`` and ``indices``
(:func:`~sporadik_dask.store.chunks.read_joined`), each once to warm up and then once counted, by
the clock and in CPU seconds of every thread. ``BASE`` is checked out into a git worktree of its
own. Prints each side's median per step.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("pass", "decode")


def _child(store: Path) -> dict[str, float]:
    """One side's round: each step warmed up, then timed."""
    import numpy as np
    import xarray as xr
    import zarr

    from sporadik_dask.store.chunks import read_joined

    counts = xr.open_dataset(store, engine="sporadik")
    x = counts[next(iter(counts.data_vars))]
    cell, gene = x.dims
    layout = zarr.open_group(store / "layouts" / "axis0", mode="r")
    arrays = [layout["data"], layout["indices"]]
    requests = [(a, np.arange(-(-a.shape[0] // a.chunks[0]), dtype=np.int64)) for a in arrays]
    work: dict[str, Any] = {
        "pass": lambda: (x.sporadik.totals(cell), x.sporadik.totals(gene)),
        "decode": lambda: read_joined(requests),
    }
    found = {}
    for step in STEPS:
        work[step]()
        start, used = time.perf_counter(), time.process_time()
        work[step]()
        found[step] = time.perf_counter() - start
        found[f"cpu-{step}"] = time.process_time() - used
    return found


def _store(where: Path, cells: int) -> Path:
    """The realistic matrix of ``benchmarks/codecs.py``, written by this tree."""
    import sporadik_dask as sd

    # benchmarks/codecs.py, by path: the standard library's ``codecs`` is imported already
    spec = importlib.util.spec_from_file_location("codec_chains", ROOT / "benchmarks" / "codecs.py")
    assert spec is not None and spec.loader is not None
    chains = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(chains)
    sd.to_sporadik(chains.realistic(cells, 20_000), where / "s.zarr")
    return where / "s.zarr"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", nargs="?", help="the revision to compare this tree with")
    parser.add_argument("--cells", type=int, default=6_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child)))
        return
    found: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        where = Path(scratch)
        tree = where / "base"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.base],
            check=True, capture_output=True,
        )  # fmt: skip
        sides = {f"at {args.base}": tree, "this tree": ROOT}
        try:
            store = _store(where, args.cells)
            for turn in range(args.rounds):
                order = list(sides.items())
                for name, package in order if turn % 2 == 0 else order[::-1]:
                    done = subprocess.run(
                        [sys.executable, __file__, "--child", str(store)],
                        capture_output=True, text=True, check=True,
                        env={**os.environ, "PYTHONPATH": str(package)},
                    )  # fmt: skip
                    found.setdefault(name, []).append(json.loads(done.stdout.splitlines()[-1]))
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                check=False, capture_output=True,
            )  # fmt: skip
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{args.cells:,} cells, {args.rounds} rounds, load average at the end {load}")
    print("| step | package | s, median (min-max) | CPU s, median (min-max) |")
    print("|---|---|---|---|")
    for step in STEPS:
        for name, runs in found.items():
            cells = []
            for key in (step, f"cpu-{step}"):
                t = [run[key] for run in runs]
                cells.append(f"{statistics.median(t):.3f} ({min(t):.3f}-{max(t):.3f})")
            print(f"| {step} | {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
