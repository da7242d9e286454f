"""Out-of-core scaling: write both layouts of 1x, 2x, 4x the benchmark data on a memory-limited
2-worker cluster, the input generated lazily inside the workers.

    .venv/bin/python benchmarks/scaling.py --factors 1 2 4 --memory-limit 2GB

Writes ``docs/scaling.md`` and ``docs/scaling.png`` (time and largest worker RSS against nonzeros).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]


def _watch(stop: threading.Event, peaks: dict[str, int]) -> None:
    """Sample every child process's RSS (the workers) until ``stop`` is set."""
    me = psutil.Process()
    while not stop.is_set():
        for child in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                peaks["worker"] = max(peaks["worker"], child.memory_info().rss)
        time.sleep(0.05)


def run(factor: int, memory_limit: str, work: Path) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    import sporadik_dask as sd
    from sporadik_dask.synthetic import counts_matrix

    out = work / f"scale-{factor}.zarr"
    shutil.rmtree(out, ignore_errors=True)
    x = counts_matrix(cells=300_000 * factor)
    peaks = {"worker": 0}
    stop = threading.Event()
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            memory_limit=memory_limit,
            dashboard_address=None,
            local_directory=str(work / "spill"),
        ) as cluster,
        Client(cluster),
    ):
        watcher = threading.Thread(target=_watch, args=(stop, peaks), daemon=True)
        watcher.start()
        started = time.perf_counter()
        description = sd.to_sporadik(x, out)
        seconds = time.perf_counter() - started
        stop.set()
        watcher.join()
    assert isinstance(description, sd.StoreDescription)
    shutil.rmtree(out, ignore_errors=True)
    return {
        "factor": factor,
        "nnz": description.nnz,
        "seconds": seconds,
        "worker_gib": peaks["worker"] / 2**30,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--factors", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--memory-limit", default="2GB")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sporadik-scale")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    results = []
    for factor in args.factors:
        result = run(factor, args.memory_limit, args.work)
        print(result, flush=True)
        results.append(result)
    _report(args, results)


def _report(args: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nnz = [r["nnz"] for r in results]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    left.loglog(nnz, [r["seconds"] for r in results], "o-", label="measured")
    left.loglog(nnz, [results[0]["seconds"] * n / nnz[0] for n in nnz], ":", label="linear")
    left.set(xlabel="nonzeros", ylabel="wall time (s)", title="write, both layouts")
    left.legend()
    right.semilogx(nnz, [r["worker_gib"] for r in results], "o-")
    right.axhline(_bytes(args.memory_limit) / 2**30, ls=":", label="memory limit")
    right.legend()
    right.set(xlabel="nonzeros", ylabel="largest worker RSS (GiB)", title="memory", ylim=(0, None))
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / "scaling.png", dpi=110)
    factors = " ".join(str(f) for f in args.factors)
    lines = [
        "# Out-of-core scaling",
        "",
        f"Made by `.venv/bin/python benchmarks/scaling.py --factors {factors} "
        f"--memory-limit {args.memory_limit}` on {time.strftime('%Y-%m-%d')}: a 2-worker "
        f"`LocalCluster` (one thread each, {args.memory_limit} per worker, spilling to local "
        "disk), the input generated lazily inside the workers (`sporadik_dask.synthetic`, "
        "10,000 cells per block, 20,000 genes), both layouts written. Time includes generating "
        "the input twice (the count pass and the write each read it).",
        "",
        "| factor | nonzeros | wall s | s per 10 M values | largest worker RSS GiB |",
        "|---|---|---|---|---|",
        *(
            f"| {r['factor']}x | {r['nnz']:,} | {r['seconds']:.1f} | "
            f"{r['seconds'] / r['nnz'] * 1e7:.2f} | {r['worker_gib']:.2f} |"
            for r in results
        ),
        "",
        "![time and memory against nonzeros](scaling.png)",
        "",
    ]
    (ROOT / "docs" / "scaling.md").write_text("\n".join(lines))


def _bytes(text: str) -> int:
    from dask.utils import parse_bytes

    return int(parse_bytes(text))


if __name__ == "__main__":
    main()
