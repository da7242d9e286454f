"""The scaling benchmark's write on a ``LocalCluster`` with the pieces its count pass read kept
as files, persisted on the workers, or not kept (the input read again), side by side in one run.

    .venv/bin/python benchmarks/keep_pieces.py [--rounds 2] [--workers 2] [--cells 50000]
        [--memory-limit 2GB]

``sporadik.keep-pieces: workers`` is what a cluster of other hosts takes; here its workers run
on this host, so the three ways meet the same machine. Each write is one ``scaling.py --child``
process (a fresh cluster, a warm-up write first, the input generated lazily where the tasks
run), its way set by the environment: ``DASK_SPORADIK__KEEP_PIECES`` (``files``, ``workers``),
or ``DASK_SPORADIK__SPILL_BYTES=-1`` (nothing kept); since ``-1`` also keeps every shuffle part
in memory, the other two ways are given a ``sporadik.spill-bytes`` no write reaches, and the
three differ in where the pieces are kept alone. The ways take turns within a round, the order
turned every round. Prints each write, then the median of each way: wall time, CPU seconds of
the client and its workers, the planning pass (the count pass, which reads the input), and the
largest process.
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

from scaling import fresh_work

ROOT = Path(__file__).resolve().parents[1]
SCALING = Path(__file__).resolve().parent / "scaling.py"
#: No shuffle part spills in any way: ``-1``, which also keeps no piece, as a budget.
NEVER = str(2**50)
#: Each way, by the environment that chooses it.
WAYS = {
    "files": {"DASK_SPORADIK__KEEP_PIECES": "files", "DASK_SPORADIK__SPILL_BYTES": NEVER},
    "persisted on workers": {
        "DASK_SPORADIK__KEEP_PIECES": "workers",
        "DASK_SPORADIK__SPILL_BYTES": NEVER,
    },
    "not kept (read twice)": {"DASK_SPORADIK__SPILL_BYTES": "-1"},
}


def _write(
    way: dict[str, str], workers: int, work: Path, cells: int, memory_limit: str
) -> dict[str, Any]:
    """One write by ``scaling.py``'s child on ``workers`` workers of ``memory_limit`` each, in
    the environment ``way``."""
    env = {**os.environ, **way, "PYTHONPATH": str(ROOT)}
    child = subprocess.run(
        [sys.executable, str(SCALING), "--child", "1", str(workers), "0",
         "--work", str(work), "--cells", str(cells), "--memory-limit", memory_limit],
        capture_output=True, text=True, check=False, env=env, cwd=work,
    )  # fmt: skip
    if child.returncode != 0:
        print(child.stderr[-2000:], file=sys.stderr)
        raise SystemExit(f"the write with {way} on {workers} workers failed")
    result: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cells", type=int, default=50_000)
    parser.add_argument("--memory-limit", default="2GB", help="each worker's")
    parser.add_argument(
        "--work", type=Path, default=Path(tempfile.gettempdir()) / "sporadik-keep-pieces"
    )
    args = parser.parse_args()
    work = fresh_work(args.work)
    rows: list[dict[str, Any]] = []
    try:
        for round_ in range(args.rounds):
            order = list(WAYS.items())
            for name, way in order if round_ % 2 == 0 else order[::-1]:
                found = _write(way, args.workers, work, args.cells, args.memory_limit)
                result = {**found, "way": name}
                print(
                    f"round {round_} {name:>22} {result['seconds']:6.1f} s  "
                    f"cpu {result['cpu']:6.1f} s  planning {result['planning']:5.1f} s  "
                    f"largest {result['worker_gib']:.2f} GiB",
                    flush=True,
                )
                rows.append(result)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"\n| pieces ({args.workers} workers of {args.memory_limit}, {rows[0]['nnz']:,} values) "
        "| write (median) "
        "| CPU s | planning | generating alone | largest process |"
    )
    print("|---|---|---|---|---|---|")
    for name in WAYS:
        runs = [r for r in rows if r["way"] == name]
        print(
            f"| {name} | {statistics.median(r['seconds'] for r in runs):.1f} s | "
            f"{statistics.median(r['cpu'] for r in runs):.1f} | "
            f"{statistics.median(r['planning'] for r in runs):.1f} s | "
            f"{statistics.median(r['generating'] for r in runs):.1f} s | "
            f"{statistics.median(r['worker_gib'] for r in runs):.2f} GiB |"
        )


if __name__ == "__main__":
    main()
