"""Requests and bytes per read operation, counted where they reach an S3-protocol store.

    .venv/bin/python benchmarks/requests.py --cells 60000

A moto server runs on loopback behind a counting proxy (``sporadik_dask.testing``); the store is
written there once, through zarr's obstore store, and every reader reads it through the proxy:
ours (the xarray backend and ``from_sporadik``), plain zarr slicing the same three arrays as a
careful user would, and anndata's ``read_elem_lazy``. The reference ``sporadik`` opens local
paths only, so it has no place here. Results replace the section between this script's markers
in ``docs/benchmarks.md``, with the command that made them.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from page import replace_section
from peers import block_sums, plain_zarr

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- requests: made by benchmarks/requests.py -->"
END = "<!-- /requests -->"


def measure(cells: int, genes: int) -> list[tuple[str, str, int, int, float]]:
    import anndata
    import xarray as xr
    import zarr
    from anndata.experimental import read_elem_lazy

    import sporadik_dask as sd
    from sporadik_dask.synthetic import counts_matrix
    from sporadik_dask.testing import LoopbackS3, S3Proxy

    rows: list[tuple[str, str, int, int, float]] = []
    with LoopbackS3("sporadik-bench") as server, S3Proxy(server) as proxy:
        store = server.obstore("counts.zarr", proxy.endpoint)
        x = xr.DataArray(counts_matrix(cells=cells, genes=genes), dims=("cell", "gene"))
        with proxy.counting() as written:
            started = time.perf_counter()
            description = sd.to_sporadik(x.rename("counts"), store)
            seconds = time.perf_counter() - started
        rows.append(
            ("write both layouts", "ours", written.requests["PUT"], written.bytes_out, seconds)
        )
        print(f"wrote {description.nnz:,} values in {seconds:.1f} s", file=sys.stderr)

        rng = np.random.default_rng(7)
        one = int(rng.integers(0, genes))
        batch = np.sort(rng.choice(genes, 1000, replace=False))

        def run(operation: str, reader: str, call: Callable[[], Any]) -> None:
            if not reader.startswith("plain zarr"):  # nothing to compile; its batch is slow
                call()  # once to warm imports, caches and compiled kernels; counted the second time
            with proxy.counting() as counts:
                started = time.perf_counter()
                call()
                seconds = time.perf_counter() - started
            rows.append((operation, reader, counts.total, counts.bytes_in, seconds))
            print(f"{operation:<34} {reader:<28} {counts.total:>6} requests", file=sys.stderr)

        opened: dict[str, Any] = {}

        def ours_open() -> None:
            opened["ours"] = xr.open_dataset(store, engine="sporadik")["counts"]

        def zarr_open() -> None:
            opened["zarr"] = plain_zarr(zarr.open_group(store, mode="r"), 1)

        def anndata_open() -> None:
            group = zarr.open_group(store, mode="r")
            opened["anndata"] = read_elem_lazy(group["layouts/axis1"])

        run("open", "ours (xarray backend)", ours_open)
        run("open", "plain zarr", zarr_open)
        run("open", "anndata read_elem_lazy", anndata_open)
        run("one gene", "ours (xarray backend)", lambda: opened["ours"].isel(gene=one).data)
        run("one gene", "plain zarr", lambda: opened["zarr"]["one"](one))
        run("one gene", "anndata read_elem_lazy", lambda: opened["anndata"][:, one].compute())
        run(
            "1,000 random genes",
            "ours (xarray backend)",
            lambda: opened["ours"].isel(gene=batch).data,
        )
        run("1,000 random genes", "plain zarr", lambda: opened["zarr"]["batch"](batch))
        run(
            "1,000 random genes",
            "anndata read_elem_lazy",
            lambda: opened["anndata"][:, batch].compute(),
        )
        gcxs = sd.from_sporadik(store, axis=1, format="gcxs")
        run(
            "full scan (sum per gene)",
            "ours (from_sporadik, gcxs)",
            lambda: gcxs.sum(axis=0).compute(),
        )
        run(
            "full scan (sum per gene)",
            "plain zarr (three arrays)",
            lambda: opened["zarr"]["scan"](None),
        )
        run(
            "full scan (sum per gene)",
            "anndata read_elem_lazy",
            lambda: block_sums(opened["anndata"]),
        )
        del anndata
    return rows


def _section(args: argparse.Namespace, rows: list[tuple[str, str, int, int, float]]) -> str:
    nnz_note = f"{args.cells:,} cells x {args.genes:,} genes (`sporadik_dask.synthetic`, seed 0)"
    lines = [
        BEGIN,
        "## Requests per operation, counted at an S3-protocol store",
        "",
        f"Made by `.venv/bin/python benchmarks/requests.py --cells {args.cells} --genes "
        f"{args.genes}` on {date.today().isoformat()}: {nnz_note}, written once through zarr's "
        "obstore store to a moto server on loopback; every request passes a counting proxy. "
        "*Requests* are HTTP requests that reached the store (GET, HEAD, LIST; PUT for the write), "
        "*MiB* the bytes of their bodies. Each operation of ours and anndata runs once to warm up "
        "(compiled kernels, caches), then once counted and timed (wall time over loopback, so "
        "it mostly says how many round trips a reader makes).",
        "",
        "| operation | reader | requests | MiB | s |",
        "|---|---|---|---|---|",
    ]
    for operation, reader, requests, moved, seconds in rows:
        lines.append(
            f"| {operation} | {reader} | {requests:,} | {moved / 2**20:.1f} | {seconds:.2f} |"
        )
    lines += ["", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=60_000)
    parser.add_argument("--genes", type=int, default=20_000)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    section = _section(args, measure(args.cells, args.genes))
    replace_section(args.output, BEGIN, END, section)
    print(section)


if __name__ == "__main__":
    main()
