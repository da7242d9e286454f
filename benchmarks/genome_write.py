"""Writes of genome-length axes: both layouts of the same values in 100 x L stores for
L = 3.1e7, 3.1e8, 3.1e9, by two revisions of the package side by side, each write in a fresh
process: time, CPU time (what a machine shared with other work measures best) and peak RSS
(the client's, and on a cluster the largest worker's).

    .venv/bin/python benchmarks/genome_write.py --before /tmp/before
    .venv/bin/python benchmarks/genome_write.py --input blocks columns --lengths 3.1e7 3.1e9

``--before`` is a directory holding an older ``sporadik_dask`` (``git archive REV
sporadik_dask | tar -x -C DIR``); the checkout this script sits in is "after" (without it, only
this checkout writes). The values are those of ``benchmarks/long_axes.py`` (every position below
3.1e7), so only the axis's length differs. ``--input`` says what the write is given, one row
each: ``coo`` an in-memory ``sparse.COO`` (the default), ``blocks`` a dask array of
``sparse.COO`` blocks of :data:`BLOCK_SAMPLES` samples, ``columns`` coordinate columns ``(data,
(sample, position))`` in a shuffled order, as a BED-like table arrives, in dask chunks of
:data:`COLUMN_CHUNK` entries. Each child then reads the row layout back (and the position
layout at 3.1e7) and reports whether it holds exactly the values given; ``--traced`` adds the
peak ``tracemalloc`` sees over the write (a section of its own: tracing slows it).
``--workers 2`` writes on a 2-worker ``LocalCluster`` (one thread each) instead of two threads.
Results replace this script's section (one per worker count and inputs) of
``docs/benchmarks.md``.
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
INPUTS = ("coo", "blocks", "columns")
#: Samples in one dask block of the ``blocks`` input: ten blocks of ~1.1 M values.
BLOCK_SAMPLES = 10
#: Entries in one dask chunk of the ``columns`` input: eight chunks.
COLUMN_CHUNK = 1_500_000
#: The longest axis whose position layout the check reads back (its ``indptr`` is read whole).
CHECKED_POSITIONS = 31_000_000


def given(kind: str, length: int) -> tuple[Any, dict[str, Any]]:
    """The values of ``long_axes.values()`` as input ``kind``, and what ``to_sporadik`` needs
    beside them."""
    import dask.array as da
    import numpy as np
    import sparse

    row, col, data = values()
    if kind == "columns":  # a table's order: not by cell
        order = np.random.default_rng(5).permutation(data.size)
        columns = [da.from_array(a[order], chunks=COLUMN_CHUNK) for a in (data, row, col)]
        return (columns[0], tuple(columns[1:])), {"shape": (SAMPLES, length)}
    x = sparse.COO(np.stack([row, col]), data, shape=(SAMPLES, length))
    if kind == "coo":
        return x, {}
    blocks = [
        da.from_array(
            x[start : start + BLOCK_SAMPLES],
            chunks=(BLOCK_SAMPLES, length),
            asarray=False,
            name=f"samples-{start}-{length}",
        )
        for start in range(0, SAMPLES, BLOCK_SAMPLES)
    ]
    return da.concatenate(blocks), {}


def holds_values(target: str, length: int) -> bool:
    """Whether the store's row layout (and at most :data:`CHECKED_POSITIONS` its position
    layout) reads back as exactly the values given."""
    import numpy as np

    import sporadik_dask as sd

    row, col, data = values()  # in C order, each cell once
    for axis in (0, 1) if length <= CHECKED_POSITIONS else (0,):
        read = sd.from_sporadik(target, axis=axis).compute()
        if read.shape != (SAMPLES, length) or read.dtype != data.dtype:
            return False
        coords = np.asarray(read.coords)
        order = np.lexsort((coords[1], coords[0]))  # C order, whichever layout read
        found = (coords[0][order], coords[1][order], np.asarray(read.data)[order])
        if not all(np.array_equal(a, b) for a, b in zip(found, (row, col, data), strict=True)):
            return False
    return True


def run_write(
    target: str, length: int, workers: int, kind: str, traced: bool = False
) -> dict[str, Any]:
    """One write of input ``kind`` in this process: seconds, and the peak RSS of this process
    and of the largest worker, in MB (with ``traced``, also the peak ``tracemalloc`` sees in
    this process over the write alone, in MiB); then whether the store holds the values given."""
    import tracemalloc

    import dask

    import sporadik_dask as sd

    x, options = given(kind, length)
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
    if traced:
        tracemalloc.start()
    start = time.perf_counter()
    try:
        description = sd.to_sporadik(x, target, overwrite=True, **options)
    except Exception as refused:  # an older revision refusing the length
        return {"failed": f"refused: {type(refused).__name__}"}
    seconds = time.perf_counter() - start
    cpu = _cpu() + (sum(client.run(_cpu).values()) if client is not None else 0) - cpu
    result = {"seconds": seconds, "cpu": cpu, "nnz": description.nnz, "peak_mb": _peak_mb()}
    if traced:
        result["traced_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    if client is not None:
        result["worker_mb"] = max(client.run(_peak_mb).values())
        client.close()
        cluster.close()
    else:
        dask.config.set(scheduler="threads")
    result["same"] = holds_values(target, length)
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


def measure(
    package: Path,
    target: Path,
    length: int,
    workers: int,
    kind: str,
    timeout: float,
    traced: bool = False,
) -> Any:
    command = [sys.executable, __file__, "--child", str(target), str(length), str(workers), kind]
    command += ["traced"] if traced else []
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
    if "traced_mib" in result:
        peak += f", traced {result['traced_mib']:,.0f} MiB"
    per_value = result["cpu"] / result["nnz"] * 1e9
    wrong = "" if result.get("same", True) else ", VALUES DIFFER"
    return (
        f"{result['seconds']:.1f} s, CPU {result['cpu']:.1f} s ({per_value:,.0f} ns/value), "
        f"{peak}{wrong}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path)
    parser.add_argument("--before-label", default="main")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "genome-write")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--input", nargs="+", choices=INPUTS, default=["coo"])
    parser.add_argument("--lengths", nargs="+", type=float, default=LENGTHS)
    parser.add_argument("--traced", action="store_true", help="also tracemalloc's peak")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    lengths = [int(length) for length in args.lengths]
    where = f"a {args.workers}-worker LocalCluster" if args.workers else "two threads"
    tag = f"genome-write-{args.workers}"
    command = "python benchmarks/genome_write.py" + (" --before DIR" if args.before else "")
    if args.input != ["coo"]:
        tag += "-" + "-".join(args.input)
        where += ", from " + ", ".join(args.input)
        command += " --input " + " ".join(args.input)
    if lengths != list(LENGTHS):
        command += " --lengths " + " ".join(f"{length:.1e}" for length in lengths)
    command += f" --workers {args.workers}"
    if args.traced:  # tracemalloc slows the write: its own section
        tag += "-traced"
        where += ", traced"
        command += " --traced"
    revisions = [(args.before_label, args.before)] if args.before else []
    revisions.append(("this revision", ROOT))
    lines = [
        f"<!-- {tag}: made by benchmarks/genome_write.py -->",
        f"## Writing genome-length axes on {where}",
        "",
        f"{date.today()}, `{command}`"
        + (f" (DIR: `git archive {args.before_label} sporadik_dask`)" if args.before else "")
        + ": both layouts of 100 samples x L "
        f"positions, {values()[2].size:,} int32 values (all below 3.1e7), each write in a fresh "
        "process: seconds, CPU seconds (user and system, of the process"
        + (" and its workers" if args.workers else "")
        + "; and per value) and peak RSS of the process"
        + (" and of the largest worker" if args.workers else "")
        + ("; and the peak `tracemalloc` sees in the process over the write" if args.traced else "")
        + ".",
        "",
        "| revision | " + " | ".join(f"L = {length:.1e}" for length in lengths) + " |",
        "|---|" + "---|" * len(lengths),
    ]
    rows = {(label, kind): [] for label, _ in revisions for kind in args.input}
    for length in lengths:  # every row's write of one length side by side in time
        for label, package in revisions:
            for kind in args.input:
                target = args.work / f"w-{length}.zarr"
                found = measure(
                    package, target, length, args.workers, kind, args.timeout, args.traced
                )
                rows[label, kind].append(found)
                print(label, kind, length, found, flush=True)
    for (label, kind), found in rows.items():
        name = label if args.input == ["coo"] else f"{label}, {kind}"
        lines.append(f"| {name} | " + " | ".join(map(cell, found)) + " |")
    publish(ROOT / "docs" / "benchmarks.md", lines[0], f"<!-- /{tag} -->", lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        traced = sys.argv[6:] == ["traced"]
        found = run_write(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], traced)
        print(json.dumps(found))
    else:
        main()
