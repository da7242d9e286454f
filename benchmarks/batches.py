"""Minibatches of cells for training: ours against annbatch, anndata's lazy reads and a
``from_sporadik`` route, side by side in one run, and ours through an object store with latency.

    .venv/bin/python benchmarks/batches.py --cells 100000 --genes 20000 \
        --annbatch-python /path/to/a/python3.12/venv/bin/python

Every reader runs in a process of its own, so its peak RSS is its own. Each reads batches of
``--batch-size`` random cells: one batch to warm up (imports, compiled kernels), then a whole
epoch timed from its start (``--slow-batches`` batches for the routes too slow for a whole
one). annbatch 0.3 (Python >= 3.12, so in its own environment) reads its own pre-shuffled
copy, built from the same matrix written as h5ad by its ``DatasetCollection.add_adatas``, whose
build time is reported apart. Results replace the section
between this script's markers in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

from page import publish

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- batches: made by benchmarks/batches.py -->"
END = "<!-- /batches -->"

#: Run by annbatch's Python: build its pre-shuffled collection from an h5ad file.
ANNBATCH_BUILD = """
import sys, time, zarr
from annbatch import DatasetCollection
started = time.perf_counter()
DatasetCollection(zarr.open_group(sys.argv[2], mode="w")).add_adatas([sys.argv[1]], shuffle=True)
print(time.perf_counter() - started)
"""

#: Run by annbatch's Python: batches of its loader over the collection, at its default buffer.
ANNBATCH_READ = """
import json, os, sys, time
from pathlib import Path
from annbatch import DatasetCollection, Loader
collection = DatasetCollection(sys.argv[1], mode="r")
loader = Loader(batch_size=int(sys.argv[2]), shuffle=True, preload_to_gpu=False)
loader.use_collection(collection)
for batch in loader:  # warm up, as ours do
    break
started, cells, first, cpu = time.perf_counter(), 0, None, os.times()
for batch in loader:
    first = time.perf_counter() - started if first is None else first
    cells += batch["X"].shape[0]
seconds = time.perf_counter() - started
cpu = sum(os.times()[:2]) - sum(cpu[:2])
status = Path("/proc/self/status").read_text().splitlines()
peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
print(json.dumps({"cells": cells, "s": seconds, "cpu": cpu, "first": first, "peak": peak}))
"""


def _timed(batches: Any, limit: int | None) -> dict[str, float]:
    """Cells per second over an epoch of ``batches`` (an iterable, each iteration an epoch),
    after a first batch of another to warm imports and compiled kernels; its first batch's
    seconds, its CPU seconds (user and system, every thread: what a machine shared with other
    work changes least), and this process's peak RSS. The warm-up batch is let go before the
    epoch, as a training loop lets each batch go (ours is a view of its window)."""
    warm = iter(batches)
    next(warm, None)
    del warm
    started, cells, first, cpu = time.perf_counter(), 0, 0.0, os.times()
    for count, batch in enumerate(batches):
        if count == 0:
            first = time.perf_counter() - started
        cells += batch.shape[0] if hasattr(batch, "shape") else batch.positions.size
        if limit is not None and count + 1 >= limit:
            break
    seconds = time.perf_counter() - started
    used = sum(os.times()[:2]) - sum(cpu[:2])
    return {"cells": cells, "s": seconds, "cpu": used, "first": first, "peak": _peak()}


def _peak() -> int:
    """This process's peak RSS in bytes: ``VmHWM``, which an exec resets (``ru_maxrss`` keeps
    the parent's, which holds the whole matrix)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _draws(batches: Any) -> float:
    """Independent draws a batch holds, on average over an epoch: the spans it mixes (its
    positions' distinct ``position // span``), which for a uniform shuffle is every position.
    Where neighbouring cells are alike (one sample, one cell type), a batch varies as much as
    that many cells drawn at random, not as its size."""
    import numpy as np

    if batches.shuffle == "uniform":
        return float(batches.batch_size)
    order = batches.plan(0).order // batches.span
    cuts = range(0, order.size, batches.batch_size)
    return float(np.mean([np.unique(order[at : at + batches.batch_size]).size for at in cuts]))


class _Epochs:
    """``read(sorted positions)`` for batch after batch of a uniform random permutation, a new
    one each iteration."""

    def __init__(self, size: int, batch_size: int, read: Any) -> None:
        self.size, self.batch_size, self.read, self.epoch = size, batch_size, read, 0

    def __iter__(self) -> Any:
        import numpy as np

        order = np.random.default_rng(self.epoch).permutation(self.size)
        self.epoch += 1
        for at in range(0, self.size, self.batch_size):
            yield self.read(np.sort(order[at : at + self.batch_size]))


