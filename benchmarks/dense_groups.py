"""A grouped sum whose dense result is larger than the matrix: time and peak memory by route.

    .venv/bin/python benchmarks/dense_groups.py [--cells 200000] [--genes 5000] [--groups 20000]

The store is ``sd.synthetic.counts_matrix`` of that size at 2 % density, written once under
``--work``. Each route runs in a fresh process of its own, its sum twice (*first*, then
*again*), and reports its peak RSS (``VmHWM``): lazily; with ``chunks={}`` under the default
``sporadik.dense-partials-bytes``; with ``chunks={}`` and no such bound (every span's partial
result held for the merge, as before the bound); and scipy's indicator-matrix product on the
CSR matrix in memory.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROUTES = ["lazy", "chunks={}", "chunks={}, unbounded", "scipy"]


def _peak_gib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    return float("nan")


def _child(route: str, store: Path, groups: int) -> dict[str, Any]:
    import dask
    import numpy as np
    import xarray as xr

    import sporadik_dask as sd

    cells = sd.describe(store).shape[0]
    labels = np.random.default_rng(0).integers(0, groups, cells)
    if route == "scipy":
        import scipy.sparse as sp

        matrix = sd.from_sporadik(store).compute().tocsr()
        indicator = sp.csr_matrix((np.ones(cells), (labels, np.arange(cells))))

        def run() -> Any:
            return indicator @ matrix
    else:
        chunks = None if route == "lazy" else {}
        unbounded = {"sporadik.dense-partials-bytes": 2**62} if "unbounded" in route else {}

        def run() -> Any:
            with dask.config.set(unbounded):
                opened = xr.open_dataset(store, engine="sporadik", chunks=chunks)
                counts = opened[next(iter(opened.data_vars))]
                grouped = counts.assign_coords(g=("dim_0", labels)).groupby("g").sum()
                return grouped.compute()

    times = []
    for _ in range(2):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return {"route": route, "first": times[0], "again": times[1], "peak_gib": _peak_gib()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=200_000)
    parser.add_argument("--genes", type=int, default=5_000)
    parser.add_argument("--groups", type=int, default=20_000)
    parser.add_argument(
        "--work", type=Path, default=Path(tempfile.gettempdir()) / "sporadik-groups"
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    store = args.work / f"counts-{args.cells}-{args.genes}.zarr"
    if args.child:
        print(json.dumps(_child(args.child[0], Path(args.child[1]), args.groups)))
        return
    if not store.exists():
        import sporadik_dask as sd

        x = sd.synthetic.counts_matrix(
            cells=args.cells, genes=args.genes, density=0.02, rows_per_chunk=20_000
        )
        sd.to_sporadik(x, store)
    print(f"{args.cells:,} cells x {args.genes:,} genes, {args.groups:,} groups of cells")
    print("| route | first s | again s | peak RSS GiB |\n|---|---|---|---|")
    for route in ROUTES:
        child = subprocess.run(
            [sys.executable, __file__, "--child", route, str(store), "--groups", str(args.groups),
             "--cells", str(args.cells), "--genes", str(args.genes)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if child.returncode != 0:
            print(f"| {route} | fails: {child.stderr.strip().splitlines()[-1]} | | |")
            continue
        r = json.loads(child.stdout.strip().splitlines()[-1])
        row = f"| {route} | {r['first']:.2f} | {r['again']:.2f} | {r['peak_gib']:.2f} |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
