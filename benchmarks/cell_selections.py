"""A cell mask's sum, maximum and a grouped sum of the masked cells over 5 M cells x 200 genes,
lazily opened, by several trees of the package side by side: the pass's group codes as a table
of the axis, looked up per value, or in windows of the table.

    .venv/bin/python benchmarks/cell_selections.py --route "table, 62d195a^=DIR" \\
        --route "windows=." --route "windows, table forced=.:table"

Each ``--route`` is ``label=DIR`` (DIR put first on ``PYTHONPATH``: a tree of the package, such
as ``git archive`` of a commit), ``:table`` after it setting ``sporadik.group-table-bytes`` to
1 GiB, so the axis's codes are a table. The store (5,000,000 x 200 float32, density ~0.05 from
:mod:`sporadik_dask.synthetic`, both layouts) is written once under ``--work``. Each case by
each route runs in a fresh process on the threaded scheduler: called once (kernels compiled,
store opened), then ``--repeats`` times timed (wall and CPU seconds), then once under
``tracemalloc`` (its peak: what numpy and Python held at once). Routes alternate case by case.
Results replace the section between this script's markers in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from page import publish

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- cell-selections: made by benchmarks/cell_selections.py -->"
END = "<!-- /cell-selections -->"
CELLS, GENES, DENSITY, SEED = 5_000_000, 200, 0.05, 3
CASES = {
    "mask-sum": "X.isel(cell=mask).sum('cell')",
    "mask-groupby": "X.isel(cell=mask).groupby('cluster').sum()",
    "mask-max": "X.isel(cell=mask).max('cell')",
}


def _write(store: Path) -> None:
    import dask

    import sporadik_dask as sd
    from sporadik_dask.synthetic import counts_matrix

    x = counts_matrix(cells=CELLS, genes=GENES, density=DENSITY, seed=SEED, rows_per_chunk=100_000)
    with dask.config.set(scheduler="threads"):
        sd.to_sporadik(x, store)


def _child(case: str, store: str, table: bool, repeats: int) -> None:
    import dask
    import xarray as xr

    dask.config.set(scheduler="threads")
    if table:
        dask.config.set({"sporadik.group-table-bytes": 2**30})
    dataset = xr.open_dataset(store, engine="sporadik")
    variable = dataset[next(iter(dataset.data_vars))]
    variable = variable.rename(dict(zip(variable.dims, ("cell", "gene"), strict=True)))
    rng = np.random.default_rng(0)
    mask = rng.random(CELLS) < 0.5
    variable = variable.assign_coords(cluster=("cell", rng.integers(0, 20, CELLS)))
    call = {
        "mask-sum": lambda: variable.isel(cell=mask).sum("cell").values,
        "mask-groupby": lambda: variable.isel(cell=mask).groupby("cluster").sum().values,
        "mask-max": lambda: variable.isel(cell=mask).max("cell").values,
    }[case]
    result = call()
    seconds, cpu = [], []
    for _ in range(repeats):
        started, used = time.perf_counter(), time.process_time()
        result = call()
        seconds.append(time.perf_counter() - started)
        cpu.append(time.process_time() - used)
    result = None
    tracemalloc.start()
    result = call()
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    total = float(np.asarray(result, dtype=np.float64).sum())
    print(json.dumps({"seconds": seconds, "cpu": cpu, "traced": traced, "total": total}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/sporadik-cell-selections"))
    parser.add_argument("--route", action="append", default=[], help="label=DIR[:table]")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--no-publish", action="store_true", help="print, leave the docs alone")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        case, store, table, repeats = args.child
        _child(case, store, table == "table", int(repeats))
        return
    store = args.work / "cells.zarr"
    if not store.exists():
        args.work.mkdir(parents=True, exist_ok=True)
        _write(store)
    routes = []
    for spec in args.route:
        label, _, where = spec.partition("=")
        tree, _, table = where.partition(":")
        if not (Path(tree) / "sporadik_dask" / "__init__.py").exists():
            parser.error(f"route {label!r}: {tree!r} holds no sporadik_dask; give a tree of it")
        routes.append((label, str(Path(tree).resolve()), table))
    load = os.getloadavg()
    measured: dict[tuple[str, str], dict[str, Any]] = {}
    for case in args.cases:
        for label, tree, table in routes:
            out = subprocess.run(
                [sys.executable, __file__, "--child", case, str(store), table or "-",
                 str(args.repeats)],
                capture_output=True, text=True, check=True,
                env={**os.environ, "PYTHONPATH": tree},
            )  # fmt: skip
            measured[case, label] = json.loads(out.stdout.strip().splitlines()[-1])
            print(case, label, measured[case, label], flush=True)
    after = os.getloadavg()
    routes_said = " ".join(f'--route "{spec}"' for spec in args.route)
    lines = [
        BEGIN,
        "## A cell mask's sums over 5 M cells: the pass's group codes",
        "",
        f"Made by `.venv/bin/python benchmarks/cell_selections.py {routes_said}` on "
        f"{date.today().isoformat()} (2 cores, shared; load average {load[0]:.1f} before, "
        f"{after[0]:.1f} after): {CELLS:,} cells x {GENES} genes of float32 at density "
        f"~{DENSITY} (`sporadik_dask.synthetic`, seed {SEED}), both layouts, opened lazily "
        "(`xr.open_dataset(store, engine='sporadik')`); `mask` keeps a random half of the "
        "cells, `cluster` is one of 20 per cell. Each case by each route in a fresh process "
        f"(threaded scheduler): called once, then {args.repeats} times timed (the median's wall "
        "and CPU seconds), then once under `tracemalloc` (*traced peak*). A route is a tree of "
        "the package on `PYTHONPATH`; *table* sets `sporadik.group-table-bytes` to 1 GiB.",
        "",
        "| case | route | s | CPU s | traced peak MiB |",
        "|---|---|---|---|---|",
    ]
    for (case, label), m in measured.items():
        lines.append(
            f"| `{CASES[case]}` | {label} | {statistics.median(m['seconds']):.2f} | "
            f"{statistics.median(m['cpu']):.2f} | {m['traced'] / 2**20:.1f} |"
        )
    totals = {case: {m["total"] for (c, _), m in measured.items() if c == case} for case in CASES}
    lines += ["", "Every route's result added up to the same total, case by case."]
    if any(len(found) > 1 for found in totals.values()):
        lines[-1] = f"The routes' results differ: totals {totals}."
    if args.no_publish:
        print("\n".join([*lines, "", END]))
    else:
        publish(args.output, BEGIN, END, lines)


if __name__ == "__main__":
    main()
