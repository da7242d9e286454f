"""What a sum over a whole store costs by each route a user can take, time and peak memory.

    .venv/bin/python benchmarks/sums.py

Reads the store ``benchmarks/run.py`` writes (``--work``, size ``full`` by default); run that
first. Each route runs in a fresh process of its own on the threaded scheduler, so its peak RSS is
its own. Results replace the section between this script's markers in ``docs/benchmarks.md``,
with the command that made them.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from datetime import date
from pathlib import Path

from page import publish

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- sums: made by benchmarks/sums.py -->"
END = "<!-- /sums -->"

ROUTES = {
    "xarray, chunks={}, .sum(dim)": "xarray-skipna",
    "xarray, chunks={}, .sum(dim, skipna=False)": "xarray",
    "from_sporadik(axis=k, format='gcxs').sum(...)": "gcxs",
    "da.sporadik.totals(kept dim)": "totals",
}


def _child(store: str, route: str, axis: int) -> None:
    """One sum over ``axis``, timed, in this process; prints seconds and peak RSS as JSON."""
    import xarray as xr

    import sporadik_dask as sd

    warnings.simplefilter("ignore")
    seconds = []
    for _ in range(2):  # the first includes compiling sparse's and our kernels
        start = time.perf_counter()
        if route == "gcxs":  # the layout whose runs the sum runs along
            x = sd.from_sporadik(store, axis=1 - axis, format="gcxs")
            result = x.sum(axis=axis).compute()
        elif route == "totals":
            ds = xr.open_dataset(store, engine="sporadik")
            counts = ds[next(iter(ds.data_vars))]
            result = counts.sporadik.totals(counts.dims[1 - axis]).data
        else:
            ds = xr.open_dataset(store, engine="sporadik", chunks={})
            counts = ds[next(iter(ds.data_vars))]
            options = {} if route == "xarray-skipna" else {"skipna": False}
            result = counts.sum(counts.dims[axis], **options).compute().data
        seconds.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": seconds, "peak": peak, "type": type(result).__name__}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sporadik-bench")
    parser.add_argument("--size", default="full")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        store, route, axis = args.child
        _child(store, route, int(axis))
        return
    cache = args.work / args.size
    store = cache / "ours-threaded.zarr"
    if not store.exists():
        sys.exit(f"{store} is missing: run benchmarks/run.py --sizes {args.size} first.")
    shape = json.loads((cache / "meta.json").read_text())
    rows = []
    for label, route in ROUTES.items():
        for axis, dim in enumerate(("cells", "genes")):
            done = subprocess.run(
                [sys.executable, __file__, "--child", str(store), route, str(axis)],
                check=True,
                capture_output=True,
                text=True,
            )
            measured = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append((label, dim, measured))
            print(label, dim, measured, flush=True)
    lines = [
        BEGIN,
        "## A sum over the whole store, by route",
        "",
        f"Made by `.venv/bin/python benchmarks/sums.py --size {args.size}` on "
        f"{date.today().isoformat()}: the {shape['nnz']:,}-value store of {shape['cells']:,} "
        f"cells x {shape['genes']:,} genes (float32) that `benchmarks/run.py` wrote. Each route "
        "runs twice in a fresh process of its own on the threaded scheduler: *first* includes "
        "compiling `sparse`'s and this package's numba kernels, as a user's first sum does; "
        "*again* is the same sum once they are compiled; peak RSS is that process's own.",
        "",
        "| route | sum over | first s | again s | peak RSS GiB | result |",
        "|---|---|---|---|---|---|",
    ]
    for label, dim, measured in rows:
        first, again = measured["seconds"]
        lines.append(
            f"| `{label}` | {dim} | {first:.1f} | {again:.1f} | "
            f"{measured['peak'] / 2**30:.1f} | {measured['type']} |"
        )
    publish(args.output, BEGIN, END, lines)


if __name__ == "__main__":
    main()
