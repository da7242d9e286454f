"""A whole-store reduction through a genome-length layout: per-sample sums of a 100 x L store
whose only layout makes the positions contiguous, so the pass reads every position's run.

    .venv/bin/python benchmarks/layout_pass.py [--length 30000000] [--before DIR] [--rounds 2]

Each round runs the pass in a fresh process per tree (this checkout, and ``--before``, a
directory holding another ``sporadik_dask``, e.g. a ``git worktree``), alternating: seconds and
tracemalloc's peak of the second call in the process (the first loads the kernels).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _store(path: Path, length: int) -> None:
    import numpy as np
    import sparse

    import sporadik_dask as sd

    rng = np.random.default_rng(0)
    n = 200_000
    coords = np.stack([rng.integers(0, 100, n), rng.integers(0, length, n)])
    x = sparse.COO(coords, rng.random(n).astype(np.float32) + 1, shape=(100, length))
    sd.to_sporadik(x, path, axes=(1,))


def _pass(path: Path) -> str:
    import tracemalloc

    import dask
    import xarray as xr

    dask.config.set(scheduler="sync")
    variable = next(iter(xr.open_dataset(path, engine="sporadik").data_vars.values()))
    dim = variable.dims[1]
    variable.sum(dim).compute()  # the kernels load
    tracemalloc.start()
    started = time.perf_counter()
    variable.sum(dim).compute()
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    return f"{seconds:.2f} s, traced {peak / 2**20:,.0f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=30_000_000)
    parser.add_argument("--before", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(_pass(args.child))
        return
    path = args.work / f"layout-pass-{args.length}.zarr"
    if not path.exists():
        _store(path, args.length)
    trees = [("this tree", ROOT), *([("before", args.before)] if args.before else [])]
    for round_ in range(args.rounds):
        for name, tree in trees if round_ % 2 == 0 else trees[::-1]:
            env = {**os.environ, "PYTHONPATH": str(tree)}
            done = subprocess.run(
                [sys.executable, __file__, "--child", str(path)],
                env=env, capture_output=True, text=True, check=True,
            )  # fmt: skip
            print(f"round {round_} {name:9s} {done.stdout.strip()}", flush=True)


if __name__ == "__main__":
    main()
