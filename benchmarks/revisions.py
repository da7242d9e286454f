"""The scaling benchmark's 1x write with the package at two git revisions, side by side in one
run: what a change to the write path costs, measured rather than guessed.

    .venv/bin/python benchmarks/revisions.py BASE [--rounds 3] [--workers 0 2] [--factors 1 8]

``BASE`` (a commit, tag or branch) is checked out into a git worktree of its own; the other side
is this working tree. Each write is one ``scaling.py --child`` process (its input generated
lazily where the tasks run, a warm-up write first, each store on a new path after
``os.sync()``), importing the package from one tree or the other; the two take turns within each
round, the order flipped every round, since this machine's noise is larger than many of the
differences measured. ``--workers``: 0 writes on two threads, N on an N-worker ``LocalCluster``.
``--factors``: the smallest is written in every place, each larger one on 2 workers, as
``scaling.py`` does. Prints each write, then the median of each side per place and factor: its
time, per 10 M values, the planning pass's share, and the largest process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from scaling import CELLS, fresh_work

ROOT = Path(__file__).resolve().parents[1]
SCALING = Path(__file__).resolve().parent / "scaling.py"


def _checkout(base: str, work: Path) -> Path:
    """A worktree of ``base`` under ``work``."""
    tree = work / f"tree-{base.replace('/', '-')}"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), base],
        check=True,
        capture_output=True,
    )
    return tree


def _write(tree: Path, workers: int, work: Path, cells: int, factor: int = 1) -> dict[str, Any]:
    """One write of ``factor`` x the data by ``scaling.py``'s child, importing the package from
    ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    child = subprocess.run(
        [sys.executable, str(SCALING), "--child", str(factor), str(workers), "0",
         "--work", str(work), "--cells", str(cells)],
        capture_output=True, text=True, check=False, env=env, cwd=work,
    )  # fmt: skip
    if child.returncode != 0:
        print(child.stderr[-2000:], file=sys.stderr)
        raise SystemExit(f"the write from {tree} on {workers} workers failed")
    result: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the revision to compare this working tree with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--cells", type=int, default=CELLS)
    parser.add_argument("--factors", type=int, nargs="+", default=[1])
    parser.add_argument(
        "--work", type=Path, default=Path(tempfile.gettempdir()) / "sporadik-revisions"
    )
    args = parser.parse_args()
    work = fresh_work(args.work)
    trees = {args.base: _checkout(args.base, work), "this tree": ROOT}
    rows: list[dict[str, Any]] = []
    first = min(args.factors)
    places = [(first, w) for w in args.workers] + [(f, 2) for f in args.factors if f != first]
    try:
        for round_ in range(args.rounds):
            for factor, workers in places:
                order = list(trees.items())
                for side, tree in order if round_ % 2 == 0 else order[::-1]:
                    found = _write(tree, workers, work, args.cells, factor)
                    result = {**found, "side": side}
                    print(
                        f"round {round_} {side:>12} {factor}x workers={workers} "
                        f"{result['seconds']:6.1f} s  cpu {result['cpu']:6.1f} s  "
                        f"planning {result['planning']:5.1f} s  "
                        f"largest {result['worker_gib']:.2f} GiB",
                        flush=True,
                    )
                    rows.append(result)
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees[args.base])],
            check=False,
        )
        shutil.rmtree(work, ignore_errors=True)
    print(
        "\n| place | factor | nonzeros | revision | write (median) | s per 10 M values "
        "| CPU s | planning | largest process |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for factor, workers in places:
        for side in trees:
            runs = [
                r
                for r in rows
                if r["workers"] == workers and r["factor"] == factor and r["side"] == side
            ]
            place = "2 threads" if workers == 0 else f"{workers} workers"
            seconds = statistics.median(r["seconds"] for r in runs)
            share = statistics.median(r["planning"] / r["seconds"] for r in runs)
            print(
                f"| {place} | {factor}x | {runs[0]['nnz']:,} | {side} | {seconds:.1f} s | "
                f"{seconds / runs[0]['nnz'] * 1e7:.2f} | "
                f"{statistics.median(r['cpu'] for r in runs):.1f} | {share:.0%} | "
                f"{statistics.median(r['worker_gib'] for r in runs):.2f} GiB |"
            )


if __name__ == "__main__":
    main()
