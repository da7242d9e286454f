"""Through an object store with latency: sharded and unsharded stores side by side, with anndata's
lazy route and plain zarr, at a cloud's round trip.

    .venv/bin/python benchmarks/object_store.py --cells 60000 --delay 0.02 --bandwidth 100e6

A moto server runs on loopback behind the counting proxy of ``sporadik_dask.testing``, which holds
every request for ``--delay`` seconds and moves each body at ``--bandwidth`` bytes per second, as
an S3 bucket in the reader's region would. The same matrix is written twice through zarr's
obstore store, once unsharded (one object per ~128 KB chunk) and once with ``--shard`` values per
object, and every reader reads both: ours (the xarray backend and ``from_sporadik``), anndata's
``read_elem_lazy`` on the layout that suits the operation, and plain zarr slicing the arrays as a
careful user would. The CLI's conversion of an h5ad file into ``s3://`` is timed the same way.
*Waves* are sequential rounds of requests the proxy saw (requests in flight together are one
wave): at a delay per request, waves times the delay is the least a reader waits. Results replace
the section between this script's markers in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from page import publish
from peers import block_sums, plain_zarr

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- object-store: made by benchmarks/object_store.py -->"
END = "<!-- /object-store -->"

Row = tuple[str, str, str, int, int, float]  # operation, store, reader, requests, waves, seconds


def _objects(written: Any) -> int:
    """Objects a write left: distinct keys PUT, a multipart upload's parts (``?partNumber=``)
    counted once with their object."""
    return len({path.partition("?")[0] for method, path in written.log if method == "PUT"})


def measure(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any]]:
    import xarray as xr
    import zarr
    from anndata.experimental import read_elem_lazy

    import sporadik_dask as sd
    from sporadik_dask.synthetic import counts_matrix
    from sporadik_dask.testing import Latency, LoopbackS3, S3Proxy

    latency = Latency(args.delay, args.bandwidth)
    rows: list[Row] = []
    meta: dict[str, Any] = {}
    kinds = {"unsharded": None, f"sharded ({args.shard:,})": args.shard}
    with LoopbackS3("sporadik-bench") as server, S3Proxy(server) as proxy:
        x = xr.DataArray(counts_matrix(cells=args.cells, genes=args.genes), dims=("cell", "gene"))
        stores = {}
        for kind, shard in kinds.items():
            stores[kind] = server.obstore(f"{kind.split()[0]}.zarr", proxy.endpoint)
            with proxy.slowed(latency), proxy.counting() as written:
                started = time.perf_counter()
                description = sd.to_sporadik(x.rename("counts"), stores[kind], shard=shard)
                seconds = time.perf_counter() - started
            objects = _objects(written)
            meta[kind] = {"objects": objects, "puts": written.requests["PUT"], "s": seconds}
            rows.append(("write both layouts", kind, "ours", written.total, written.waves, seconds))
            meta["nnz"] = description.nnz
            print(f"{kind}: {objects} objects, {seconds:.1f} s", file=sys.stderr)

        rng = np.random.default_rng(7)
        cell, gene = int(rng.integers(0, args.cells)), int(rng.integers(0, args.genes))
        batch = np.sort(rng.choice(args.genes, 1000, replace=False))
        first = int(rng.integers(0, args.genes - 1000))
        span = (first, first + 1000)
        window = slice(*span)

        def run(operation: str, kind: str, reader: str, call: Callable[[], Any]) -> None:
            if reader != "plain zarr":
                call()  # once to warm imports and compiled kernels (and our shard indexes)
            with proxy.slowed(latency), proxy.counting() as counts:
                started = time.perf_counter()
                call()
                seconds = time.perf_counter() - started
            rows.append((operation, kind, reader, counts.total, counts.waves, seconds))
            print(
                f"{operation:<26} {kind:<22} {reader:<24} {counts.total:>6} requests "
                f"{counts.waves:>4} waves {seconds:7.2f} s",
                file=sys.stderr,
            )

        for kind, store in stores.items():
            opened: dict[str, Any] = {}

            def ours_open(store: Any = store, opened: dict[str, Any] = opened) -> None:
                opened["ours"] = xr.open_dataset(store, engine="sporadik")["counts"]

            def anndata_open(store: Any = store, opened: dict[str, Any] = opened) -> None:
                group = zarr.open_group(store, mode="r")
                opened["anndata-cells"] = read_elem_lazy(group["layouts/axis0"])
                opened["anndata"] = read_elem_lazy(group["layouts/axis1"])

            def zarr_open(store: Any = store, opened: dict[str, Any] = opened) -> None:
                group = zarr.open_group(store, mode="r")
                opened["zarr-cells"] = plain_zarr(group, 0)
                opened["zarr"] = plain_zarr(group, 1)

            run("open", kind, "ours", ours_open)
            run("open", kind, "anndata read_elem_lazy", anndata_open)
            run("open", kind, "plain zarr", zarr_open)
            # a freshly opened reader whose shard indexes are not known yet
            with proxy.slowed(latency), proxy.counting() as cold:
                started = time.perf_counter()
                fresh = xr.open_dataset(store, engine="sporadik")["counts"]
                fresh.isel(gene=gene).data  # noqa: B018 - the read is the point
                seconds = time.perf_counter() - started
            rows.append(("open + one gene, cold", kind, "ours", cold.total, cold.waves, seconds))
            ours, lazy, lazy_cells = opened["ours"], opened["anndata"], opened["anndata-cells"]
            plain, plain_cells = opened["zarr"], opened["zarr-cells"]
            run("one cell", kind, "ours", lambda o=ours: o.isel(cell=cell).data)
            run("one cell", kind, "anndata read_elem_lazy", lambda a=lazy_cells: a[cell].compute())
            run("one cell", kind, "plain zarr", lambda z=plain_cells: z["one"](cell))
            run("one gene", kind, "ours", lambda o=ours: o.isel(gene=gene).data)
            run("one gene", kind, "anndata read_elem_lazy", lambda a=lazy: a[:, gene].compute())
            run("one gene", kind, "plain zarr", lambda z=plain: z["one"](gene))
            run("1,000 random genes", kind, "ours", lambda o=ours: o.isel(gene=batch).data)
            run(
                "1,000 random genes",
                kind,
                "anndata read_elem_lazy",
                lambda a=lazy: a[:, batch].compute(),
            )
            run("1,000-gene range", kind, "ours", lambda o=ours: o.isel(gene=window).data)
            run(
                "1,000-gene range",
                kind,
                "anndata read_elem_lazy",
                lambda a=lazy: a[:, window].compute(),
            )
            run("1,000-gene range", kind, "plain zarr", lambda z=plain: z["span"](span))
            gcxs = sd.from_sporadik(store, axis=1, format="gcxs")
            run("full scan (sum per gene)", kind, "ours", lambda g=gcxs: g.sum(axis=0).compute())
            run(
                "full scan (sum per gene)",
                kind,
                "anndata read_elem_lazy",
                lambda a=lazy: block_sums(a),
            )
            run("full scan (sum per gene)", kind, "plain zarr", lambda z=plain: z["scan"](None))
        meta["cli"] = _cli(args, server, proxy, x, latency, kinds)
    return rows, meta


def _cli(
    args: argparse.Namespace,
    server: Any,
    proxy: Any,
    x: Any,
    latency: Any,
    kinds: dict[str, int | None],
) -> dict[str, Any]:
    """The CLI converting an h5ad file into ``s3://``, through the slowed proxy."""
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "counts.h5ad"
        _h5ad(x, source)
        options = json.dumps(server.storage_options(proxy.endpoint))
        for kind, shard in kinds.items():
            url = f"s3://{server.bucket}/cli-{kind.split()[0]}.zarr"
            command = [sys.executable, "-m", "sporadik_dask.cli.main", "convert", str(source), url]
            command += ["--storage-options", options, "--quiet"]
            if shard:
                command += ["--shard", str(shard)]
            with proxy.slowed(latency), proxy.counting() as written:
                started = time.perf_counter()
                subprocess.run(command, check=True)
                seconds = time.perf_counter() - started
            objects = _objects(written)
            found[kind] = {"objects": objects, "requests": written.total, "s": seconds}
            print(f"cli {kind}: {objects} objects, {seconds:.1f} s", file=sys.stderr)
    return found


