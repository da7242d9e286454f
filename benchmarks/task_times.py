"""Where a cluster write's time goes, beside the same write on threads: task time by layer.

One write of the scaling benchmark's 1x input (generated lazily where the tasks run) on a
2-worker ``LocalCluster``, after a small warm-up write, then the same write on two threads in
this process. For the cluster: the task stream's compute and transfer time summed by layer (the
key's name without its token), the minor page faults each worker process took, the CPU time
of each process (the scheduler runs in this process, beside the client) and of the workers'
threads by role (the threads that run tasks, the event loop that talks to the scheduler and to
the other worker, any other), and the bytes each layer's results moved between workers. For
threads: each layer's task time from a dask callback, and this process's page faults.
``--keep-freed`` starts the workers without distributed's ``MALLOC_TRIM_THRESHOLD_``;
``--persisted`` generates the input into memory (the workers', or this process's) before the
write, so the write's tasks are the package's alone.

    .venv/bin/python benchmarks/task_times.py [--keep-freed] [--persisted] [--cells N]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from scaling import CELLS, KEEP_FREED, WARM_CELLS, fresh_work

TOKEN = re.compile(r"-[0-9a-f]{32}")


def _layer(key: Any) -> str:
    name = key[0] if isinstance(key, tuple) else key
    return TOKEN.sub("", str(name))


def _faults() -> int:
    """This process's minor page faults so far (``/proc/self/stat``, field 10)."""
    with open("/proc/self/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[7])


def _cpu() -> dict[str, tuple[float, float]]:
    """User and system CPU seconds so far of this process and of each worker process it
    started."""
    import psutil

    here = psutil.Process()
    found = {"client and scheduler": tuple(here.cpu_times()[:2])}
    for child in here.children(recursive=True):
        try:
            if "resource_tracker" in " ".join(child.cmdline()):
                continue
            times = child.cpu_times()
        except psutil.Error:
            continue
        found[f"worker process {child.pid}"] = (times.user, times.system)
    return found


def _thread_cpu() -> dict[str, float]:
    """CPU seconds so far of this process's threads, by role: ``tasks`` (the threads that run
    tasks, named with ``Dask-Default-Threads`` by distributed), ``event loop`` (the main
    thread) and ``other``. Run on a worker by ``client.run``."""
    import threading

    found: dict[str, float] = collections.defaultdict(float)
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            spent = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except OSError:  # ended meanwhile
            continue
        if "Dask-Default-Threads" in thread.name:
            role = "tasks"
        elif thread is threading.main_thread():
            role = "event loop"
        else:
            role = "other"
        found[role] += spent
    return dict(found)


def _moved(dask_worker: Any) -> dict[str, int]:
    """Bytes this worker received from the other, by layer. Run on a worker by ``client.run``."""
    found: dict[str, int] = collections.defaultdict(int)
    for transfer in dask_worker.transfer_incoming_log:
        for key, nbytes in transfer["keys"].items():
            found[_layer(key)] += nbytes
    return dict(found)


def _print_layers(totals: dict[tuple[str, str], float], tasks: collections.Counter[str]) -> None:
    for (layer, action), spent in sorted(totals.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {layer:36s} {action:9s} {spent:7.2f} s  {tasks[layer]:5d} tasks")


def _input(args: argparse.Namespace) -> Any:
    """The write's input: lazy, or generated into memory where the tasks run (on a cluster,
    :func:`distributed.wait` for it before timing)."""
    from sporadik_dask.synthetic import counts_matrix

    x = counts_matrix(cells=args.cells)
    return x.persist() if args.persisted else x


def _on_cluster(args: argparse.Namespace) -> None:
    import dask
    from distributed import Client, LocalCluster, get_task_stream, wait

    import sporadik_dask as sd
    from sporadik_dask.synthetic import counts_matrix

    with dask.config.set(KEEP_FREED if args.keep_freed else {}):
        cluster = LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            memory_limit="2GB",
            dashboard_address=None,
            local_directory=str(args.work / "spill"),
        )
    with cluster, Client(cluster) as client:
        sd.to_sporadik(counts_matrix(cells=WARM_CELLS), args.work / "warm-cluster.zarr")
        x = _input(args)
        if args.persisted:
            wait(x)
        pending = sd.to_sporadik(x, args.work / "write-cluster.zarr", compute=False)
        os.sync()  # earlier writes' dirty pages go to disk now, not during this write
        before, cpu, threads = client.run(_faults), _cpu(), client.run(_thread_cpu)
        moved_before = client.run(_moved)
        started = time.perf_counter()
        with get_task_stream(client) as stream:
            pending.compute()
        seconds = time.perf_counter() - started
        after, spent, threads_after = client.run(_faults), _cpu(), client.run(_thread_cpu)
        moved_after = client.run(_moved)
    totals: dict[tuple[str, str], float] = collections.defaultdict(float)
    tasks: collections.Counter[str] = collections.Counter()
    for task in stream.data:
        layer = _layer(task["key"])
        tasks[layer] += 1
        for step in task["startstops"]:
            totals[layer, step["action"]] += step["stop"] - step["start"]
    kept = " (freed memory kept)" if args.keep_freed else ""
    kept += ", input persisted" if args.persisted else ""
    print(f"2 workers{kept}: write after the count pass {seconds:.1f} s")
    faults = ", ".join(f"{after[worker] - before[worker]:,}" for worker in sorted(after))
    print(f"  page faults per worker: {faults}")
    print(f"  CPU seconds, user + system ({2 * seconds:.1f} on 2 cores):")
    for role in sorted(spent):
        if role in cpu:
            user, system = (spent[role][i] - cpu[role][i] for i in range(2))
            print(f"    {role:34s} {user:7.2f} + {system:5.2f} s")
    print("  CPU seconds of the workers' threads, by role:")
    for role in ("tasks", "event loop", "other"):
        used = sum(
            threads_after[w].get(role, 0.0) - threads[w].get(role, 0.0) for w in threads_after
        )
        print(f"    {role:34s} {used:7.2f} s")
    moved: collections.Counter[str] = collections.Counter()
    for worker, layers in moved_after.items():
        for layer, nbytes in layers.items():
            moved[layer] += nbytes - moved_before[worker].get(layer, 0)
    print(f"  moved between workers: {sum(moved.values()) / 1e6:,.0f} MB")
    for layer, nbytes in moved.most_common(5):
        print(f"    {layer:34s} {nbytes / 1e6:7.1f} MB")
    _print_layers(totals, tasks)


class _Timer:
    """Each layer's task time on the local schedulers, from a dask callback."""

    def __init__(self) -> None:
        from dask.callbacks import Callback

        self.totals: dict[tuple[str, str], float] = collections.defaultdict(float)
        self.tasks: collections.Counter[str] = collections.Counter()
        self.started: dict[Any, float] = {}
        self.callback = Callback(pretask=self._pretask, posttask=self._posttask)

    def _pretask(self, key: Any, *args: Any) -> None:
        self.started[key] = time.perf_counter()

    def _posttask(self, key: Any, *args: Any) -> None:
        layer = _layer(key)
        self.tasks[layer] += 1
        self.totals[layer, "compute"] += time.perf_counter() - self.started.pop(key)


def _on_threads(args: argparse.Namespace) -> None:
    import dask

    import sporadik_dask as sd
    from sporadik_dask.synthetic import counts_matrix

    sd.to_sporadik(counts_matrix(cells=WARM_CELLS), args.work / "warm-threads.zarr")
    with dask.config.set(scheduler="threads", num_workers=2):
        x = _input(args)
    pending = sd.to_sporadik(x, args.work / "write-threads.zarr", compute=False)
    os.sync()
    timer, before, cpu = _Timer(), _faults(), os.times()
    started = time.perf_counter()
    with timer.callback:
        pending.compute(scheduler="threads", num_workers=2)
    seconds = time.perf_counter() - started
    held = ", input persisted" if args.persisted else ""
    print(f"2 threads{held}: write after the count pass {seconds:.1f} s")
    print(f"  page faults: {_faults() - before:,}")
    spent = os.times()
    user, system = spent.user - cpu.user, spent.system - cpu.system
    print(f"  CPU seconds, user + system ({2 * seconds:.1f} on 2 cores): {user:.2f} + {system:.2f}")
    _print_layers(timer.totals, timer.tasks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=CELLS)
    parser.add_argument("--keep-freed", action="store_true")
    parser.add_argument("--persisted", action="store_true")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sporadik-tasks")
    args = parser.parse_args()
    base, args.work = args.work, fresh_work(args.work)
    try:  # each write to a path of its own, deleted once both ran (fresh_work says why)
        _on_cluster(args)
        _on_threads(args)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
