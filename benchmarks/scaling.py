"""Out-of-core scaling: write both layouts of 1x to 8x the benchmark data on a memory-limited
cluster, the input generated lazily inside the workers; at 1x, the same write on one worker and
on threads, side by side in the same run.

    .venv/bin/python benchmarks/scaling.py --factors 1 8 --memory-limit 2GB --repeats 3

``--repeats`` runs the smallest factor's three writes that many rounds, in turn, and compares
their medians: the machine's noise is larger than the differences measured.

Each write runs in a fresh process of its own (the cluster, or the threads, with it), after a
small warm-up write on the same workers, timed apart. Reported per write: wall time, CPU
seconds (of the process and its workers), the planning pass's share of the wall time (the count
per position, before any value moves), the largest worker's RSS (sampled every 50 ms; on
threads, the process's own), whether any worker was restarted (a worker past its memory limit
is), and the size of the graph the client sent to the scheduler. Writes ``docs/scaling.md`` and
``docs/scaling.png``; the text after the discussion marker of ``docs/scaling.md`` is kept across
runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from graph_size import serialized_bytes

ROOT = Path(__file__).resolve().parents[1]
DISCUSSION = "<!-- discussion: kept across runs -->"
#: Cells of the benchmark data at 1x (``benchmarks/run.py``'s full size).
CELLS = 300_000
#: Cells of the small write each run makes first, on the same workers: four blocks.
WARM_CELLS = 40_000
#: The config that starts workers without distributed's ``MALLOC_TRIM_THRESHOLD_``.
KEEP_FREED = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


def _watch(stop: threading.Event, peaks: dict[str, int], tree: bool) -> None:
    """Sample the largest child process's RSS (a worker), or this process's own, until ``stop``."""
    me = psutil.Process()
    while not stop.is_set():
        for process in me.children(recursive=True) if tree else [me]:
            with contextlib.suppress(psutil.Error):
                peaks["worker"] = max(peaks["worker"], process.memory_info().rss)
        time.sleep(0.05)


def _cpu_seconds(tree: bool) -> float:
    """CPU seconds (user and system) this process, and with ``tree`` its children (the
    workers), have spent so far: less sensitive than wall time to other work on the machine."""
    me = psutil.Process()
    total = 0.0
    for process in [me, *(me.children(recursive=True) if tree else [])]:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def run(
    factor: int,
    workers: int,
    memory_limit: str,
    work: Path,
    cells: int = CELLS,
    spill_at: float | None = None,
    keep_freed: bool = False,
) -> dict[str, Any]:
    """One write of ``factor`` x the data on ``workers`` cluster workers (0: on two threads).

    With ``keep_freed``, the workers start without distributed's ``MALLOC_TRIM_THRESHOLD_``,
    so glibc keeps memory a task frees for the next task instead of handing it back to the
    system, which each later allocation then pays for again in page faults."""
    import dask

    import sporadik_dask as sd
    import sporadik_dask.write.writer as write
    from sporadik_dask.synthetic import counts_matrix

    # a path of its own, deleted only when the run ends: see fresh_work
    out = work / f"scale-{factor}-{workers}-{os.getpid()}.zarr"
    x = counts_matrix(cells=cells * factor)
    planning: list[float] = []
    plan_source = write.plan_source

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return plan_source(*args, **kwargs)
        finally:
            planning.append(time.perf_counter() - started)

    write.plan_source = timed  # the count pass: one compute of its own, on the client
    peaks = {"worker": 0}
    stop = threading.Event()
    graph_bytes = None
    restarted = False
    with contextlib.ExitStack() as stack:
        if spill_at is not None:  # distributed's thresholds: spill past the first, then pause
            memory = "distributed.worker.memory"
            stack.enter_context(
                dask.config.set({f"{memory}.target": spill_at, f"{memory}.spill": spill_at + 0.1})
            )
        if keep_freed:
            stack.enter_context(dask.config.set(KEEP_FREED))
        if workers:
            from distributed import Client, LocalCluster

            cluster = stack.enter_context(
                LocalCluster(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    memory_limit=memory_limit,
                    dashboard_address=None,
                    local_directory=str(work / "spill"),
                )
            )
            client = stack.enter_context(Client(cluster))
            before = set(client.scheduler_info()["workers"])
        else:
            stack.enter_context(dask.config.set(scheduler="threads", num_workers=2))
        # a fresh worker (or process) imports and loads compiled kernels on its first tasks:
        # a small write first, timed apart, as a long-lived cluster pays that once
        warming = time.perf_counter()
        sd.to_sporadik(counts_matrix(cells=WARM_CELLS), work / f"warm-{os.getpid()}.zarr")
        warm_up = time.perf_counter() - warming
        planning.clear()
        os.sync()  # earlier writes' dirty pages go to disk now, not during this write
        # the count pass generates the input once: a pass that only generates it, timed apart,
        # says how much of planning is the input's own cost rather than counting
        generating = time.perf_counter()
        _generate(x)
        generating = time.perf_counter() - generating
        watcher = threading.Thread(target=_watch, args=(stop, peaks, bool(workers)), daemon=True)
        watcher.start()
        cpu = _cpu_seconds(bool(workers))
        started = time.perf_counter()
        pending = sd.to_sporadik(x, out, compute=False)  # the count pass runs here
        measuring = time.perf_counter()
        graph_bytes = serialized_bytes(pending.written())
        measured = time.perf_counter() - measuring  # not part of the write
        description = pending.compute()
        seconds = time.perf_counter() - started - measured
        cpu = _cpu_seconds(bool(workers)) - cpu
        stop.set()
        watcher.join()
        if workers:
            restarted = set(client.scheduler_info()["workers"]) != before
    assert isinstance(description, sd.StoreDescription)
    return {
        "factor": factor,
        "workers": workers,
        "nnz": description.nnz,
        "seconds": seconds,
        "cpu": cpu,
        "planning": sum(planning),
        "generating": generating,
        "worker_gib": peaks["worker"] / 2**30,
        "restarted": restarted,
        "graph_mib": graph_bytes / 2**20,
        "warm_up": warm_up,
        "keep_freed": keep_freed,
    }


def _nnz(block: Any) -> Any:
    import numpy as np

    return np.full((1, 1), block.nnz, dtype=np.int64)


def _generate(x: Any) -> int:
    """Generate every block of ``x`` where the write's tasks run, keeping only its count."""
    import numpy as np

    counts = x.map_blocks(_nnz, chunks=(1, 1), dtype=np.int64, meta=np.empty((0, 0), np.int64))
    return int(counts.sum().compute())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--factors", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--memory-limit", default="2GB")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sporadik-scale")
    parser.add_argument("--cells", type=int, default=CELLS, help="cells at 1x")
    parser.add_argument("--output", type=Path, default=ROOT / "docs")
    parser.add_argument(
        "--spill-at", type=float, help="distributed's memory target (spill threshold + 0.1)"
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="rounds of the smallest factor's writes side by side"
    )
    parser.add_argument(
        "--keep-freed",
        action="store_true",
        help="also write at the smallest factor on 2 workers started without distributed's "
        "MALLOC_TRIM_THRESHOLD_, in each round",
    )
    parser.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        factor, workers, keep_freed = args.child
        result = run(
            factor, workers, args.memory_limit, args.work, args.cells, args.spill_at,
            bool(keep_freed),
        )  # fmt: skip
        print(json.dumps(result))
        return
    # at the smallest factor: one worker, two, and threads, side by side
    first = min(args.factors)
    where = [(2, 0), *([(2, 1)] if args.keep_freed else []), (1, 0), (0, 0)]
    plans = [
        *((first, workers, kept, r) for r in range(args.repeats) for workers, kept in where),
        *((f, 2, 0, 0) for f in args.factors if f != first),
    ]
    base, args.work = args.work, fresh_work(args.work)
    results = []
    for factor, workers, kept, round_ in plans:
        child = subprocess.run(
            [sys.executable, __file__, "--child", str(factor), str(workers), str(kept),
             "--memory-limit", args.memory_limit, "--work", str(args.work),
             "--cells", str(args.cells),
             *(["--spill-at", str(args.spill_at)] if args.spill_at is not None else [])],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if child.returncode != 0:
            print(child.stderr[-2000:], file=sys.stderr)
            raise SystemExit(f"{factor}x on {workers} workers failed")
        result = {**json.loads(child.stdout.strip().splitlines()[-1]), "round": round_}
        print(result, flush=True)
        results.append(result)
    shutil.rmtree(base, ignore_errors=True)
    _report(args, results)


def fresh_work(base: Path) -> Path:
    """A new directory for this run's stores under ``base``, which is deleted only once every
    write has finished.

    On this machine, making a file costs from 50 to 550 us from one minute to the next, more
    often just after many were deleted, and a write's time also depends on what the writes
    before it left for the kernel to write back (``benchmarks/file_creation.py``,
    ``docs/benchmarks.md``). So no write here follows the deletion of another's ~11,000 chunk
    files, and each timed write starts after ``os.sync()``.
    """
    work = base / f"run-{os.getpid()}"
    work.mkdir(parents=True)
    return work


def _medians(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per factor and place: each measure's median over its rounds."""
    import statistics

    rows = []
    for key in dict.fromkeys(_key(r) for r in results):
        runs = [r for r in results if _key(r) == key]
        row = dict(runs[0])
        for name in ("seconds", "planning", "generating", "worker_gib", "graph_mib", "warm_up"):
            row[name] = statistics.median(r[name] for r in runs)
        row["restarted"] = any(r["restarted"] for r in runs)
        rows.append(row)
    return rows


def _key(r: dict[str, Any]) -> tuple[int, int, bool]:
    return r["factor"], r["workers"], r["keep_freed"]


def _round(r: dict[str, Any], repeats: int, first: int) -> str:
    return f", round {r['round'] + 1}" if repeats > 1 and r["factor"] == first else ""


def _where(r: dict[str, Any]) -> str:
    if not r["workers"]:
        return "threads"
    kept = ", freed memory kept" if r["keep_freed"] else ""
    return f"{r['workers']} worker{'s' if r['workers'] > 1 else ''}{kept}"


def _report(args: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    medians = _medians(results)
    scales = sorted(
        (r for r in medians if r["workers"] == 2 and not r["keep_freed"]), key=lambda r: r["nnz"]
    )
    nnz = [r["nnz"] for r in scales]
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(12, 3.5))
    per = [r["seconds"] / r["nnz"] * 1e7 for r in scales]
    left.semilogx(nnz, per, "o-", label="2 workers")
    left.axhline(per[0] * 1.15, ls=":", label="1.15x the smallest")
    left.set(xlabel="nonzeros", ylabel="s per 10 M values", title="write, both layouts")
    left.set_ylim(0, None)
    left.legend()
    middle.semilogx(nnz, [r["worker_gib"] for r in scales], "o-")
    middle.axhline(_bytes(args.memory_limit) / 2**30, ls=":", label="memory limit")
    middle.axhline(1.2, ls="--", color="g", label="1.2 GiB")
    middle.legend()
    middle.set(xlabel="nonzeros", ylabel="largest worker RSS (GiB)", title="memory")
    middle.set_ylim(0, None)
    side = [r for r in medians if r["factor"] == min(args.factors)]
    labels = [_where(r).replace(", freed memory kept", ",\nfreed kept") for r in side]
    right.bar(labels, [r["seconds"] for r in side])
    right.set(ylabel="wall time (s)", title=f"{min(args.factors)}x, the same cores")
    for ax in (left, middle):
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    fig.tight_layout()
    fig.savefig(args.output / "scaling.png", dpi=110)
    factors = " ".join(str(f) for f in args.factors)
    cells = f" --cells {args.cells}" if args.cells != CELLS else ""
    if args.spill_at is not None:
        cells += f" --spill-at {args.spill_at}"
    if args.keep_freed:
        cells += " --keep-freed"
    first = min(args.factors)
    by = {_key(r): r for r in medians}
    lead = by[(first, 2, False)]
    one, threads = by[(first, 1, False)], by[(first, 0, False)]
    rounds = [
        {
            (r["workers"], r["keep_freed"]): r["seconds"]
            for r in results
            if r["round"] == k and r["factor"] == first
        }
        for k in range(args.repeats)
    ]
    each = ""
    if args.repeats > 1:
        faster = ", ".join(f"{r[1, False] / r[2, False]:.2f}x" for r in rounds)
        slower = ", ".join(f"{r[2, False] / r[0, False]:.2f}x" for r in rounds)
        each = f" Round by round: {faster} as fast, and {slower} the time."
        if args.keep_freed:
            kept = ", ".join(f"{r[2, True] / r[0, False]:.2f}x" for r in rounds)
            each += f" With freed memory kept, the cluster took {kept} the time of threads."
        cells += f" --repeats {args.repeats}"
    lines = [
        "# Out-of-core scaling",
        "",
        f"Made by `.venv/bin/python benchmarks/scaling.py --factors {factors} "
        f"--memory-limit {args.memory_limit}{cells}` on {time.strftime('%Y-%m-%d')}, each "
        "write in a fresh process: a `LocalCluster` (one thread per worker, "
        f"{args.memory_limit} per worker, spilling to local disk), or two threads, the input "
        "generated lazily where the tasks run (`sporadik_dask.synthetic`, 10,000 cells per "
        "block, 20,000 genes), both layouts written, each store to a new path (deleted when "
        "the run ends) once earlier writes' dirty pages are flushed to disk "
        "([why](benchmarks.md#making-files-on-this-machine)). Time includes "
        "generating the input once: the count pass keeps each piece it reads on disk, and the "
        "write reads it from there; *planning* is the count pass, and "
        "*generating* a pass that only generates the input, timed apart on the same workers "
        "before the write (planning less generating is counting and keeping); *graph* is "
        "what the client sends the scheduler (`benchmarks/graph_size.py` measures it as "
        "distributed does); *restarted* says "
        "whether any worker was replaced during the write. Each write follows a small one "
        f"({WARM_CELLS:,} cells) on the same workers or process, timed apart as *warm-up*: "
        "a fresh worker imports the package and loads its compiled kernels on its first "
        "tasks, which a long-lived cluster pays once."
        + (
            " *Freed memory kept*: the workers start without the `MALLOC_TRIM_THRESHOLD_` "
            "distributed sets (`distributed.nanny.pre-spawn-environ`), so memory a task frees "
            "stays in the process for the next one."
            if args.keep_freed
            else ""
        ),
        "",
        "| factor | where | nonzeros | wall s | s per 10 M values | planning | generating | "
        "largest worker RSS GiB | restarted | graph MiB | warm-up s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {r['factor']}x | {_where(r)}{_round(r, args.repeats, first)} | {r['nnz']:,} | "
            f"{r['seconds']:.1f} | "
            f"{r['seconds'] / r['nnz'] * 1e7:.2f} | {r['planning'] / r['seconds']:.0%} | "
            f"{r['generating'] / r['seconds']:.0%} | "
            f"{r['worker_gib']:.2f} | {'yes' if r['restarted'] else 'no'} | "
            f"{r['graph_mib']:.3f} | {r['warm_up']:.1f} |"
            for r in results
        ),
        "",
        f"At {min(args.factors)}x, two workers wrote {one['seconds'] / lead['seconds']:.2f}x as "
        f"fast as one, and the 2-worker cluster took {lead['seconds'] / threads['seconds']:.2f}x "
        "the time of two threads on the same cores"
        + (f" (medians of {args.repeats} rounds, each its three writes in turn)." if each else ".")
        + each,
        "",
        "![time per value, largest worker and the same write by where it runs](scaling.png)",
        "",
    ]
    page = args.output / "scaling.md"
    kept = ""
    if page.exists() and DISCUSSION in page.read_text():
        kept = DISCUSSION + page.read_text().split(DISCUSSION, 1)[1]
    page.write_text("\n".join(lines) + ("\n" + kept if kept else ""))


def _bytes(text: str) -> int:
    from dask.utils import parse_bytes

    return int(parse_bytes(text))


if __name__ == "__main__":
    main()
