"""A scientist's first preprocessing steps out of core, beside the same steps in memory.

    .venv/bin/python benchmarks/preprocessing.py [--cells 150000] [--genes 10000]
        [--density 0.015] [--package DIR] [--routes lazy chunks={} scipy scanpy]

The store is ``sd.synthetic.counts_matrix`` of that size (float32 counts), written once under
``--work``. Each (step, route) runs in a fresh process: the step twice (*first*, then *again*),
and that process's peak RSS (``VmHWM``, the matrix in memory included for ``scipy`` and
``scanpy``, whose load is not timed). Steps:

- ``decode``: zarr decoding the cell layout's ``data`` array alone (the floor of any pass);
- ``sum``: ``X.sum("gene")``, a plain pass;
- ``detected``: ``(X > 0).sum("gene")``, genes detected per cell;
- ``where``: ``xr.where(X > 1, X, 0).sum("gene")``, the counts above 1 per cell;
- ``normalize-log1p-mean-var``: ``Y = np.log1p(X / X.sum("gene") * 1e4)``, then ``Y.mean("cell")``
  and ``Y.var("cell")`` (what highly-variable-gene selection needs).

Routes: ``lazy`` and ``chunks={}`` are ``xr.open_dataset(store, engine="sporadik")`` without and
with ``chunks={}``; ``scipy`` the CSR matrix in memory (``scipy.sparse`` operations), ``scanpy``
``sc.pp.normalize_total``, ``sc.pp.log1p`` and the mean and variance scanpy's HVG uses, on an
AnnData in memory. ``--package DIR`` imports the package from another checkout for the sporadik
routes, labelled by ``--label``. Each answer is checked against float64 arithmetic on the
matrix in memory (largest relative difference printed; float32 steps round at each step).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STEPS = ["decode", "sum", "detected", "where", "normalize-log1p-mean-var"]
ROUTES = ["lazy", "chunks={}", "scipy", "scanpy"]


def _peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _in_memory(store: Path) -> Any:
    """The matrix as an h5ad holds it: a ``csr_matrix`` of int32 indices (scanpy 1.11's
    ``normalize_total`` was killed on the ``csr_array`` of int64 indices ``sparse`` gives)."""
    import numpy as np
    import scipy.sparse as sp

    import sporadik_dask as sd

    csr = sd.from_sporadik(store, axis=0).compute().tocsr()
    narrow = (csr.data, csr.indices.astype(np.int32), csr.indptr.astype(np.int32))
    return sp.csr_matrix(narrow, shape=csr.shape)


def _sporadik_step(step: str, store: Path, chunks: Any) -> Any:
    import numpy as np
    import xarray as xr

    x = xr.open_dataset(store, engine="sporadik", chunks=chunks)["x"]
    if step == "sum":
        return x.sum("gene").values
    if step == "detected":
        return (x > 0).sum("gene").values
    if step == "where":
        return xr.where(x > 1, x, 0).sum("gene").values
    y = np.log1p(x / x.sum("gene") * 1e4)
    return np.stack([y.mean("cell").values, y.var("cell").values])


def _scipy_step(step: str, csr: Any) -> Any:
    import numpy as np

    if step == "sum":
        return np.asarray(csr.sum(axis=1)).ravel()
    if step == "detected":
        return np.asarray((csr > 0).sum(axis=1)).ravel()
    if step == "where":
        return np.asarray(csr.multiply(csr > 1).sum(axis=1)).ravel()
    totals = np.asarray(csr.sum(axis=1)).ravel()
    y = csr.multiply((1e4 / totals)[:, None].astype(np.float32)).tocsr()
    y.data = np.log1p(y.data)
    mean = np.asarray(y.mean(axis=0)).ravel()
    squares = y.copy()
    squares.data = squares.data.astype(np.float64) ** 2
    var = np.asarray(squares.mean(axis=0)).ravel() - mean.astype(np.float64) ** 2
    return np.stack([mean, var])


def _scanpy_step(step: str, csr: Any) -> Any:
    import anndata
    import numpy as np
    import scanpy as sc
    from scanpy.preprocessing._utils import _get_mean_var

    adata = anndata.AnnData(csr.copy())
    if step == "sum":
        return np.asarray(adata.X.sum(axis=1)).ravel()
    if step == "detected":
        qc = sc.pp.calculate_qc_metrics(adata, percent_top=None, log1p=False, inplace=False)
        return qc[0]["n_genes_by_counts"].values
    if step == "where":
        return _scipy_step(step, adata.X)
    sc.pp.normalize_total(adata, target_sum=1e4)
    sc.pp.log1p(adata)
    mean, var = _get_mean_var(adata.X)
    return np.stack([mean, var * (adata.n_obs - 1) / adata.n_obs])  # scanpy's var has ddof=1


def _exact(step: str, csr: Any) -> Any:
    """The step's answer in float64, the variance in two passes over each gene's values and
    its implicit zeros (the dense matrix is not made)."""
    import numpy as np

    if step != "normalize-log1p-mean-var":
        return _scipy_step(step, csr)
    wide = csr.astype(np.float64)
    totals = np.asarray(wide.sum(axis=1)).ravel()
    y = wide.multiply((1e4 / totals)[:, None]).tocsc()
    y.data = np.log1p(y.data)
    cells, genes = y.shape
    counts = np.diff(y.indptr)
    gene = np.repeat(np.arange(genes), counts)
    mean = np.bincount(gene, y.data, minlength=genes) / cells
    stored = np.bincount(gene, (y.data - mean[gene]) ** 2, minlength=genes)
    return np.stack([mean, (stored + (cells - counts) * mean**2) / cells])


def _decode(store: Path) -> Any:
    import zarr

    return zarr.open_array(store / "layouts" / "axis0" / "data", mode="r")[:]


def _child(step: str, route: str, store: Path) -> dict[str, Any]:
    import numpy as np

    csr = _in_memory(store) if route in ("scipy", "scanpy") else None
    out: dict[str, Any] = {}
    result = None
    for attempt in ("first", "again"):
        started = time.perf_counter()
        if step == "decode":
            result = _decode(store)
        elif route == "scipy":
            result = _scipy_step(step, csr)
        elif route == "scanpy":
            result = _scanpy_step(step, csr)
        else:
            result = _sporadik_step(step, store, {} if route == "chunks={}" else None)
        out[attempt] = round(time.perf_counter() - started, 3)
    out["peak GiB"] = round(_peak_gib(), 2)
    if step != "decode":
        expected = _exact(step, csr if csr is not None else _in_memory(store))
        scale = np.maximum(np.abs(expected), 1e-30)
        out["max rel diff"] = float(np.max(np.abs(np.asarray(result) - expected) / scale))
    else:
        out["values"] = int(result.size)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=150_000)
    parser.add_argument("--genes", type=int, default=10_000)
    parser.add_argument("--density", type=float, default=0.015)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "preprocessing")
    parser.add_argument("--package", type=Path, default=None)
    parser.add_argument("--label", default="")
    parser.add_argument("--routes", nargs="+", default=ROUTES)
    parser.add_argument("--steps", nargs="+", default=STEPS)
    parser.add_argument(
        "--child", nargs=3, metavar=("STEP", "ROUTE", "STORE"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child[0], args.child[1], Path(args.child[2]))))
        return

    import xarray as xr

    import sporadik_dask as sd
    from sporadik_dask.synthetic import counts_matrix

    store = args.work / f"{args.cells}x{args.genes}@{args.density:g}.zarr"
    if not store.exists():
        x = counts_matrix(cells=args.cells, genes=args.genes, density=args.density)
        sd.to_sporadik(xr.DataArray(x, dims=("cell", "gene"), name="x"), store)
    env = dict(os.environ)
    if args.package is not None:
        env["PYTHONPATH"] = str(args.package.resolve())
    print(f"{args.cells} x {args.genes} at {args.density:g}; package {args.package or '.'}")
    print("| step | route | first s | again s | peak RSS GiB | largest relative difference |")
    print("|---|---|---|---|---|---|")
    for step in args.steps:
        for route in ["zarr"] if step == "decode" else args.routes:
            ours = route in ("lazy", "chunks={}")
            done = subprocess.run(
                [sys.executable, __file__, "--child", step, route, str(store)],
                capture_output=True, text=True, env=env if ours else None,
            )  # fmt: skip
            if done.returncode:
                said = (done.stderr.strip().splitlines() or ["no message"])[-1]
                print(f"| {step} | {route} | fails: {said} | | | |")
                continue
            got = json.loads(done.stdout.strip().splitlines()[-1])
            label = f"{route} {args.label}".strip() if ours else route
            extra = got.get("max rel diff", f"{got.get('values', 0):,} values")
            extra = f"{extra:.1e}" if isinstance(extra, float) else extra
            row = [step, label, got["first"], got["again"], got["peak GiB"], extra]
            print("| " + " | ".join(map(str, row)) + " |", flush=True)


if __name__ == "__main__":
    main()
