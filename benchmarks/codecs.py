"""Bytes on disk and decode speed of each codec chain a write may choose, beside BPCells and
anndata writing the same matrix.

    .venv/bin/python benchmarks/codecs.py

Two count matrices (float32 counts): a realistic one (log-normal reads per cell, genes drawn with
Zipf weights, so counts are Poisson given a cell's size) and a uniform one (counts 1-10 at 5 %
density). Per chain (and once more with ``blosc-zstd`` after casting the counts to uint16), both
layouts are written (``to_sporadik(..., codecs=...)``); then a full pass (``totals`` per cell and
per gene), 1,000 random cells (``isel(...).data``), and the bare decode of every chunk of one
layout's ``data`` and ``indices`` (:func:`~sporadik_dask.store.chunks.read_joined`), each the
fastest of ``--repeats``, chains in turn each round, after one round on 2,000 cells that is not
counted. BPCells (``pip install bpcells``: ``bpcells.experimental.DirMatrix``) writes the counts as
uint32 cell-major (CSR) and gene-major (CSC) and reads them back whole and by 1,000 random cells; it
is left out when not installed. anndata writes one layout (CSR) with its defaults. Results replace
the section between this script's markers in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
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
#: What each row writes: its codecs, and the dtype the counts are cast to first (None: float32).
CHAINS = {
    "zstd": ("zstd", None),
    "blosc-zstd": ("blosc-zstd", None),
    "blosc-lz4": ("blosc-lz4", None),
    "blosc-zstd, counts cast to uint16": ("blosc-zstd", np.uint16),
}


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


def _timed(work: Callable[[], Any]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def _ours(matrix: sp.csr_matrix, row: str, where: Path, cells: np.ndarray) -> dict[str, float]:
    """One round of one chain: write both layouts, then the reads."""
    import xarray as xr
    import zarr

    import sporadik_dask as sd
    from sporadik_dask.store.chunks import read_joined

    chain, dtype = CHAINS[row]
    if dtype is not None:
        matrix = matrix.astype(dtype)
    store = where / "ours.zarr"
    shutil.rmtree(store, ignore_errors=True)
    found = {"write": _timed(lambda: sd.to_sporadik(matrix, store, codecs=chain))}  # type: ignore[arg-type]
    for axis in (0, 1):
        found[f"bytes{axis}"] = _size(store / "layouts" / f"axis{axis}") / matrix.nnz
    counts = xr.open_dataset(store, engine="sporadik")
    x = counts[next(iter(counts.data_vars))]
    cell, gene = x.dims
    found["pass"] = _timed(lambda: (x.sporadik.totals(cell), x.sporadik.totals(gene)))
    found["passed"] = 2 * matrix.nnz  # each value once in each layout
    found["cells"] = _timed(lambda: x.isel({cell: cells}).data)
    layout = zarr.open_group(store / "layouts" / "axis0", mode="r")
    arrays = [layout["data"], layout["indices"]]
    requests = [(a, np.arange(-(-a.shape[0] // a.chunks[0]), dtype=np.int64)) for a in arrays]
    found["decode"] = _timed(lambda: read_joined(requests))  # type: ignore[arg-type]
    return found


def _bpcells(matrix: sp.csr_matrix, where: Path, cells: np.ndarray) -> dict[str, float] | None:
    """One round of BPCells, or None when it is not installed."""
    try:
        from bpcells.experimental import DirMatrix
    except ImportError:
        return None
    counts = matrix.astype(np.uint32)
    found: dict[str, float] = {}
    for axis, (name, laid) in enumerate((("csr", counts), ("csc", counts.tocsc()))):
        target = where / f"bpcells-{name}"
        shutil.rmtree(target, ignore_errors=True)
        found["write"] = found.get("write", 0.0) + _timed(
            lambda laid=laid, target=target: DirMatrix.from_scipy_sparse(laid, str(target))
        )
        found[f"bytes{axis}"] = _size(target) / matrix.nnz
    rows = DirMatrix(str(where / "bpcells-csr"))
    found["pass"] = _timed(lambda: rows[:, :])  # one whole decode, into scipy
    found["passed"] = matrix.nnz
    found["cells"] = _timed(lambda: rows[cells, :])
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


def _table(name: str, matrix: sp.csr_matrix, repeats: int, where: Path) -> list[str]:
    cells = np.sort(np.random.default_rng(1).choice(matrix.shape[0], 1000, replace=False))
    for row in CHAINS:  # compiles the kernels and warms the caches; not counted
        _ours(matrix[:2000], row, where, cells[cells < 2000])
    rounds: dict[str, list[dict[str, float]]] = {}
    for _ in range(repeats):
        for row in CHAINS:
            rounds.setdefault(row, []).append(_ours(matrix, row, where, cells))
        theirs = _bpcells(matrix, where, cells)
        if theirs is not None:
            rounds.setdefault("BPCells (uint32)", []).append(theirs)
    fastest = {
        who: {key: min(r[key] for r in found) for key in found[0]} for who, found in rounds.items()
    }
    nnz = matrix.nnz
    base = fastest["zstd"]
    lines = [
        f"### {name}: {matrix.shape[0]:,} cells x {matrix.shape[1]:,} genes, {nnz / 1e6:.1f} M "
        "values",
        "",
        "| codecs | bytes/value cell-major | bytes/value gene-major | write both s | full pass "
        "M values/s | x zstd | 1,000 random cells ms | decode M values/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for who, m in fastest.items():
        decode = f"{2 * nnz / m['decode'] / 1e6:.0f}" if "decode" in m else "-"
        lines.append(
            f"| {who} | {m['bytes0']:.2f} | {m['bytes1']:.2f} | {m['write']:.2f} | "
            f"{m['passed'] / m['pass'] / 1e6:.0f} | "
            f"{m['passed'] / m['pass'] / (base['passed'] / base['pass']):.2f} | "
            f"{1000 * m['cells']:.0f} | {decode} |"
        )
    theirs = _anndata(matrix, where)
    lines += [
        "",
        f"anndata's defaults, one layout (CSR): h5ad {theirs['h5ad']:.2f} bytes per value, "
        f"zarr {theirs['zarr']:.2f}.",
        "",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", help="where the stores go (default: a temporary directory)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=args.work) as scratch:
        where = Path(scratch)
        lines = _table("Realistic", realistic(args.cells, 20_000), args.repeats, where)
        lines += _table("Uniform", uniform(20_000, 5_000), args.repeats, where)
    took = (time.perf_counter() - started) / 60
    command = "`.venv/bin/python benchmarks/codecs.py"
    command += f" --cells {args.cells}" if args.cells != 30_000 else ""
    command += f" --repeats {args.repeats}`" if args.repeats != 3 else "`"
    header = [
        BEGIN,
        "## Codec chains: bytes on disk and decode speed",
        "",
        f"Made by {command} on {date.today()} in {took:.0f} minutes, {platform.machine()} with "
        f"{os.cpu_count()} cores, the threaded scheduler. The fastest of the rounds. *full pass*: "
        "`totals` per cell and per gene, each value read once in each layout; *decode*: every "
        "chunk of one layout's `data` and `indices` decoded into one array "
        "(`store.chunks.read_joined`), no pass. BPCells' *full pass* is one whole read of its "
        "cell-major matrix into scipy (`DirMatrix[:, :]`), its *write both* the two orders.",
        "",
    ]
    publish(ROOT / "docs" / "benchmarks.md", BEGIN, END, header + lines)


if __name__ == "__main__":
    main()
