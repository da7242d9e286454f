"""Highly variable genes and PCA out of core, beside scanpy in memory and scanpy on dask.

    .venv/bin/python benchmarks/analysis.py [--cells 150000] [--genes 10000]
        [--density 0.015] [--top 2000] [--comps 50] [--routes lazy chunks={} scanpy anndata-lazy]

The store is ``sd.synthetic.counts_matrix`` of that size (float32 counts), written once under
``--work`` (with, for ``anndata-lazy``, the same matrix as an AnnData zarr store). Each (step,
route) runs in a fresh process: the step twice (*first*, then *again*; wall seconds, and the
CPU seconds of every thread of the process again), and that process's peak RSS (``VmHWM``; for
``scanpy``, the matrix in memory included, loaded before timing). Steps:

- ``hvg``: normalize each cell to 10,000 counts, ``log1p``, highly variable genes (scanpy's
  ``seurat`` flavor, ``--top`` genes): the table of means, dispersions and the selection;
- ``hvg+pca``: the same, then PCA of the selected genes (``--comps`` components, zero-centered),
  the projection of every cell computed.

Routes: ``lazy`` and ``chunks={}`` are ``xr.open_dataset(store, engine="sporadik")`` without
and with ``chunks={}``, then ``np.log1p(X / X.sum("gene") * 1e4)``,
``sd.highly_variable_genes`` and ``sd.pca``; ``scanpy`` is ``sc.pp.normalize_total``,
``sc.pp.log1p``, ``sc.pp.highly_variable_genes`` and ``sc.pp.pca`` (its default solver,
arpack) on an AnnData of the CSR matrix in memory (a copy made before timing); ``anndata-lazy``
the same scanpy calls on an AnnData whose X is ``anndata.experimental.read_elem_lazy`` of the
AnnData zarr store's CSR (dask chunks of ``csr_matrix``; scanpy's PCA on it is its
``covariance_eigh`` on dask). Each answer is compared with scanpy's in memory: the genes
selected that differ, and the largest difference of the explained variance ratios.
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

STEPS = ["hvg", "hvg+pca"]
ROUTES = ["lazy", "chunks={}", "scanpy", "anndata-lazy"]


def _peak_gib() -> float:
    """This process's own peak RSS, ``VmHWM``: ``getrusage``'s ``ru_maxrss`` keeps, across
    ``exec``, the peak of the parent that forked it (here, the one that wrote the AnnData copy
    with the matrix in memory)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _cpu_seconds() -> float:
    """CPU seconds of this process, every thread's: on a shared machine, the work done, which
    the load changes less than the wall time."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _in_memory(store: Path) -> Any:
    """The matrix as an h5ad holds it: a ``csr_matrix`` of int32 indices."""
    import numpy as np
    import scipy.sparse as sp

    import sporadik_dask as sd

    csr = sd.from_sporadik(store, axis=0).compute().tocsr()
    narrow = (csr.data, csr.indices.astype(np.int32), csr.indptr.astype(np.int32))
    return sp.csr_matrix(narrow, shape=csr.shape)


def _ours(step: str, store: Path, chunks: Any, top: int, comps: int) -> dict[str, Any]:
    import numpy as np
    import xarray as xr

    import sporadik_dask as sd

    x = xr.open_dataset(store, engine="sporadik", chunks=chunks)["x"]
    y = np.log1p(x / x.sum("gene") * 1e4)
    hvg = sd.highly_variable_genes(y, n_top_genes=top)
    out: dict[str, Any] = {"hvg": hvg["highly_variable"].to_numpy()}
    if step == "hvg+pca":
        found = sd.pca(y, comps, mask_var=hvg["highly_variable"])
        out["ratio"] = found["variance_ratio"].values
        out["X_pca"] = found["X_pca"].values
    return out


def _scanpy(step: str, adata: Any, top: int, comps: int) -> dict[str, Any]:
    import numpy as np
    import scanpy as sc

    sc.pp.normalize_total(adata, target_sum=1e4)
    sc.pp.log1p(adata)
    hvg = sc.pp.highly_variable_genes(adata, n_top_genes=top, inplace=False)
    mask = np.asarray(hvg["highly_variable"].to_numpy())
    out: dict[str, Any] = {"hvg": mask}
    if step == "hvg+pca":
        selected = adata[:, mask].copy()
        sc.pp.pca(selected, n_comps=comps)
        out["ratio"] = np.asarray(selected.uns["pca"]["variance_ratio"])
        projected = selected.obsm["X_pca"]
        out["X_pca"] = np.asarray(projected.compute() if hasattr(projected, "dask") else projected)
    return out


def _lazy_adata(path: Path) -> Any:
    import anndata
    import zarr

    group = zarr.open_group(path, mode="r")
    x = anndata.experimental.read_elem_lazy(group["X"])
    return anndata.AnnData(x)


def _child(step: str, route: str, store: Path, top: int, comps: int) -> dict[str, Any]:
    import numpy as np

    adata = None
    if route == "scanpy":
        import anndata

        csr = _in_memory(store)
    out: dict[str, Any] = {}
    result: dict[str, Any] = {}
    for attempt in ("first", "again"):
        if route == "scanpy":
            adata = anndata.AnnData(csr.copy())
        elif route == "anndata-lazy":
            adata = _lazy_adata(store.with_suffix(".anndata.zarr"))
        started, cpu = time.perf_counter(), _cpu_seconds()
        if route in ("scanpy", "anndata-lazy"):
            result = _scanpy(step, adata, top, comps)
        else:
            result = _ours(step, store, {} if route == "chunks={}" else None, top, comps)
        out[attempt] = round(time.perf_counter() - started, 3)
        out[f"{attempt} cpu"] = round(_cpu_seconds() - cpu, 2)
    out["peak GiB"] = round(_peak_gib(), 2)
    np.save(store.with_suffix(f".{step}.{route}.npy"), np.array(result, dtype=object))
    return out


def _compared(store: Path, step: str, route: str) -> str:
    """Genes selected unlike scanpy's in memory; the largest difference of variance ratios."""
    import numpy as np

    def load(name: str) -> dict[str, Any]:
        loaded: dict[str, Any] = np.load(
            store.with_suffix(f".{step}.{name}.npy"), allow_pickle=True
        ).item()
        return loaded

    if route == "scanpy":
        return "-"
    if not store.with_suffix(f".{step}.scanpy.npy").exists():
        return "no answer from scanpy to compare"
    got, expected = load(route), load("scanpy")
    said = f"{int(np.sum(got['hvg'] != expected['hvg']))} genes differ"
    if "ratio" in got:
        said += f"; ratios {np.max(np.abs(got['ratio'] - expected['ratio'])):.1e}"
    return said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=150_000)
    parser.add_argument("--genes", type=int, default=10_000)
    parser.add_argument("--density", type=float, default=0.015)
    parser.add_argument("--top", type=int, default=2000)
    parser.add_argument("--comps", type=int, default=50)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "analysis")
    parser.add_argument("--routes", nargs="+", default=ROUTES)
    parser.add_argument("--steps", nargs="+", default=STEPS)
    parser.add_argument("--child", nargs=3, metavar=("STEP", "ROUTE", "STORE"))
    args = parser.parse_args()
    if args.child:
        step, route, store = args.child
        print(json.dumps(_child(step, route, Path(store), args.top, args.comps)))
        return

    import anndata
    import xarray as xr

    import sporadik_dask as sd
    from sporadik_dask.synthetic import counts_matrix

    store = args.work / f"{args.cells}x{args.genes}@{args.density:g}.zarr"
    if not store.exists():
        x = counts_matrix(cells=args.cells, genes=args.genes, density=args.density)
        sd.to_sporadik(xr.DataArray(x, dims=("cell", "gene"), name="x"), store)
    if "anndata-lazy" in args.routes and not store.with_suffix(".anndata.zarr").exists():
        anndata.AnnData(_in_memory(store)).write_zarr(store.with_suffix(".anndata.zarr"))
    print(f"{args.cells} x {args.genes} at {args.density:g}; {args.top} genes, {args.comps} comps")
    print("| step | route | first s | again s | again CPU s | peak RSS GiB | against scanpy |")
    print("|---|---|---|---|---|---|---|")
    routes = ["scanpy", *[r for r in args.routes if r != "scanpy"]]  # the answer to compare with
    for step in args.steps:
        for route in routes:
            done = subprocess.run(
                [sys.executable, __file__, "--child", step, route, str(store),
                 "--top", str(args.top), "--comps", str(args.comps)],
                capture_output=True, text=True, env=dict(os.environ),
            )  # fmt: skip
            if done.returncode:
                said = (done.stderr.strip().splitlines() or ["no message"])[-1]
                print(f"| {step} | {route} | fails: {said} | | | | |", flush=True)
                continue
            got = json.loads(done.stdout.strip().splitlines()[-1])
            row = [step, route, got["first"], got["again"], got["again cpu"], got["peak GiB"]]
            row.append(_compared(store, step, route))
            print("| " + " | ".join(map(str, row)) + " |", flush=True)


if __name__ == "__main__":
    main()
