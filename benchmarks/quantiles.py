"""The median, quantiles and top cell of each gene from a store, beside numpy on the dense
matrix and scipy on a CSC matrix.

    .venv/bin/python benchmarks/quantiles.py [--cells 50000] [--genes 10000]
        [--density 0.015] [--routes lazy chunks={} numpy csc]

The store is ``sd.synthetic.counts_matrix`` of that size (float32 counts), written once under
``--work``. Each (statistic, route) runs in a fresh process: the statistic twice (*first*, then
*again*; wall seconds), and that process's peak RSS (``VmHWM``; for ``numpy`` and ``csc``, the
matrix in memory included, loaded before timing). Statistics: ``median`` (``X.median("cell")``),
``quantiles`` (``X.quantile([0.5, 0.9, 0.99], "cell")``) and ``argmax`` (``X.argmax("cell")``).
Routes: ``lazy`` and ``chunks={}`` open the store without and with ``chunks={}``; ``numpy`` is
``np.median`` / ``np.quantile`` / ``np.argmax`` of the dense matrix along the cells; ``csc`` the
same of each block of 500 genes of a ``csc_matrix`` made dense one block at a time (scipy has no
median), and scipy's own ``csc.argmax(axis=0)``. Each answer is compared with ``numpy``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STATISTICS = ["median", "quantiles", "argmax"]
ROUTES = ["lazy", "chunks={}", "numpy", "csc"]
Q = [0.5, 0.9, 0.99]
GENES_AT_ONCE = 500


def _peak_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def _prepared(route: str, store: Path) -> Any:
    """What a route computes from, made before timing."""
    import xarray as xr

    import sporadik_dask as sd

    if route in ("lazy", "chunks={}"):
        chunks = {} if route == "chunks={}" else None
        return xr.open_dataset(store, engine="sporadik", chunks=chunks)["x"]
    csc = sd.from_sporadik(store, axis=1).compute().tocsc()
    return csc.toarray() if route == "numpy" else csc


def _computed(statistic: str, route: str, x: Any) -> Any:
    import numpy as np

    if route in ("lazy", "chunks={}"):
        if statistic == "argmax":
            return x.argmax("cell").compute().values
        result = x.median("cell") if statistic == "median" else x.quantile(Q, "cell")
        return result.compute().values

    def of(dense: Any) -> Any:
        if statistic == "argmax":
            return np.argmax(dense, axis=0)
        return np.median(dense, axis=0) if statistic == "median" else np.quantile(dense, Q, axis=0)

    if route == "numpy":
        return of(x)
    if statistic == "argmax":
        return np.asarray(x.argmax(axis=0)).ravel()
    parts = [of(x[:, g : g + GENES_AT_ONCE].toarray()) for g in range(0, x.shape[1], GENES_AT_ONCE)]
    return np.concatenate(parts, axis=-1)


def _child(statistic: str, route: str, store: Path, answer: Path) -> None:
    import numpy as np

    x = _prepared(route, store)
    times = []
    for _ in range(2):
        start = time.perf_counter()
        result = _computed(statistic, route, x)
        times.append(time.perf_counter() - start)
    np.save(answer, np.asarray(result, np.float64))
    print(json.dumps({"first": times[0], "again": times[1], "peak": _peak_gib()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=50_000)
    parser.add_argument("--genes", type=int, default=10_000)
    parser.add_argument("--density", type=float, default=0.015)
    parser.add_argument("--routes", nargs="+", default=ROUTES, choices=ROUTES)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "quantiles")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        statistic, route, store, answer = args.child
        _child(statistic, route, Path(store), Path(answer))
        return

    import numpy as np
    import xarray as xr

    import sporadik_dask as sd

    store = args.work / f"counts-{args.cells}x{args.genes}-{args.density}.zarr"
    if not store.exists():
        matrix = sd.synthetic.counts_matrix(args.cells, args.genes, args.density)
        sd.to_sporadik(xr.DataArray(matrix, dims=("cell", "gene"), name="x"), store)
    print(f"uptime: {os.getloadavg()}")
    print("| statistic | route | first s | again s | peak GiB | largest difference from numpy |")
    print("|---|---|---|---|---|---|")
    for statistic in STATISTICS:
        answers: dict[str, Any] = {}
        for route in sorted(args.routes, key=lambda r: r != "numpy"):
            answer = args.work / f"{statistic}-{route}.npy"
            out = subprocess.run(
                [sys.executable, __file__, "--child", statistic, route, str(store), str(answer)],
                check=True,
                capture_output=True,
                text=True,
            )
            row = json.loads(out.stdout.strip().splitlines()[-1])
            answers[route] = np.load(answer)
            want = answers.get("numpy")
            difference = "—" if want is None else f"{np.max(np.abs(answers[route] - want)):.3g}"
            print(
                f"| {statistic} | {route} | {row['first']:.2f} | {row['again']:.2f} "
                f"| {row['peak']:.2f} | {difference} |"
            )
    print(f"uptime: {os.getloadavg()}")


if __name__ == "__main__":
    main()