def measure(args: argparse.Namespace) -> dict[str, float]:
    """One reader, in this process (``--measure NAME``)."""
    import sporadik_dask as sd

    store, size = args.store, args.cells
    if args.measure.startswith("ours"):
        _, shuffle, window, span = [*args.measure.split(":"), "", ""][:4]
        batches = sd.Minibatches(
            store,
            batch_size=args.batch_size,
            shuffle=shuffle,  # type: ignore[arg-type]
            seed=0,
            window=int(window) if window else None,
            span=int(span) if span else 64,
        )
        found = _timed(batches, args.slow_batches if window == "1" else None)
        return {**found, "draws": _draws(batches)}
    if args.measure == "from_sporadik":
        x = sd.from_sporadik(store, axis=0)
        read = _Epochs(size, args.batch_size, lambda p: x[p].compute())
        return _timed(read, args.slow_batches)
    if args.measure == "anndata":
        import zarr
        from anndata.experimental import read_elem_lazy

        lazy = read_elem_lazy(zarr.open_group(store, mode="r")["layouts/axis0"])
        read = _Epochs(size, args.batch_size, lambda p: lazy[p].compute())
        return _timed(read, args.slow_batches)
    raise SystemExit(f"unknown reader {args.measure!r}")


def measure_proxied(args: argparse.Namespace) -> dict[str, Any]:
    """Ours through a moto server behind the latency proxy, on a sharded store (in-process)."""
    import xarray as xr

    import sporadik_dask as sd
    from sporadik_dask.synthetic import counts_matrix
    from sporadik_dask.testing import Latency, LoopbackS3, S3Proxy

    found: dict[str, Any] = {}
    x = xr.DataArray(counts_matrix(cells=args.proxy_cells, genes=args.genes), dims=("cell", "gene"))
    with LoopbackS3("sporadik-bench") as server, S3Proxy(server) as proxy:
        store = server.obstore("sharded.zarr", proxy.endpoint)
        sd.to_sporadik(x.rename("counts"), store, shard=args.shard)
        for shuffle in ("uniform", "spans"):
            batches = sd.Minibatches(store, batch_size=args.batch_size, shuffle=shuffle, seed=0)
            with proxy.slowed(Latency(args.delay, args.bandwidth)), proxy.counting() as counts:
                found[shuffle] = _timed(batches, None)
            found[shuffle]["requests"] = counts.total
            found[shuffle]["waves"] = counts.waves
    return found


