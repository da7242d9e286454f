"""Writes of genome-length axes: both layouts of the same values in 100 x L stores for
L = 3.1e7, 3.1e8, 3.1e9, by two revisions of the package side by side, each write in a fresh
process: time, CPU time (what a machine shared with other work measures best) and peak RSS
(the client's, and on a cluster the largest worker's).

    .venv/bin/python benchmarks/genome_write.py --before /tmp/before

``--before`` is a directory holding an older ``sporadik_dask`` (``git archive REV
sporadik_dask | tar -x -C DIR``); the checkout this script sits in is "after". The values are
those of ``benchmarks/long_axes.py`` (every position below 3.1e7), so only the axis's length
differs. ``--workers 2`` writes on a 2-worker ``LocalCluster`` (one thread each) instead of two
threads. Results replace this script's section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

from long_axes import LENGTHS, SAMPLES, values
from page import publish

ROOT = Path(__file__).resolve().parents[1]


def run_write(target: str, length: int, workers: int) -> dict[str, Any]:
    """One write in this process: seconds, and the peak RSS of this process and of the largest
    worker, in MB."""
    import dask
    import numpy as np
    import sparse

    import sporadik_dask as sd

    row, col, data = values()
    x = sparse.COO(np.stack([row, col]), data, shape=(SAMPLES, length))
    client = None
    if workers:
        from distributed import Client, LocalCluster

        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
        client = Client(cluster)
    else:
        dask.config.set(scheduler="threads", num_workers=2)
    cpu = _cpu() + (sum(client.run(_cpu).values()) if client is not None else 0)
    start = time.perf_counter()
    try:
        description = sd.to_sporadik(x, target, overwrite=True)
    except Exception as refused:  # an older revision refusing the length
        return {"failed": f"refused: {type(refused).__name__}"}
    seconds = time.perf_counter() - start
    cpu = _cpu() + (sum(client.run(_cpu).values()) if client is not None else 0) - cpu
    result = {"seconds": seconds, "cpu": cpu, "nnz": description.nnz, "peak_mb": _peak_mb()}
    if client is not None:
        result["worker_mb"] = max(client.run(_peak_mb).values())
        client.close()
        cluster.close()
    return result


def _peak_mb() -> float:
    """This process's peak RSS (``VmHWM``: ``ru_maxrss`` of a process started by exec keeps
    its parent's peak when larger), in MB."""
    status = Path("/proc/self/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM"))
    return int(line.split()[1]) / 1024


def _cpu() -> float:
    """Seconds of CPU (user and system) this process has used."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def measure(package: Path, target: Path, length: int, workers: int, timeout: float) -> Any:
    command = [sys.executable, __file__, "--child", str(target), str(length), str(workers)]
    env = {**os.environ, "PYTHONPATH": str(package)}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"failed": f"past {timeout:.0f} s"}
    finally:
        shutil.rmtree(target, ignore_errors=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["killed"])[-1]
        return {"failed": "out of memory" if "Memory" in last else last[:60]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def cell(result: dict[str, Any]) -> str:
    if "failed" in result:
        return str(result["failed"])
    peak = f"{result['peak_mb']:,.0f} MB"
    if "worker_mb" in result:
        peak += f", worker {result['worker_mb']:,.0f} MB"
    per_value = result["cpu"] / result["nnz"] * 1e9
    return (
        f"{result['seconds']:.1f} s, CPU {result['cpu']:.1f} s ({per_value:,.0f} ns/value), {peak}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--before-label", default="main")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "genome-write")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    where = f"a {args.workers}-worker LocalCluster" if args.workers else "two threads"
    tag = f"genome-write-{args.workers}"
    lines = [
        f"<!-- {tag}: made by benchmarks/genome_write.py -->",
        f"## Writing genome-length axes on {where} ({date.today()})",
        "",
        f"`python benchmarks/genome_write.py --before DIR --workers {args.workers}` (DIR: "
        f"`git archive {args.before_label} sporadik_dask`): both layouts of 100 samples x L "
        f"positions, {values()[2].size:,} int32 values (all below 3.1e7), each write in a fresh "
        "process: seconds, CPU seconds (user and system, of the process"
        + (" and its workers" if args.workers else "")
        + "; and per value) and peak RSS of the process"
        + (" and of the largest worker" if args.workers else "")
        + ".",
        "",
        "| revision | " + " | ".join(f"L = {length:.1e}" for length in LENGTHS) + " |",
        "|---|" + "---|" * len(LENGTHS),
    ]
    for label, package in ((args.before_label, args.before), ("this revision", ROOT)):
        found = []
        for length in LENGTHS:
            target = args.work / f"w-{length}.zarr"
            found.append(measure(package, target, length, args.workers, args.timeout))
            print(label, length, found[-1], flush=True)
        lines.append(f"| {label} | " + " | ".join(map(cell, found)) + " |")
    publish(ROOT / "docs" / "benchmarks.md", lines[0], f"<!-- /{tag} -->", lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(run_write(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
    else:
        main()
