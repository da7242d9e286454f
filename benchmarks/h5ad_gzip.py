"""``convert`` of a gzip .h5ad, beside anndata's lazy read and anndata's read into memory.

    .venv/bin/python benchmarks/h5ad_gzip.py                   # 30 M values, 2 runs each
    .venv/bin/python benchmarks/h5ad_gzip.py --values 4000000 --no-publish   # quick

Generates, once, under ``--work``, an .h5ad like ``conversions.py``'s (float32 CSR over 20,000
genes, ~5 % dense) written by anndata with ``compression="gzip"``. Then runs, alternating, each in
a fresh process whose process tree's RSS is sampled every 50 ms and whose CPU time (user and
system, of the process and its children) is taken from the kernel when it exits:

- ``sporadik-dask convert``: X's blocks read by ``sporadik_dask.cli.h5ad`` (gzip chunks inflated
  outside h5py's lock, on dask's threads);
- *anndata lazy + to_sporadik*: what ``convert`` did before, X read by anndata's
  ``read_elem_lazy`` (h5py inflating every chunk under its lock) and written by ``to_sporadik``;
- *anndata in memory + to_sporadik*: ``anndata.read_h5ad``, then ``to_sporadik`` of the CSR
  matrix from memory: the yardstick ``convert`` is held to (within 1.5x).

Every route writes both layouts, default chunking, on the threaded scheduler. The objects
``convert`` wrote are counted and ``sporadik-dask validate`` is timed on its store. Results
replace the section between this script's markers in ``docs/benchmarks.md`` (``--output``).
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import shutil
import sys
import tempfile
from datetime import date
from pathlib import Path
from typing import Any

from conversions import H5AD_GENES, h5ad, measure
from page import publish

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- h5ad-gzip: made by benchmarks/h5ad_gzip.py -->"
END = "<!-- /h5ad-gzip -->"
ROUTES = {
    "convert": "sporadik-dask convert",
    "lazy": "anndata lazy + to_sporadik (convert before)",
    "memory": "anndata in memory + to_sporadik",
}


def gzip_h5ad(path: Path, values: int) -> None:
    """``conversions.h5ad``'s file, its arrays written with gzip (anndata's default level)."""
    import anndata

    write = anndata.AnnData.write_h5ad

    def gzip(self: Any, target: Any, **_: Any) -> None:
        write(self, target, compression="gzip")

    anndata.AnnData.write_h5ad = gzip  # type: ignore[method-assign]
    try:
        h5ad(path, values)
    finally:
        anndata.AnnData.write_h5ad = write  # type: ignore[method-assign]


def _child(route: str, source: str, output: str) -> None:
    """Write ``source`` to ``output`` by ``route`` (``lazy`` or ``memory``)."""
    import anndata
    import h5py
    import xarray as xr
    from anndata.experimental import read_elem_lazy

    from sporadik_dask import to_sporadik

    if route == "memory":  # scipy's matrix as it is (xarray takes no scipy matrix)
        to_sporadik(anndata.read_h5ad(source).X, output)
        return
    file = h5py.File(source, "r")
    names = {dim: anndata.io.read_elem(file[dim]).index.to_numpy(str) for dim in ("obs", "var")}
    x = xr.DataArray(read_elem_lazy(file["X"]), dims=("obs", "var"), coords=names, name="X")
    to_sporadik(x, output)


def timed(command: list[str]) -> dict[str, Any]:
    """:func:`conversions.measure` of ``command``, with the CPU seconds of its process tree and
    the load average (other processes on the machine) when it started."""
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    measured = measure(command)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {**measured, "cpu": cpu, "load": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=30_000_000, help="values of the .h5ad")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each, side by side")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sporadik-conv")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--no-publish", action="store_true", help="print, leave the docs alone")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return
    args.work.mkdir(parents=True, exist_ok=True)
    source = args.work / f"x-{args.values}-gzip.h5ad"
    if not source.exists():
        print(f"generating {source}", flush=True)
        gzip_h5ad(source, args.values)
    outputs = args.work / f"outputs-{os.getpid()}"
    made = (outputs / f"{n}.zarr" for n in itertools.count())
    rows: list[tuple[str, dict[str, Any]]] = []
    checks: list[dict[str, Any]] = []
    cli = [sys.executable, "-m", "sporadik_dask.cli.main"]
    for _ in range(args.repeat):
        for route in ROUTES:
            output = next(made)
            if route == "convert":
                command = [*cli, "convert", str(source), str(output), "--quiet"]
            else:
                command = [sys.executable, __file__, "--child", route, str(source), str(output)]
            measured = timed(command)
            if route == "convert":
                measured["objects"] = sum(len(files) for *_, files in os.walk(output))
                checks.append(timed([*cli, "validate", str(output), "--quiet"]))
            rows.append((route, measured))
            print(route, {k: v for k, v in measured.items() if k != "last"}, flush=True)
            shutil.rmtree(output, ignore_errors=True)
    shutil.rmtree(outputs, ignore_errors=True)

    megabytes = source.stat().st_size / 1e6
    lines = [
        BEGIN,
        "## A gzip .h5ad converted",
        "",
        f"Made by `.venv/bin/python benchmarks/h5ad_gzip.py --values {args.values}` on "
        f"{date.today().isoformat()} (2 cores, shared with other work: *load* is the machine's "
        "one-minute load average as the run started, so a load of 4 leaves a run about half "
        f"the cores). The file holds {args.values:,} float32 values, CSR over {H5AD_GENES:,} "
        f'genes, written by anndata with `compression="gzip"` ({megabytes:.0f} MB). Each route '
        f"runs {args.repeat} times, alternating, each in a fresh process writing both layouts; "
        "*CPU s* is user and system time of its process tree, *CPU %* that over wall time (200 % "
        "is both cores); peak RSS is sampled over the process tree every 50 ms.",
        "",
        "| route | wall s | CPU s | CPU % | peak RSS GiB | load |",
        "|---|---|---|---|---|---|",
    ]
    for route, m in rows:
        lines.append(
            f"| {ROUTES[route]} | {m['seconds']:.1f} | {m['cpu']:.1f} | "
            f"{100 * m['cpu'] / m['seconds']:.0f} | {m['peak'] / 2**30:.2f} | {m['load']:.1f} |"
        )
    objects = sorted({m["objects"] for route, m in rows if route == "convert"})
    lines += [
        "",
        f"`convert` wrote {', '.join(f'{n:,}' for n in objects)} files; `sporadik-dask validate` "
        "of its store took "
        + ", ".join(f"{c['seconds']:.1f} s ({c['cpu']:.1f} CPU s)" for c in checks)
        + ".",
    ]
    if args.no_publish:
        print("\n".join([*lines, END]))
    else:
        publish(args.output, BEGIN, END, lines)


if __name__ == "__main__":
    main()
