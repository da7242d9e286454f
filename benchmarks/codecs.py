"""Bytes on disk and decode speed of each codec chain a write may choose, with the counts stored
as they are and as the smallest integer dtype holding them, beside BPCells and anndata writing the
same matrix.

    .venv/bin/python benchmarks/codecs.py [--base REV]

Two count matrices (float32 counts): a realistic one (log-normal reads per cell, genes drawn with
Zipf weights, so counts are Poisson given a cell's size) and a uniform one (counts 1-10 at 5 %
density). Per chain, with the counts as they are and with ``dtype="smallest-integer"``, both
layouts are written (``to_sporadik(..., codecs=..., dtype=...)``); then a full pass (``totals``
per cell and per gene), 1,000 random cells (``isel(...).data``), and the bare decode of every chunk
of one layout's ``data`` and ``indices`` (:func:`~sporadik_dask.store.chunks.read_joined`). Each is
timed by the clock and by the process's CPU time (every thread's), which other work on a shared
machine moves less; each the least of ``--repeats`` rounds, chains in turn each round, after one
round on 2,000 cells that is not counted. ``--base REV`` adds a row of ``zstd`` written and read
by the package at git revision ``REV`` (checked out into a worktree of its own, run in a child
process each round), the speeds the others are compared with. BPCells (``pip install bpcells``:
``bpcells.experimental.DirMatrix``) writes the counts as uint32 cell-major (CSR) and gene-major
(CSC) and reads them back whole and by 1,000 random cells; it is left out when not installed.
anndata writes one layout (CSR) with its defaults. Results replace the section between this
script's markers in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from page import publish

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- codecs: made by benchmarks/codecs.py -->"
END = "<!-- /codecs -->"
#: What each row writes: its codecs, and its ``dtype=`` (None: the counts' own, float32).
CHAINS: dict[str, tuple[str, str | None]] = {
    "zstd": ("zstd", None),
    "blosc-zstd": ("blosc-zstd", None),
    "blosc-lz4": ("blosc-lz4", None),
    "zstd, smallest integer": ("zstd", "smallest-integer"),
    "blosc-zstd, smallest integer": ("blosc-zstd", "smallest-integer"),
    "blosc-lz4, smallest integer": ("blosc-lz4", "smallest-integer"),
}
#: The times each round measures, each by the clock and in CPU seconds (``cpu-`` before it).
TIMES = ("write", "pass", "cells", "decode")


def realistic(cells: int, genes: int, seed: int = 0) -> sp.csr_matrix:
    """Counts of reads drawn per cell (log-normal sizes) over genes with Zipf weights."""
    rng = np.random.default_rng(seed)
    reads = np.maximum(rng.lognormal(6.9, 0.7, cells).astype(np.int64), 1)
    weights = 1.0 / np.arange(1, genes + 1)
    weights = weights[rng.permutation(genes)] / weights.sum()
    rows = np.repeat(np.arange(cells), reads)
    cols = rng.choice(genes, size=rows.size, p=weights)
    matrix = sp.csr_matrix((np.ones(rows.size, np.float32), (rows, cols)), shape=(cells, genes))
    matrix.sum_duplicates()
    return matrix


def uniform(cells: int, genes: int, seed: int = 0) -> sp.csr_matrix:
    """Counts 1-10 at uniformly random cells, 5 % of them."""
    rng = np.random.default_rng(seed)
    matrix = sp.random(cells, genes, density=0.05, format="csr", random_state=rng)
    matrix.data[:] = rng.integers(1, 11, matrix.nnz)
    return matrix.astype(np.float32)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _timed(found: dict[str, float], name: str, work: Callable[[], Any]) -> None:
    """Time ``work`` into ``found``: seconds by the clock, and the process's CPU seconds."""
    start, used = time.perf_counter(), time.process_time()
    work()
    found[name] = time.perf_counter() - start
    found[f"cpu-{name}"] = time.process_time() - used


