"""Side-by-side benchmarks of writing both layouts and of reading, in one run.

    .venv/bin/python benchmarks/run.py --size full --repeats 3

Each contender runs in a fresh process (so its memory is its own), on the same seeded input,
cached once as ``.npy`` files so that generating it is never timed. Wall time is measured inside
the process around the work alone; peak memory is the largest summed RSS of the process and its
children (cluster workers included), sampled every 20 ms. Results are written to
``docs/benchmarks.md`` with the command that made them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
SIZES = {
    "small": {"cells": 60_000, "genes": 20_000},
    "full": {"cells": 300_000, "genes": 20_000},
}
WRITERS = ["floor", "ours-threaded", "ours-cluster", "scipy", "reference"]
#: Everything after this line of the results page is hand-written and kept across runs.
DISCUSSION = "<!-- discussion: kept across runs -->"


# --------------------------------------------------------------------------------------------
# Work done inside a contender's own process


def _load(cache: Path) -> tuple[tuple[int, int], np.ndarray, np.ndarray, np.ndarray]:
    meta = json.loads((cache / "meta.json").read_text())
    rows, cols, data = (np.load(cache / f"{n}.npy") for n in ("rows", "cols", "data"))
    return (meta["cells"], meta["genes"]), rows, cols, data


def _dask_input(shape: tuple[int, int], rows: Any, cols: Any, data: Any) -> Any:
    """The input as the issue gives it: a dask array of sparse.COO blocks of 10,000 rows."""
    import dask.array as da
    import sparse

    from sporadik_dask.synthetic import ROWS_PER_CHUNK

    blocks = []
    for start in range(0, shape[0], ROWS_PER_CHUNK):
        stop = min(start + ROWS_PER_CHUNK, shape[0])
        lo, hi = np.searchsorted(rows, [start, stop])
        coords = np.stack([rows[lo:hi] - start, cols[lo:hi]]).astype(np.int64)
        block = sparse.COO(
            coords, data[lo:hi], shape=(stop - start, shape[1]), has_duplicates=False, sorted=True
        )
        blocks.append(da.from_array(block, chunks=block.shape, asarray=False))
    return da.concatenate(blocks, axis=0)


def _write(name: str, cache: Path, out: Path) -> float:
    shape, rows, cols, data = _load(cache)
    if name == "floor":
        import scipy.sparse as sp
        import sporadik
        import zarr

        coo = sp.coo_matrix((data, (rows, cols)), shape=shape)
        arrays = []
        for matrix in (coo.tocsr(), coo.tocsc()):
            arrays += [matrix.data, matrix.indices, matrix.indptr]
        group = zarr.open_group(out, mode="w")
        started = time.perf_counter()
        for i, array in enumerate(arrays):
            chunk = sporadik.chunk_for(array.dtype, len(array))
            group.create_array(f"a{i}", shape=array.shape, dtype=array.dtype, chunks=(chunk,))[
                :
            ] = array
        return time.perf_counter() - started
    if name.startswith("ours"):
        import sporadik_dask as sd

        x = _dask_input(shape, rows, cols, data)
        del rows, cols, data
        if name == "ours-cluster":
            from distributed import Client, LocalCluster

            with (
                LocalCluster(
                    n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
                ) as cluster,
                Client(cluster) as client,
            ):
                x = client.persist(x)
                from distributed import wait

                wait(x)
                started = time.perf_counter()
                sd.to_sporadik(x, out)
                return time.perf_counter() - started
        started = time.perf_counter()
        sd.to_sporadik(x, out)
        return time.perf_counter() - started
    if name == "scipy":
        import scipy.sparse as sp
        import sporadik

        started = time.perf_counter()
        coo = sp.coo_matrix((data, (rows, cols)), shape=shape)
        sporadik.write_store(out, [coo.tocsr(), coo.tocsc()])
        return time.perf_counter() - started
    if name == "reference":
        import sporadik

        started = time.perf_counter()
        sporadik.SparseArray.from_coords(shape, (rows, cols), data).write(out)
        return time.perf_counter() - started
    raise ValueError(name)


def _median_ms(calls: list[Any]) -> float:
    """Median wall time of the calls, after one more call of the first to warm caches and JITs."""
    calls[0]()
    times = []
    for call in calls:
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def _reads(store: Path) -> dict[str, float]:
    """Reads of one store, ours and the reference's, side by side in this one process."""
    import warnings
    from functools import partial

    import dask
    import sporadik
    import xarray as xr
    import zarr

    import sporadik_dask as sd

    rng = np.random.default_rng(1)
    ds = xr.open_dataset(store, engine="sporadik")
    counts = ds[next(iter(ds.data_vars))]

    def ours(dim: str, selection: Any) -> Any:
        return counts.isel({dim: selection}).data

    results: dict[str, float] = {}
    with sporadik.open_array(store) as reference:
        for axis, dim in enumerate(counts.dims):
            size = counts.shape[axis]
            ones = [int(i) for i in rng.integers(0, size, 50)]
            batches = [np.sort(rng.choice(size, 1000, replace=False)) for _ in range(3)]
            starts = [int(i) for i in rng.integers(0, size - 1000, 3)]
            cases = {
                "one position": (
                    [partial(ours, dim, i) for i in ones],
                    [partial(reference.slice_at, i, axis=axis) for i in ones],
                ),
                "1,000 random positions": (
                    [partial(ours, dim, b) for b in batches],
                    [partial(reference.slices_at, b, axis=axis) for b in batches],
                ),
                "1,000-position range": (
                    [partial(ours, dim, slice(a, a + 1000)) for a in starts],
                    [partial(reference.slices_over, a, a + 1000, axis=axis) for a in starts],
                ),
            }
            for case, (mine, theirs) in cases.items():
                results[f"{case}, axis {axis}: ours"] = _median_ms(mine)
                results[f"{case}, axis {axis}: reference"] = _median_ms(theirs)
    root = zarr.open_group(store, mode="r")
    for axis in range(counts.ndim):
        other = 1 - axis
        for format in ("coo", "gcxs"):
            x = sd.from_sporadik(store, axis=axis, format=format)
            with dask.config.set(scheduler="threads"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                total = partial(lambda x, other: x.sum(axis=other).compute(), x, other)
                label = f"sum along axis {other}, from_sporadik(axis={axis}, format={format!r})"
                results[f"{label}: ours"] = _median_ms([total] * 3)
        layout = root[f"layouts/axis{axis}"]
        decode = partial(lambda g: [g[n][:] for n in ("data", "indices", "indptr")], layout)
        results[f"decoding layout {axis}'s three arrays with zarr alone"] = _median_ms([decode] * 3)
    return results


# --------------------------------------------------------------------------------------------
# The driver


def _peak_rss(process: subprocess.Popen[bytes]) -> tuple[int, int]:
    """Poll the process tree until it exits: its largest summed RSS, and the largest RSS of any
    one child (a cluster worker), in bytes."""
    peak = worker = 0
    parent = psutil.Process(process.pid)
    while process.poll() is None:
        try:
            children = [p.memory_info().rss for p in parent.children(recursive=True)]
            peak = max(peak, parent.memory_info().rss + sum(children))
            worker = max(worker, *children, 0)
        except psutil.Error:
            pass
        time.sleep(0.02)
    return peak, worker


def _run_child(args: list[str]) -> tuple[dict[str, Any], tuple[int, int]]:
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(
            [sys.executable, __file__, *args], stdout=out, stderr=subprocess.DEVNULL
        )
        peak = _peak_rss(process)
        out.seek(0)
        text = out.read().decode()
    if process.returncode:
        raise RuntimeError(f"{args} failed with {process.returncode}: {text[-2000:]}")
    return json.loads(text.strip().splitlines()[-1]), peak


def _make_input(cache: Path, cells: int, genes: int) -> int:
    import dask

    from sporadik_dask.synthetic import counts_matrix

    if (cache / "meta.json").exists():
        return int(json.loads((cache / "meta.json").read_text())["nnz"])
    cache.mkdir(parents=True, exist_ok=True)
    blocks = dask.compute(*counts_matrix(cells=cells, genes=genes).to_delayed().ravel())
    from sporadik_dask.synthetic import ROWS_PER_CHUNK

    rows = np.concatenate([b.coords[0] + i * ROWS_PER_CHUNK for i, b in enumerate(blocks)])
    np.save(cache / "rows.npy", rows.astype(np.int64))
    np.save(cache / "cols.npy", np.concatenate([b.coords[1] for b in blocks]).astype(np.int64))
    np.save(cache / "data.npy", np.concatenate([b.data for b in blocks]))
    meta = {"cells": cells, "genes": genes, "nnz": int(rows.size)}
    (cache / "meta.json").write_text(json.dumps(meta))
    return int(rows.size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--writers", nargs="+", default=WRITERS, choices=WRITERS)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sporadik-bench")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, name, cache = args.child
        if kind == "write":
            out = Path(cache) / f"{name}.zarr"
            shutil.rmtree(out, ignore_errors=True)
            print(json.dumps({"seconds": _write(name, Path(cache), out)}))
        else:
            print(json.dumps(_reads(Path(name))))
        return

    size = SIZES[args.size]
    cache = args.work / args.size
    nnz = _make_input(cache, **size)
    writes: dict[str, list[tuple[float, int, int]]] = {name: [] for name in args.writers}
    for _ in range(args.repeats):  # interleaved, so drift on a noisy machine hits all alike
        for name in args.writers:
            result, (peak, worker) = _run_child(["--child", "write", name, str(cache)])
            writes[name].append((result["seconds"], peak, worker))
            print(f"{name}: {result['seconds']:.2f} s, {peak / 2**30:.2f} GiB", flush=True)
    store = cache / "ours-threaded.zarr"
    if not store.exists():
        _run_child(["--child", "write", "ours-threaded", str(cache)])
    reads, _ = _run_child(["--child", "read", str(store), str(cache)])
    _report(args, size, nnz, writes, reads)


def _report(
    args: argparse.Namespace,
    size: dict[str, int],
    nnz: int,
    writes: dict[str, list[tuple[float, int, int]]],
    reads: dict[str, float],
) -> None:
    floor = min(run[0] for run in writes["floor"]) if writes.get("floor") else None
    command = f".venv/bin/python benchmarks/run.py --size {args.size} --repeats {args.repeats}"
    lines = [
        "# Benchmarks",
        "",
        f"Made by `{command}` on {time.strftime('%Y-%m-%d')}, "
        f"{platform.machine()} with {os.cpu_count()} cores and "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}.",
        "",
        f"Input: {size['cells']:,} cells x {size['genes']:,} genes, {nnz:,} nonzeros "
        "(`sporadik_dask.synthetic`, seed 0, skewed genes), float32, in memory before timing.",
        "",
        "## Writing both layouts",
        "",
        "Each contender in its own process, interleaved across repeats; min / median wall time "
        "of the work alone; the largest summed RSS of the process tree (the input, held in "
        "memory, included; cluster workers included), and the largest RSS of any one worker. "
        "*Floor*: zarr writing the six already-sorted arrays, one thread.",
        "",
        "| writer | min s | median s | x floor (min) | peak RSS GiB | largest worker GiB |",
        "|---|---|---|---|---|---|",
    ]
    for name, runs in writes.items():
        seconds = [run[0] for run in runs]
        ratio = f"{min(seconds) / floor:.2f}" if floor else "-"
        worker = max(run[2] for run in runs)
        lines.append(
            f"| {name} | {min(seconds):.2f} | {statistics.median(seconds):.2f} | {ratio} | "
            f"{max(run[1] for run in runs) / 2**30:.2f} | "
            f"{f'{worker / 2**30:.2f}' if worker else '-'} |"
        )
    lines += [
        "",
        "## Reading (our store, written above)",
        "",
        "Ours through `xr.open_dataset(..., engine='sporadik')` and `.isel(...).data` (a "
        "`sparse.COO`), or `from_sporadik(...).sum(...)` for reductions; the reference through "
        "`open_array(...).slice_at` / `slices_at` / `slices_over`. Median milliseconds.",
        "",
        "| read | ms |",
        "|---|---|",
        *(f"| {name} | {ms:.1f} |" for name, ms in reads.items()),
        "",
    ]
    kept = ""
    if args.output.exists() and DISCUSSION in args.output.read_text():
        kept = DISCUSSION + args.output.read_text().split(DISCUSSION, 1)[1]
    args.output.write_text("\n".join(lines) + ("\n" + kept if kept else ""))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
