"""``convert`` of a transcript table and of .h5ad files, side by side with pyarrow + scipy.

    .venv/bin/python benchmarks/conversions.py --held
    .venv/bin/python benchmarks/conversions.py --rows 2000000 --values 1000000 2000000  # quick

Generates, once, under ``--work``: a transcript Parquet table like a spatial platform's (one row
per molecule: ``cell_id`` and ``gene`` strings, ``--rows`` rows over ``--cells`` x ``--genes``,
skewed: log-normal cell sizes, Zipf gene expression, rows in random order) and one .h5ad per
``--values`` (float32 CSR, 20,000 genes, ~5 % dense). Then runs, each in a fresh process whose
whole process tree's RSS is sampled every 50 ms:

- ``sporadik-dask convert`` on the threaded scheduler (both layouts, default chunking), and with
  ``--held`` the same with its shuffle parts held in memory, not spilled to local disk;
- the same count in memory with pyarrow + scipy: the table read with pyarrow, each string column
  dictionary-encoded, its sorted dictionary the axis, ``coo_matrix(...).tocsr()`` and
  ``.tocsc()`` (repeats summed); for an .h5ad, ``anndata.read_h5ad`` and ``X.tocsc()``.

Results replace the section between this script's markers in ``docs/benchmarks.md`` (``--output``),
with the command that made them.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from page import publish

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- conversions: made by benchmarks/conversions.py -->"
END = "<!-- /conversions -->"
#: Genes of a generated .h5ad, and its density: 20,000 genes at 5 %, 1,000 values a cell.
H5AD_GENES, H5AD_DENSITY = 20_000, 0.05


# -- generated inputs ------------------------------------------------------------------------


def transcripts(path: Path, rows: int, cells: int, genes: int, seed: int = 0) -> None:
    """A transcript table: ``cell_id`` and ``gene`` strings, skewed, rows in random order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    size = rng.lognormal(0.0, 1.0, cells)
    expression = 1.0 / np.arange(1, genes + 1) ** 1.25
    rng.shuffle(expression)
    cell_names = np.array([f"cell-{i:07d}" for i in rng.permutation(cells)], dtype=object)
    gene_names = np.array([f"GENE{i:04d}" for i in range(genes)], dtype=object)
    step = 2**20
    with pq.ParquetWriter(path, pa.schema([("cell_id", pa.string()), ("gene", pa.string())])) as w:
        for start in range(0, rows, step):
            n = min(step, rows - start)
            cell = rng.choice(cells, n, p=size / size.sum())
            gene = rng.choice(genes, n, p=expression / expression.sum())
            table = pa.table({"cell_id": cell_names[cell], "gene": gene_names[gene]})
            w.write_table(table, row_group_size=step)


def h5ad(path: Path, values: int, seed: int = 0) -> None:
    """An .h5ad of ``values`` float32 values, CSR, over :data:`H5AD_GENES` genes."""
    import anndata
    import pandas as pd
    import scipy.sparse

    rng = np.random.default_rng(seed)
    per_cell = int(H5AD_GENES * H5AD_DENSITY)
    cells = values // per_cell
    indices = np.empty(cells * per_cell, dtype=np.int32)
    for c in range(0, cells, 10_000):
        block = min(10_000, cells - c)
        picked = rng.random((block, H5AD_GENES)).argpartition(per_cell, axis=1)[:, :per_cell]
        indices[c * per_cell : (c + block) * per_cell] = np.sort(picked, axis=1).ravel()
    data = rng.integers(1, 30, indices.shape[0]).astype(np.float32)
    indptr = np.arange(0, cells * per_cell + 1, per_cell, dtype=np.int64)
    x = scipy.sparse.csr_matrix((data, indices, indptr), shape=(cells, H5AD_GENES))
    obs = pd.DataFrame(index=[f"cell{i}" for i in range(cells)])
    var = pd.DataFrame(index=[f"gene{i}" for i in range(H5AD_GENES)])
    anndata.AnnData(x, obs=obs, var=var).write_h5ad(path)


# -- what each child process runs ------------------------------------------------------------


def _scipy_table(path: str) -> dict[str, Any]:
    """The table counted in memory with pyarrow + scipy, timed by step."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    import scipy.sparse

    steps: dict[str, float] = {}
    start = time.perf_counter()
    table = pq.read_table(path, columns=["cell_id", "gene"])
    steps["read"] = time.perf_counter() - start
    positions, sizes = [], []
    for name in ("cell_id", "gene"):
        encoded = table[name].combine_chunks().dictionary_encode()
        order = pc.array_sort_indices(encoded.dictionary)
        rank = np.empty(len(order), dtype=np.int32)
        rank[order.to_numpy()] = np.arange(len(order), dtype=np.int32)
        positions.append(rank[encoded.indices.to_numpy()])
        sizes.append(len(order))
    steps["labels"] = time.perf_counter() - start - sum(steps.values())
    ones = np.ones(len(positions[0]), dtype=np.int32)
    csr = scipy.sparse.coo_matrix((ones, tuple(positions)), shape=tuple(sizes)).tocsr()
    csc = csr.tocsc()
    steps["count"] = time.perf_counter() - start - sum(steps.values())
    return {"steps": steps, "nnz": int(csr.nnz), "shape": list(csr.shape), "sum": int(csc.sum())}


def _scipy_h5ad(path: str) -> dict[str, Any]:
    """An .h5ad read whole with anndata, and its other layout made with scipy."""
    import anndata

    steps: dict[str, float] = {}
    start = time.perf_counter()
    x = anndata.read_h5ad(path).X
    steps["read"] = time.perf_counter() - start
    csc = x.tocsc()
    steps["tocsc"] = time.perf_counter() - start - steps["read"]
    return {"steps": steps, "nnz": int(csc.nnz), "shape": list(csc.shape)}


def _child(route: str, source: str) -> None:
    result = _scipy_table(source) if route == "scipy-table" else _scipy_h5ad(source)
    print(json.dumps(result))


# -- measuring -------------------------------------------------------------------------------


def measure(command: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``command``; its wall time, the peak RSS of its process tree, and its last line."""
    import psutil

    os.sync()  # earlier runs' dirty pages go to disk now, not during this one
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        root = psutil.Process(process.pid)
        while not done.is_set():
            try:
                tree = [root, *root.children(recursive=True)]
                rss = 0
                for member in tree:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        rss += member.memory_info().rss
                peak = max(peak, rss)
            except psutil.NoSuchProcess:
                return
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = process.communicate()
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    if process.returncode:
        sys.exit(f"{' '.join(command)} failed ({process.returncode}):\n{err}")
    last = out.strip().splitlines()[-1] if out.strip() else ""
    return {"seconds": seconds, "peak": peak, "last": last}