def _ours(matrix: sp.csr_matrix, row: str, where: Path, cells: np.ndarray) -> dict[str, float]:
    """One round of one chain: write both layouts, then the reads."""
    import xarray as xr
    import zarr

    import sporadik_dask as sd
    from sporadik_dask.store.chunks import read_joined

    chain, dtype = CHAINS[row]
    store = where / "ours.zarr"
    shutil.rmtree(store, ignore_errors=True)
    options: dict[str, Any] = {"codecs": chain} | ({"dtype": dtype} if dtype else {})
    found: dict[str, float] = {}
    _timed(found, "write", lambda: sd.to_sporadik(matrix, store, **options))
    for axis in (0, 1):
        found[f"bytes{axis}"] = _size(store / "layouts" / f"axis{axis}") / matrix.nnz
    counts = xr.open_dataset(store, engine="sporadik")
    x = counts[next(iter(counts.data_vars))]
    cell, gene = x.dims
    _timed(found, "pass", lambda: (x.sporadik.totals(cell), x.sporadik.totals(gene)))
    found["passed"] = 2 * matrix.nnz  # each value once in each layout
    _timed(found, "cells", lambda: x.isel({cell: cells}).data)
    layout = zarr.open_group(store / "layouts" / "axis0", mode="r")
    arrays = [layout["data"], layout["indices"]]
    requests = [(a, np.arange(-(-a.shape[0] // a.chunks[0]), dtype=np.int64)) for a in arrays]
    _timed(found, "decode", lambda: read_joined(requests))  # type: ignore[arg-type]
    return found


def _base(tree: Path, saved: Path, where: Path) -> dict[str, float]:
    """One round of ``zstd`` by the package in ``tree``, in a child process."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    child = subprocess.run(
        [sys.executable, __file__, "--child", str(saved), "--work", str(where)],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    if child.returncode != 0:
        raise SystemExit(f"the round with the package in {tree} failed:\n{child.stderr[-2000:]}")
    found: dict[str, float] = json.loads(child.stdout.strip().splitlines()[-1])
    return found


def _child(saved: Path, where: Path) -> None:
    """The ``--child`` process: one round of ``zstd`` on a saved matrix and cells, as JSON,
    after one on 2,000 cells that is not counted."""
    matrix = sp.load_npz(saved).tocsr()
    cells = np.load(saved.with_suffix(".cells.npy"))
    _ours(matrix[:2000], "zstd", where, cells[cells < 2000])  # as the parent's first round
    print(json.dumps(_ours(matrix, "zstd", where, cells)))


def _bpcells(matrix: sp.csr_matrix, where: Path, cells: np.ndarray) -> dict[str, float] | None:
    """One round of BPCells, or None when it is not installed."""
    try:
        from bpcells.experimental import DirMatrix
    except ImportError:
        return None
    counts = matrix.astype(np.uint32)
    found: dict[str, float] = {"write": 0.0, "cpu-write": 0.0}
    for axis, (name, laid) in enumerate((("csr", counts), ("csc", counts.tocsc()))):
        target = where / f"bpcells-{name}"
        shutil.rmtree(target, ignore_errors=True)
        one: dict[str, float] = {}
        _timed(
            one,
            "write",
            lambda laid=laid, target=target: DirMatrix.from_scipy_sparse(laid, str(target)),
        )
        found["write"] += one["write"]
        found["cpu-write"] += one["cpu-write"]
        found[f"bytes{axis}"] = _size(target) / matrix.nnz
    rows = DirMatrix(str(where / "bpcells-csr"))
    _timed(found, "pass", lambda: rows[:, :])  # one whole decode, into scipy
    found["passed"] = matrix.nnz
    _timed(found, "cells", lambda: rows[cells, :])
    return found


def _anndata(matrix: sp.csr_matrix, where: Path) -> dict[str, float]:
    """anndata's defaults, one layout (CSR): bytes per value of h5ad and of zarr."""
    import anndata

    adata = anndata.AnnData(matrix)
    found = {}
    for suffix, write in (("h5ad", adata.write_h5ad), ("zarr", adata.write_zarr)):
        target = where / f"anndata.{suffix}"
        shutil.rmtree(target, ignore_errors=True)
        write(target)
        found[suffix] = _size(target / "X" if suffix == "zarr" else target) / matrix.nnz
    return found


def _table(
    name: str, matrix: sp.csr_matrix, repeats: int, where: Path, base: tuple[str, Path] | None
) -> list[str]:
    cells = np.sort(np.random.default_rng(1).choice(matrix.shape[0], 1000, replace=False))
    saved = where / "matrix.npz"
    if base is not None:
        sp.save_npz(saved, matrix)
        np.save(saved.with_suffix(".cells.npy"), cells)
    for row in CHAINS:  # compiles the kernels and warms the caches; not counted
        _ours(matrix[:2000], row, where, cells[cells < 2000])
    rounds: dict[str, list[dict[str, float]]] = {}
    for _ in range(repeats):
        if base is not None:
            rounds.setdefault(f"zstd at {base[0]}", []).append(_base(base[1], saved, where))
        for row in CHAINS:
            rounds.setdefault(row, []).append(_ours(matrix, row, where, cells))
        theirs = _bpcells(matrix, where, cells)
        if theirs is not None:
            rounds.setdefault("BPCells (uint32)", []).append(theirs)
    fastest = {
        who: {key: min(r[key] for r in found) for key in found[0]} for who, found in rounds.items()
    }
    nnz = matrix.nnz
    compared = f"zstd at {base[0]}" if base is not None else "zstd"
    ref = fastest[compared]
    lines = [
        f"### {name}: {matrix.shape[0]:,} cells x {matrix.shape[1]:,} genes, {nnz / 1e6:.1f} M "
        "values",
        "",
        "| codecs, dtype | bytes/value cell-major | bytes/value gene-major | write both s (CPU s) "
        f"| full pass M values/s (per CPU-s) | pass x {compared} (CPU) | 1,000 random cells ms "
        "(CPU ms) | decode M values/s (per CPU-s) |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def rate(m: dict[str, float], key: str) -> float:
        return m["passed"] / m[key] / 1e6

    for who, m in fastest.items():
        decode = (
            f"{2 * nnz / m['decode'] / 1e6:.0f} ({2 * nnz / m['cpu-decode'] / 1e6:.0f})"
            if "decode" in m
            else "-"
        )
        lines.append(
            f"| {who} | {m['bytes0']:.2f} | {m['bytes1']:.2f} | "
            f"{m['write']:.2f} ({m['cpu-write']:.2f}) | "
            f"{rate(m, 'pass'):.0f} ({rate(m, 'cpu-pass'):.0f}) | "
            f"{rate(m, 'pass') / rate(ref, 'pass'):.2f} "
            f"({rate(m, 'cpu-pass') / rate(ref, 'cpu-pass'):.2f}) | "
            f"{1000 * m['cells']:.0f} ({1000 * m['cpu-cells']:.0f}) | {decode} |"
        )
    theirs = _anndata(matrix, where)
    lines += [
        "",
        f"anndata's defaults, one layout (CSR): h5ad {theirs['h5ad']:.2f} bytes per value, "
        f"zarr {theirs['zarr']:.2f}.",
        "",
    ]
    return lines


def _worktree(rev: str, where: Path) -> Path:
    """A worktree of ``rev`` under ``where`` (removed by :func:`main` afterwards)."""
    tree = where / "base"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev],
        check=True, capture_output=True,
    )  # fmt: skip
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--base", help="a git revision whose zstd row the others are compared with")
    parser.add_argument("--work", help="where the stores go (default: a temporary directory)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if args.child:
        _child(Path(args.child), Path(args.work))
        return
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=args.work) as scratch:
        where = Path(scratch)
        base = None
        if args.base:
            base = (args.base, _worktree(args.base, where))
        try:
            lines = _table("Realistic", realistic(args.cells, 20_000), args.repeats, where, base)
            lines += _table("Uniform", uniform(20_000, 5_000), args.repeats, where, base)
        finally:
            if base is not None:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base[1])],
                    check=False, capture_output=True,
                )  # fmt: skip
    took = (time.perf_counter() - started) / 60
    command = "`.venv/bin/python benchmarks/codecs.py"
    command += f" --cells {args.cells}" if args.cells != 30_000 else ""
    command += f" --repeats {args.repeats}" if args.repeats != 3 else ""
    command += f" --base {args.base}`" if args.base else "`"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    header = [
        BEGIN,
        "## Codec chains: bytes on disk and decode speed",
        "",
        f"Made by {command} on {date.today()} in {took:.0f} minutes, {platform.machine()} with "
        f"{os.cpu_count()} cores (load average at the end {load}), the threaded scheduler. The "
        "least of the rounds, by the clock and, in brackets, in CPU seconds of every thread. "
        '*dtype*: `dtype="smallest-integer"` stores the counts as the narrowest integer '
        "dtype holding them (uint16 for the realistic matrix, uint8 for the uniform one). "
        "*full pass*: `totals` per cell and per gene, each value read once in each layout; "
        "*decode*: every chunk of one layout's `data` and "
        "`indices` decoded into one array (`store.chunks.read_joined`), no pass. BPCells' *full "
        "pass* is one whole read of its cell-major matrix into scipy (`DirMatrix[:, :]`), its "
        "*write both* the two orders.",
        "",
    ]
    publish(ROOT / "docs" / "benchmarks.md", BEGIN, END, header + lines)


if __name__ == "__main__":
    main()