def _h5ad(x: Any, path: Path) -> None:
    import anndata

    anndata.AnnData(X=x.data.compute().tocsr()).write_h5ad(path)


def _lines(args: argparse.Namespace, rows: list[Row], meta: dict[str, Any]) -> list[str]:
    size = f"{args.cells:,} cells x {args.genes:,} genes, {meta['nnz']:,} values"
    bandwidth = f"{args.bandwidth / 1e6:.0f} MB/s" if args.bandwidth else "no cap"
    lines = [
        BEGIN,
        "## Through an object store with latency",
        "",
        f"Made by `.venv/bin/python benchmarks/object_store.py --cells {args.cells} --genes "
        f"{args.genes} --delay {args.delay} --bandwidth {args.bandwidth:g} --shard {args.shard}` "
        f"on {date.today().isoformat()}: {size} (`sporadik_dask.synthetic`, seed 0), written "
        "through zarr's obstore store to a moto server on loopback behind a proxy that holds "
        f"every request {args.delay * 1000:.0f} ms and moves each body at {bandwidth}. The same "
        f"matrix unsharded and with {args.shard:,} values per object. *Waves* are sequential "
        "rounds of requests (requests in flight together count once). Each read but plain zarr's "
        "runs once to warm up, then once counted; ours then knows the shard indexes it read, so "
        "*open + one gene, cold* is a reader's first read. anndata reads the CSR layout for a "
        "cell and the CSC one for genes; plain zarr slices `indptr`, then `indices` and `data`, "
        "one read after another (its 1,000 random genes, 1,000 sequential round trips at least, "
        "are not run). *Objects* are the distinct keys written; *PUTs* count every PUT request, "
        "the parts of a multipart upload (obstore sends a large shard in parts) each one, as S3 "
        "bills them.",
        "",
        "| store | objects | PUTs | write s | CLI h5ad → s3:// objects | CLI s |",
        "|---|---|---|---|---|---|",
    ]
    for kind in meta["cli"]:
        written, cli = meta[kind], meta["cli"][kind]
        lines.append(
            f"| {kind} | {written['objects']:,} | {written['puts']:,} | {written['s']:.1f} | "
            f"{cli['objects']:,} | {cli['s']:.1f} |"
        )
    lines += [
        "",
        "| operation | store | reader | requests | waves | s |",
        "|---|---|---|---|---|---|",
    ]
    for operation, kind, reader, requests, waves, seconds in rows:
        if operation.startswith("write"):
            continue
        lines.append(
            f"| {operation} | {kind} | {reader} | {requests:,} | {waves:,} | {seconds:.2f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=60_000)
    parser.add_argument("--genes", type=int, default=20_000)
    parser.add_argument("--delay", type=float, default=0.02, help="seconds per request")
    parser.add_argument("--bandwidth", type=float, default=100e6, help="bytes/s per request")
    parser.add_argument("--shard", type=int, default=2**24, help="values per shard object")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    rows, meta = measure(args)
    publish(args.output, BEGIN, END, _lines(args, rows, meta))


if __name__ == "__main__":
    main()
