"""A transcript table written from ``dd.read_parquet`` (dask's default partitions) on a cluster
of small workers, with the package at a git revision and at this tree, side by side.

    .venv/bin/python benchmarks/frames.py BASE [--rows N] [--cells N] [--memory 700MB] [--timeout S]
        [--split-row-groups]

Writes a Parquet table of ``--rows`` rows naming ``--cells`` cells (10x-like barcodes) and 2,000
genes by strings, then, for each side, one child process starts ``LocalCluster(n_workers=2,
threads_per_worker=1, memory_limit=--memory)``, and writes the counts per cell and gene with
``sd.to_sporadik(dd.read_parquet(table), path, columns=("cell", "gene"))``. ``BASE`` is checked
out into a git worktree of its own. Prints, per side: whether the write finished (or the error it
raised), its seconds, the largest worker's peak RSS (sampled every 50 ms) and the number of
partitions dask made; a side still running after ``--timeout`` seconds is killed, cluster and
all, and reported so.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: Genes the table names.
GENES = 2_000


def make_table(path: Path, rows: int, cells: int) -> None:
    """Rows of (cell, gene) strings, a million at a time, cells in order within each million."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    cell_names = np.array([f"AAACCTGAGAAACCAT-{i:07d}-sample" for i in range(cells)])
    gene_names = np.array([f"ENSG{j:011d}" for j in range(GENES)])
    schema = pa.schema([("cell", pa.string()), ("gene", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, 1_000_000):
            n = min(1_000_000, rows - start)
            cell = np.sort(rng.integers(0, cells, n))
            gene = rng.integers(0, GENES, n)
            table = pa.table({"cell": cell_names[cell], "gene": gene_names[gene]})
            writer.write_table(table, row_group_size=250_000)


def child(table: str, out: str, memory: str, split: str) -> None:
    """One write on a fresh cluster; prints a JSON line of what it measured."""
    import dask.dataframe as dd
    import psutil
    from distributed import Client, LocalCluster

    import sporadik_dask as sd

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, memory_limit=memory, dashboard_address=None
        ) as cluster,
        Client(cluster),
    ):
        pids = [worker.process.process.pid for worker in cluster.workers.values()]
        peak = dict.fromkeys(pids, 0)
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                for pid in list(peak):
                    with contextlib.suppress(psutil.NoSuchProcess):
                        peak[pid] = max(peak[pid], psutil.Process(pid).memory_info().rss)
                time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.perf_counter()
        try:
            frame = dd.read_parquet(table, split_row_groups=split == "row-groups")
            sd.to_sporadik(frame, out, columns=("cell", "gene"))
            outcome = "written"
        except Exception as error:  # the measurement is whether it fails, and how
            outcome = f"{type(error).__name__}: {str(error)[:120]}"
        seconds = time.perf_counter() - started
        done.set()
        sampler.join()
    print(
        json.dumps(
            {
                "outcome": outcome,
                "seconds": round(seconds, 1),
                "peak_worker_mib": round(max(peak.values()) / 2**20),
                "partitions": frame.npartitions,
            }
        )
    )


def run_side(
    tree: Path, table: Path, out: Path, memory: str, split: str, timeout: float
) -> dict[str, Any]:
    """One side's child process; past ``timeout`` seconds it and its cluster are killed."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, __file__, "--child", str(table), str(out), memory, split]
    process = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return {"outcome": f"not finished in {timeout:.0f} s (killed)"}
    lines = stdout.strip().splitlines()
    if process.returncode or not lines:
        return {"outcome": f"exit {process.returncode}: {stderr.strip()[-300:]}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", nargs="?")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--cells", type=int, default=200_000)
    parser.add_argument("--memory", default="700MB")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a side may take")
    parser.add_argument(
        "--split-row-groups",
        action="store_true",
        help="read_parquet(split_row_groups=True): one partition per row group (250,000 rows)",
    )
    parser.add_argument("--child", nargs=4, metavar=("TABLE", "OUT", "MEMORY", "SPLIT"))
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory() as work:
        where = Path(work)
        table = where / "table.parquet"
        make_table(table, args.rows, args.cells)
        sides = {"this tree": ROOT}
        if args.base:
            base = where / "base"
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.base],
                check=True,
                capture_output=True,
            )
            sides = {args.base: base, **sides}
        try:
            for name, tree in sides.items():
                out = where / f"{'tree' if tree == ROOT else 'base'}.zarr"
                split = "row-groups" if args.split_row_groups else "default"
                result = run_side(tree, table, out, args.memory, split, args.timeout)
                print(f"{name}: {json.dumps(result)}", flush=True)
        finally:
            if args.base:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where / "base")],
                    check=False,
                )


if __name__ == "__main__":
    main()
