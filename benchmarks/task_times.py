"""Where a cluster write's time goes: task time by layer, and each worker's page faults.

One write of the scaling benchmark's 1x input (generated lazily on the workers) on a 2-worker
``LocalCluster``, after a small warm-up write: the task stream's compute and transfer time
summed by layer (the key's name without its token), and the minor page faults each worker
process took during the write. ``--keep-freed`` starts the workers without distributed's
``MALLOC_TRIM_THRESHOLD_``.

    .venv/bin/python benchmarks/task_times.py [--keep-freed] [--cells N]
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from scaling import CELLS, KEEP_FREED, WARM_CELLS

TOKEN = re.compile(r"-[0-9a-f]{32}")


def _layer(key: Any) -> str:
    name = key[0] if isinstance(key, tuple) else key
    return TOKEN.sub("", str(name))


def _faults() -> int:
    """This process's minor page faults so far (``/proc/self/stat``, field 10)."""
    with open("/proc/self/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[7])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=CELLS)
    parser.add_argument("--keep-freed", action="store_true")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sporadik-tasks")
    args = parser.parse_args()

    import dask
    from distributed import Client, LocalCluster, get_task_stream

    import sporadik_dask as sd
    from sporadik_dask.synthetic import counts_matrix

    if args.keep_freed:
        dask.config.set(KEEP_FREED)
    args.work.mkdir(parents=True, exist_ok=True)
    out = args.work / "write.zarr"
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            memory_limit="2GB",
            dashboard_address=None,
            local_directory=str(args.work / "spill"),
        ) as cluster,
        Client(cluster) as client,
    ):
        sd.to_sporadik(counts_matrix(cells=WARM_CELLS), args.work / "warm.zarr", overwrite=True)
        pending = sd.to_sporadik(
            counts_matrix(cells=args.cells), out, overwrite=True, compute=False
        )
        before = client.run(_faults)
        started = time.perf_counter()
        with get_task_stream(client) as stream:
            pending.compute()
        seconds = time.perf_counter() - started
        after = client.run(_faults)
    shutil.rmtree(args.work, ignore_errors=True)
    totals: dict[tuple[str, str], float] = collections.defaultdict(float)
    tasks: collections.Counter[str] = collections.Counter()
    for task in stream.data:
        layer = _layer(task["key"])
        tasks[layer] += 1
        for step in task["startstops"]:
            totals[layer, step["action"]] += step["stop"] - step["start"]
    kept = " (freed memory kept)" if args.keep_freed else ""
    print(f"write after the count pass{kept}: {seconds:.1f} s")
    print("page faults per worker:", ", ".join(f"{after[w] - before[w]:,}" for w in sorted(after)))
    for (layer, action), spent in sorted(totals.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {layer:36s} {action:9s} {spent:7.2f} s  {tasks[layer]:5d} tasks")


if __name__ == "__main__":
    main()
