"""Two groupers, one combined label, and a filter before a sum, on a large store: one case and
route per process.

    .venv/bin/python benchmarks/notebook_large.py STORE CASE lazy|chunks

STORE is a rank-2 store of dims (cell, gene) whose variable is ``x``, as
``benchmarks/analysis.py --cells 200000 --genes 30000 --density 0.0675`` writes it; CASE is
``groupby-two``, ``combined``, ``sum-cell`` or ``filter-sum``. The labels (50 kinds, 4 batches)
and an 84 % cell mask are drawn with seed 0. Prints the first and the second call's seconds and
the process's peak RSS (``VmHWM``) as JSON.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr


def _peak_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def main() -> None:
    store, case, mode = sys.argv[1:4]
    chunks: dict[str, int] | None = None if mode == "lazy" else {}
    x = xr.open_dataset(store, engine="sporadik", chunks=chunks)["x"]
    rng = np.random.default_rng(0)
    cells = x.sizes["cell"]
    kind, batch = rng.integers(0, 50, cells), rng.integers(0, 4, cells)
    x = x.assign_coords(
        kind=("cell", kind), batch=("cell", batch), combined=("cell", kind * 4 + batch)
    )
    keep = rng.random(cells) < 0.84
    cases: dict[str, Callable[[], Any]] = {
        "groupby-two": lambda: x.groupby(["kind", "batch"]).sum(),
        "combined": lambda: x.groupby("combined").sum(),
        "sum-cell": lambda: x.sum("cell"),
        "filter-sum": lambda: x.isel(cell=keep).sum("cell"),
    }

    def run() -> Any:
        return cases[case]().compute().values

    started = time.perf_counter()
    run()
    first = time.perf_counter() - started
    started = time.perf_counter()
    values = run()
    again = time.perf_counter() - started
    print(
        json.dumps(
            {
                "case": case,
                "mode": mode,
                "first": round(first, 2),
                "again": round(again, 2),
                "peak GiB": round(_peak_gib(), 2),
                "shape": list(values.shape),
            }
        )
    )


if __name__ == "__main__":
    main()