def _child(args: argparse.Namespace, name: str, store: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--measure", name, "--store", str(store)]
    command += ["--cells", str(args.cells), "--genes", str(args.genes)]
    command += ["--batch-size", str(args.batch_size), "--slow-batches", str(args.slow_batches)]
    command += ["--proxy-cells", str(args.proxy_cells), "--shard", str(args.shard)]
    command += ["--delay", str(args.delay), "--bandwidth", str(args.bandwidth)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{name}: {result}", file=sys.stderr)
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    import anndata
    import xarray as xr

    import sporadik_dask as sd
    from sporadik_dask.synthetic import counts_matrix

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as work:
        store = Path(work) / "counts.zarr"
        x = xr.DataArray(counts_matrix(cells=args.cells, genes=args.genes), dims=("cell", "gene"))
        results["nnz"] = sd.to_sporadik(x.rename("counts"), store).nnz
        readers = ["ours:uniform", "ours:spans", "ours:spans::512", "ours:uniform:109"]
        readers += ["ours:uniform:64"]
        readers += ["ours:uniform:1"]
        readers += ["from_sporadik", "anndata"]
        for name in readers:
            results[name] = _child(args, name, store)
        if args.annbatch_python:
            h5ad, collection = Path(work) / "counts.h5ad", Path(work) / "annbatch.zarr"
            anndata.AnnData(X=x.data.compute().tocsr()).write_h5ad(h5ad)
            built = subprocess.run(
                [args.annbatch_python, "-c", ANNBATCH_BUILD, str(h5ad), str(collection)],
                check=True,
                capture_output=True,
                text=True,
            )
            results["annbatch build s"] = float(built.stdout.strip().splitlines()[-1])
            read = subprocess.run(
                [args.annbatch_python, "-c", ANNBATCH_READ, str(collection), str(args.batch_size)],
                check=True,
                capture_output=True,
                text=True,
            )
            results["annbatch"] = json.loads(read.stdout.strip().splitlines()[-1])
            print(f"annbatch: {results['annbatch']}", file=sys.stderr)
        results["proxied"] = _child(args, "proxied", store)
    return results


def _lines(args: argparse.Namespace, results: dict[str, Any]) -> list[str]:
    def row(reader: str, route: str, found: dict[str, Any], extra: str = "") -> str:
        rate, per_cpu = found["cells"] / found["s"], found["cells"] / found["cpu"]
        draws = found.get("draws", args.batch_size)
        return (
            f"| {reader} | {route} | {rate:,.0f} | {per_cpu:,.0f} | {draws:,.0f} | "
            f"{found['first']:.2f} | {found['peak'] / 2**20:,.0f} | {extra} |"
        )

    def proxied(route: str, found: dict[str, Any]) -> str:
        rate, waves = found["cells"] / found["s"], f"{found['requests']:,}, {found['waves']:,}"
        return (
            f"| ours | {route} | {rate:,.0f} | {found['first']:.2f} | "
            f"{found['peak'] / 2**20:,.0f} | {waves} |"
        )

    command = (
        f"`.venv/bin/python benchmarks/batches.py --cells {args.cells} --genes {args.genes} "
        f"--batch-size {args.batch_size} --annbatch-python <Python 3.12 with annbatch 0.3.1>`"
    )
    lines = [
        BEGIN,
        "## Minibatches for training",
        "",
        f"Made by {command} on {date.today().isoformat()} (2 cores shared with other work): "
        f"{args.cells:,} cells x {args.genes:,} genes, {results['nnz']:,} values "
        "(`sporadik_dask.synthetic`, seed 0), our store as `to_sporadik` writes it for analysis "
        f"(both layouts, default chunks). Batches of {args.batch_size} cells; each reader in a "
        "process of its own, one batch to warm up, then an epoch timed whole (the slow routes "
        f"over {args.slow_batches} batches). *cells/CPU-s*: cells over the CPU seconds the "
        "process used meanwhile (all its threads), which other work on the machine changes "
        "less than the clock. *draws*: the independent draws a batch holds, on average: the "
        "spans it mixes, as many as its cells for a uniform shuffle (annbatch's copy is "
        "shuffled cell by cell when built), fewer when neighbours are read together. "
        "*first batch*: that epoch's wait for its first; *peak*: the process's peak RSS. "
        "*uniform*: an exactly uniform random permutation; *spans*: spans of 64 (or 512, "
        "annbatch's chunk) neighbouring cells in random order, mixed within a window of batches; "
        "*window 109*: 109 batches read together (8 Mi values at 300 a cell); *window 64*: "
        "16,384 cells, annbatch's default buffer (512-cell chunks, 32 preloaded); *window 1*: "
        f"each batch read alone (over {args.slow_batches} batches).",
        "",
        "| reader | route | cells/s | cells/CPU-s | draws | first batch s | peak MiB | notes |",
        "|---|---|---|---|---|---|---|---|",
        row("ours", "`sd.Minibatches`, uniform", results["ours:uniform"]),
        row("ours", "`sd.Minibatches`, spans", results["ours:spans"]),
        row("ours", "`sd.Minibatches`, spans of 512", results["ours:spans::512"]),
        row("ours", "`sd.Minibatches`, uniform, window 109", results["ours:uniform:109"]),
        row("ours", "`sd.Minibatches`, uniform, window 64", results["ours:uniform:64"]),
        row("ours", "`sd.Minibatches`, uniform, window 1", results["ours:uniform:1"]),
    ]
    if "annbatch" in results:
        build = results["annbatch build s"]
        lines.append(
            row(
                "annbatch 0.3.1",
                "`Loader` (default buffer) on its pre-shuffled copy",
                results["annbatch"],
                f"its copy took {build:.1f} s to build",
            )
        )
    lines += [
        row("ours", "`from_sporadik(store)[sorted batch].compute()`", results["from_sporadik"]),
        row("anndata", "`read_elem_lazy(...)[sorted batch].compute()`", results["anndata"]),
        "",
        f"Through the latency proxy ({args.delay * 1000:.0f} ms a request, "
        f"{args.bandwidth / 1e6:.0f} MB/s a body; requests and waves include the warm-up batch's), "
        f"a store of {args.proxy_cells:,} cells written "
        f"sharded ({args.shard:,} values per object) to a moto server on loopback:",
        "",
        "| reader | route | cells/s | first batch s | peak MiB | requests, waves |",
        "|---|---|---|---|---|---|",
    ]
    for shuffle in ("uniform", "spans"):
        lines.append(proxied(f"`sd.Minibatches`, {shuffle}", results["proxied"][shuffle]))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=100_000)
    parser.add_argument("--genes", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--slow-batches", type=int, default=40)
    parser.add_argument("--proxy-cells", type=int, default=30_000)
    parser.add_argument("--shard", type=int, default=1 << 20)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--bandwidth", type=float, default=100e6)
    parser.add_argument("--annbatch-python", default=None)
    parser.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--store", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-publish", action="store_true")
    args = parser.parse_args()
    if args.measure == "proxied":
        print(json.dumps(measure_proxied(args)))
        return
    if args.measure:
        print(json.dumps(measure(args)))
        return
    results = run(args)
    print(json.dumps(results), file=sys.stderr)
    if not args.no_publish:
        publish(ROOT / "docs" / "benchmarks.md", BEGIN, END, _lines(args, results))


if __name__ == "__main__":
    main()