#: ``convert`` with its shuffle parts held in memory on threads (``sporadik.spill-bytes`` -1).
HELD = {"DASK_SPORADIK__SPILL_BYTES": "-1"}


def convert(
    source: Path, output: Path, *flags: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """One ``convert`` to ``output``, a new path: stores are deleted once the run ends
    (``scaling.fresh_work`` says why)."""
    command = [sys.executable, "-m", "sporadik_dask.cli.main", "convert", str(source), str(output)]
    measured = measure([*command, *flags], env)
    from sporadik_dask import describe

    measured["nnz"] = describe(str(output)).nnz
    return measured


def in_memory(route: str, source: Path) -> dict[str, Any]:
    measured = measure([sys.executable, __file__, "--child", route, str(source)])
    measured.update(json.loads(measured.pop("last")))
    return measured


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000_000, help="transcripts (rows)")
    parser.add_argument("--cells", type=int, default=150_000)
    parser.add_argument("--genes", type=int, default=480)
    parser.add_argument(
        "--values",
        type=int,
        nargs="*",
        default=[15_000_000, 30_000_000, 60_000_000],
        help="values of each generated .h5ad (none: skip the .h5ad runs)",
    )
    parser.add_argument("--repeat", type=int, default=2, help="runs of each, side by side")
    parser.add_argument(
        "--held",
        action="store_true",
        help="also convert each .h5ad with its shuffle parts held in memory (no spilling)",
    )
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sporadik-conv")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--no-publish", action="store_true", help="print, leave the docs alone")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return
    args.work.mkdir(parents=True, exist_ok=True)
    table = args.work / f"transcripts-{args.rows}-{args.cells}-{args.genes}.parquet"
    if args.rows and not table.exists():
        print(f"generating {table}", flush=True)
        transcripts(table, args.rows, args.cells, args.genes)
    files = {}
    for values in args.values:
        files[values] = args.work / f"x-{values}.h5ad"
        if not files[values].exists():
            print(f"generating {files[values]}", flush=True)
            h5ad(files[values], values)

    rows: list[tuple[str, str, dict[str, Any]]] = []

    def record(what: str, route: str, measured: dict[str, Any]) -> None:
        rows.append((what, route, measured))
        shown = {k: v for k, v in measured.items() if k not in ("last",)}
        print(
            what,
            route,
            f"{measured['seconds']:.1f} s",
            _gib(measured["peak"]),
            "GiB",
            shown,
            flush=True,
        )

    outputs = args.work / f"outputs-{os.getpid()}"
    made = (outputs / f"{n}.zarr" for n in itertools.count())
    for _ in range(args.repeat):
        if args.rows:
            what = f"transcripts, {args.rows:,} rows"
            record(what, "pyarrow + scipy, in memory", in_memory("scipy-table", table))
            flags = ["--columns", "cell_id", "gene", "--quiet"]
            record(what, "sporadik-dask convert", convert(table, next(made), *flags))
        for values, path in files.items():
            what = f".h5ad, {values:,} values"
            record(what, "anndata + scipy, in memory", in_memory("scipy-h5ad", path))
            record(what, "sporadik-dask convert", convert(path, next(made), "--quiet"))
            if args.held:
                held = convert(path, next(made), "--quiet", env=HELD)
                record(what, "sporadik-dask convert, parts held in memory", held)
    shutil.rmtree(outputs, ignore_errors=True)

    lines = [
        BEGIN,
        "## Conversions",
        "",
        f"Made by `.venv/bin/python benchmarks/conversions.py` on {date.today().isoformat()} "
        "(2 cores, shared): each route runs "
        f"{args.repeat} times, alternating, each time in a fresh process; peak RSS is sampled "
        "over the whole process tree every 50 ms. The transcript table has "
        f"{args.rows:,} rows of (`cell_id`, `gene`) strings over {args.cells:,} cells x "
        f"{args.genes} genes (log-normal cell sizes, Zipf genes, random order); each .h5ad is "
        f"float32 CSR over {H5AD_GENES:,} genes. `convert` writes both layouts; the in-memory "
        "route builds CSR and CSC and writes nothing; *parts held in memory* is `convert` with "
        "`sporadik.spill-bytes` -1 (nothing spilled to local disk).",
        "",
        "| input | route | wall s | peak RSS GiB | values |",
        "|---|---|---|---|---|",
    ]
    for what, route, measured in rows:
        lines.append(
            f"| {what} | {route} | {measured['seconds']:.1f} | {_gib(measured['peak'])} | "
            f"{measured['nnz']:,} |"
        )
    if args.no_publish:
        print("\n".join(lines))
    else:
        publish(args.output, BEGIN, END, lines)


if __name__ == "__main__":
    main()
