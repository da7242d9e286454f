"""Memory of selections and of reductions of selections, against their result or the unfiltered
reduction.

    .venv/bin/python benchmarks/selection_memory.py            # the small store of run.py

Uses the store ``benchmarks/run.py`` writes (``--work``/``--size``, made by ``idioms.py`` if
missing). Each case runs in a fresh process on the threaded scheduler: called once (kernels
compiled, store opened), then again under ``tracemalloc``, whose peak counts every numpy and
Python allocation the call made (what copies cost), and ``VmHWM`` grows only if the second call
passes the first's high-water mark. Results replace the section between this script's markers in
``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
import warnings
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from page import publish

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- selection-memory: made by benchmarks/selection_memory.py -->"
END = "<!-- /selection-memory -->"
SEED = 11

#: Each case: what it is, and whether it is compared with its result's size or with a
#: reduction's (the unfiltered one, the case named).
CASES: dict[str, tuple[str, str | None]] = {
    "sum-cell": (".sum('cell')", None),
    "filter-sum": (".isel(cell=84 % mask).sum('cell')", "sum-cell"),
    "filter-both-sum": (".isel(cell=84 % mask, gene=5,000 genes).sum('cell')", "sum-cell"),
    "filter-both-mean": (".isel(cell=84 % mask, gene=5,000 genes).mean()", "sum-cell"),
    "select-both": ("50,000 scattered cells x 2,000 scattered genes", None),
}


def _call(case: str, store: str, chunks: Any, meta: dict[str, Any]) -> Any:
    import xarray as xr

    ds = xr.open_dataset(store, engine="sporadik", chunks=chunks)
    counts = ds[next(iter(ds.data_vars))]
    counts = counts.rename(dict(zip(counts.dims, ("cell", "gene"), strict=True)))
    rng = np.random.default_rng(SEED)
    mask = rng.random(meta["cells"]) < 0.84
    genes = rng.choice(meta["genes"], 5_000, replace=False)
    cells = rng.choice(meta["cells"], 50_000, replace=False)
    some = rng.choice(meta["genes"], 2_000, replace=False)

    def done(x: Any) -> Any:  # xarray's compute, as a notebook calls it
        return x.compute().data

    return {
        "sum-cell": lambda: done(counts.sum("cell")),
        "filter-sum": lambda: done(counts.isel(cell=mask).sum("cell")),
        "filter-both-sum": lambda: done(counts.isel(cell=mask, gene=genes).sum("cell")),
        "filter-both-mean": lambda: done(counts.isel(cell=mask, gene=genes).mean()),
        "select-both": lambda: done(counts.isel(cell=cells, gene=some)),
    }[case]


def _nbytes(result: Any) -> int:
    if hasattr(result, "coords") and hasattr(result, "data"):  # sparse.COO
        return int(result.coords.nbytes + result.data.nbytes)
    return int(np.asarray(result).nbytes)


def _high_water() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _child(case: str, route: str, cache: Path) -> None:
    import dask

    warnings.simplefilter("ignore")
    dask.config.set(scheduler="threads")
    meta = json.loads((cache / "meta.json").read_text())
    chunks = {} if route == "chunks={}" else None
    call = _call(case, str(cache / "ours-threaded.zarr"), chunks, meta)
    result = call()
    result = None
    before = _high_water()
    tracemalloc.start()
    started = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - started
    _, traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "traced": traced,
                "result": _nbytes(result),
                "type": type(result).__name__,
                "hwm_growth": _high_water() - before,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sporadik-bench")
    parser.add_argument("--size", default="small")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--routes", nargs="+", default=["lazy", "chunks={}"])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--no-publish", action="store_true", help="print, leave the docs alone")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        case, route, cache = args.child
        _child(case, route, Path(cache))
        return
    cache = args.work / args.size
    if not (cache / "ours-threaded.zarr").exists():
        sys.path.insert(0, str(Path(__file__).parent))
        import idioms

        idioms._ensure(cache, args.size, args.work)
    meta = json.loads((cache / "meta.json").read_text())
    measured: dict[tuple[str, str], dict[str, Any]] = {}
    for case in args.cases:
        for route in args.routes:
            out = subprocess.run(
                [sys.executable, __file__, "--child", case, route, str(cache)],
                capture_output=True,
                text=True,
                check=True,
            )
            measured[case, route] = json.loads(out.stdout.strip().splitlines()[-1])
            print(case, route, measured[case, route], flush=True)
    lines = [
        BEGIN,
        "## Selections: memory against the result",
        "",
        f"Made by `.venv/bin/python benchmarks/selection_memory.py --size {args.size}` on "
        f"{date.today().isoformat()}: the {meta['nnz']:,}-value store of {meta['cells']:,} cells "
        f"x {meta['genes']:,} genes (float32) that `benchmarks/run.py` writes. Each case by each "
        "route in a fresh process on the threaded scheduler, called once, then again under "
        "`tracemalloc`: *traced peak* is the most memory numpy and Python held at once during "
        "the second call (what its copies cost; the opened store and compiled kernels are "
        "already there). *x* is that peak over the result's bytes (a `sparse.COO`'s coordinates "
        "and values), or for a reduction over the unfiltered reduction's traced peak by the same "
        "route. `lazy` is `xr.open_dataset(store, engine='sporadik')`, `chunks={}` the same "
        "with `chunks={}`; each result is the DataArray's `.compute()`, as a notebook calls it "
        "(a dask array's own `.compute()` deep-copies a one-block result).",
        "",
        "| case | route | s | traced peak MB | result MB | x |",
        "|---|---|---|---|---|---|",
    ]
    for (case, route), m in measured.items():
        label, against = CASES[case]
        if against is not None and (against, route) in measured:
            ratio = m["traced"] / measured[against, route]["traced"]
            versus = f"{ratio:.2f} of `{CASES[against][0]}`"
        elif against is None and case != "sum-cell":
            versus = f"{m['traced'] / max(m['result'], 1):.2f} of the result"
        else:
            versus = ""
        lines.append(
            f"| {label} | {route} | {m['seconds']:.2f} | {m['traced'] / 1e6:.1f} | "
            f"{m['result'] / 1e6:.1f} | {versus} |"
        )
    if args.no_publish:
        print("\n".join([*lines, END]))
    else:
        publish(args.output, BEGIN, END, lines)


if __name__ == "__main__":
    main()
