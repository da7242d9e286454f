"""The xarray idioms a notebook reaches for first, side by side with scipy in memory, anndata's
lazy route and this package's own calls: time (first call in a fresh process, then again) and
peak memory.

    .venv/bin/python benchmarks/idioms.py --size full

Uses the input and stores ``benchmarks/run.py`` makes (``--work``), making any that are missing.
Each (idiom, route) runs in a fresh process of its own on the threaded scheduler, so *first*
includes what a new process pays (imports excluded, kernels compiled or loaded from cache) and
peak RSS is its own. Results replace the section between this script's markers in
``docs/benchmarks.md``, with the command that made them.
"""

from __future__ import annotations

import argparse
import json
import resource
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
from page import publish

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- idioms: made by benchmarks/idioms.py -->"
END = "<!-- /idioms -->"
RNG_SEED = 7

#: Pseudobulk, side by side with the peers: flox over ``chunks={}`` of plain dask + sparse (this
#: package's pushdown switched off), scanpy's ``sc.get.aggregate`` on the AnnData in memory.
GROUPBY_ROUTES = ["lazy", "chunks={}", "totals", "flox", "scanpy", "scipy"]
#: A route is stopped past this many seconds or this much RSS, and reported as such.
LIMIT_SECONDS = 900
LIMIT_BYTES = 12 * 2**30

#: Each idiom: what it is, and its routes by name (a route is a function of the context).
IDIOMS: dict[str, tuple[str, list[str]]] = {
    "genes-sorted": ("1,000 genes, sorted", ["lazy", "scipy", "anndata-lazy"]),
    "genes-unsorted": ("1,000 genes in a user's order", ["lazy", "scipy", "anndata-lazy"]),
    "genes-repeated": ("1,000 genes, 300 of them twice", ["lazy", "scipy", "anndata-lazy"]),
    "genes-reversed": ("every gene, reversed", ["lazy", "scipy", "reference"]),
    "genes-sorted-chunked": ("100 sorted genes", ["chunks={}", "lazy", "anndata-lazy"]),
    "gene-mask-chunked": ("a 5 % gene mask", ["chunks={}", "lazy", "scipy"]),
    "points": ("1,000 (cell, gene) points", ["lazy", "scipy"]),
    "sum-cell-chunked": (".sum('cell'), default skipna", ["chunks={}", "totals", "scipy"]),
    "sum-gene-chunked": (".sum('gene', skipna=False)", ["chunks={}", "totals", "scipy"]),
    "sum-cell-lazy": (".sum('cell') lazily", ["lazy", "totals", "scipy"]),
    "mean-cell": (".mean('cell') (float32 stays float32)", ["lazy", "chunks={}", "scipy"]),
    "sum-from-sporadik": ("from_sporadik(...).sum(axis=0)", ["gcxs", "coo", "totals", "scipy"]),
    "groupby-50": ("groupby 50 cell groups .sum()", GROUPBY_ROUTES),
    "groupby-50000": ("groupby 50,000 cell groups .sum()", GROUPBY_ROUTES),
    "dot-50": (
        "xr.dot with a dense gene x 50 matrix",
        ["lazy", "chunks={}", "sparse-einsum", "scipy"],
    ),
    "loaded-mask": (
        "a 84 % cell mask of the loaded variable",
        ["loaded", "loaded-sparse", "scipy"],
    ),
    "loaded-genes": (
        "1,000 genes in a user's order, of the loaded variable",
        ["loaded", "loaded-sparse", "scipy"],
    ),
    # a notebook's route after QC: a filter, then a reduction, a hand-off and scanpy's steps
    "filter-sum": (
        ".isel(cell=84 % mask).sum('cell')",
        ["lazy", "chunks={}", "scipy"],
    ),
    "genes-sum": (
        ".isel(gene=50 genes).sum('gene') (an MT fraction's numerator)",
        ["lazy", "chunks={}", "scipy"],
    ),
    "groupby-two": (
        "groupby two labels (50 x 4 groups) .sum()",
        ["lazy", "chunks={}", "combined-label", "combined-label chunks={}", "scanpy"],
    ),
    "select-both": (
        "15,000 scattered cells x 2,000 scattered genes",
        ["lazy", "chunks={}", "tocsr", "scipy"],
    ),
    "handoff": (
        "an 84 % cell mask handed over as a csr_matrix",
        ["lazy", "chunks={}", "sparse-tocsr", "anndata-read", "scipy"],
    ),
    "normalize": (
        "the hand-off, then normalize_total and log1p",
        ["lazy", "scanpy"],
    ),
}
#: Idioms left out of a run without ``--idioms``: each has a section of its own (``--section``).
APART = {"dot-50": "products", "loaded-mask": "loaded", "loaded-genes": "loaded"}
APART.update(
    dict.fromkeys(
        ["filter-sum", "genes-sum", "groupby-two", "select-both", "handoff", "normalize"],
        "notebook",
    )
)


def _picks(cells: int, genes: int) -> dict[str, Any]:
    rng = np.random.default_rng(RNG_SEED)
    unsorted = rng.choice(genes, 1_000, replace=False)
    return {
        "sorted-1000": np.sort(unsorted),
        "unsorted": unsorted,
        "repeated": np.concatenate([unsorted, unsorted[:300]]),
        "reversed": np.arange(genes)[::-1],
        "sorted": np.sort(rng.choice(genes, 100, replace=False)),
        "mask": rng.random(genes) < 0.05,
        "points": (rng.integers(0, cells, 1_000), rng.integers(0, genes, 1_000)),
        "groups-50": rng.integers(0, 50, cells),
        "groups-50000": rng.integers(0, 50_000, cells),
    }


def _ours(store: str, chunks: Any) -> Any:
    import xarray as xr

    ds = xr.open_dataset(store, engine="sporadik", chunks=chunks)
    counts = ds[next(iter(ds.data_vars))]
    return counts.rename(dict(zip(counts.dims, ("cell", "gene"), strict=True)))


def _done(result: Any) -> Any:
    """Computed, whatever the route gave."""
    return result.compute() if hasattr(result, "compute") else result


def _in_memory(cache: Path, meta: dict[str, Any]) -> Any:
    """The matrix as scipy's CSR, read from the input before the clock starts."""
    import scipy.sparse as sp

    rows, cols, data = (np.load(cache / f"{n}.npy") for n in ("rows", "cols", "data"))
    return sp.csr_matrix((data, (rows, cols)), shape=(meta["cells"], meta["genes"]))


def _notebook_route(idiom: str, route: str, cache: Path) -> Callable[[], Any]:
    """The calls of a notebook after QC (``APART`` as ``notebook``), by ``route``."""
    meta = json.loads((cache / "meta.json").read_text())
    rng = np.random.default_rng(RNG_SEED)
    cell_mask = rng.random(meta["cells"]) < 0.84
    genes = np.sort(rng.choice(meta["genes"], 50, replace=False))
    kinds, batches = rng.integers(0, 50, meta["cells"]), rng.integers(0, 4, meta["cells"])
    cells = np.sort(rng.choice(meta["cells"], 15_000, replace=False))
    some_genes = np.sort(rng.choice(meta["genes"], 2_000, replace=False))
    warnings.simplefilter("ignore")
    if route == "scipy":
        csr = _in_memory(cache, meta)
        if idiom == "filter-sum":
            return lambda: np.asarray(csr[cell_mask].sum(axis=0)).ravel()
        if idiom == "genes-sum":
            return lambda: np.asarray(csr[:, genes].sum(axis=1)).ravel()
        if idiom == "select-both":
            return lambda: csr[cells][:, some_genes]
        return lambda: csr[cell_mask]
    if route == "scanpy":
        import anndata as ad
        import pandas as pd
        import scanpy as sc

        csr = _in_memory(cache, meta)
        if idiom == "normalize":
            adata = ad.AnnData(X=csr[cell_mask])

            def normalized() -> Any:
                x = sc.pp.normalize_total(adata, target_sum=1e4, inplace=False)["X"]
                return sc.pp.log1p(x)

            return normalized
        obs = pd.DataFrame(
            {
                "kind": pd.Categorical(kinds.astype(str)),
                "batch": pd.Categorical(batches.astype(str)),
            }
        )
        adata = ad.AnnData(X=csr, obs=obs)
        return lambda: sc.get.aggregate(adata, by=["kind", "batch"], func="sum").layers["sum"]
    if route == "anndata-read":
        import anndata as ad
        import zarr

        group = zarr.open_group(cache / "anndata.zarr", mode="r")["csr"]
        return lambda: ad.io.read_elem(group)[cell_mask]
    chunked = route.endswith("chunks={}")
    counts = _ours(str(cache / "ours-threaded.zarr"), {} if chunked else None)
    if idiom == "filter-sum":
        return lambda: _done(counts.isel(cell=cell_mask).sum("cell").data)
    if idiom == "genes-sum":
        return lambda: _done(counts.isel(gene=genes).sum("gene").data)
    if idiom == "select-both":
        if route == "tocsr":
            return lambda: counts.isel(cell=cells, gene=some_genes).sporadik.tocsr()
        return lambda: _done(counts.isel(cell=cells, gene=some_genes).data)
    if idiom == "groupby-two":
        labelled = counts.assign_coords(kind=("cell", kinds), batch=("cell", batches))
        if route.startswith("combined-label"):
            labelled = labelled.assign_coords(both=("cell", kinds * 4 + batches))
            return lambda: _done(labelled.groupby("both").sum().data)
        return lambda: _done(labelled.groupby(["kind", "batch"]).sum().data)
    if route == "sparse-tocsr":  # what the docs said before the hand-off: sparse's csr_array
        return lambda: counts.isel(cell=cell_mask).data.tocsr()
    if idiom == "normalize":
        import anndata as ad
        import scanpy as sc

        def handed_normalized() -> Any:
            adata = ad.AnnData(X=counts.isel(cell=cell_mask).sporadik.tocsr())
            sc.pp.normalize_total(adata, target_sum=1e4)
            sc.pp.log1p(adata)
            return adata.X

        return handed_normalized
    return lambda: counts.isel(cell=cell_mask).sporadik.tocsr()


def _route(idiom: str, route: str, cache: Path) -> Callable[[], Any]:
    """The call that does ``idiom`` by ``route``, after this process's set-up."""
    if APART.get(idiom) == "notebook":
        return _notebook_route(idiom, route, cache)
    meta = json.loads((cache / "meta.json").read_text())
    picks = _picks(meta["cells"], meta["genes"])
    store = str(cache / "ours-threaded.zarr")
    selection = {
        "genes-sorted": picks["sorted-1000"],
        "genes-unsorted": picks["unsorted"],
        "genes-repeated": picks["repeated"],
        "genes-reversed": picks["reversed"],
        "genes-sorted-chunked": picks["sorted"],
        "gene-mask-chunked": picks["mask"],
    }.get(idiom)
    groups = picks["groups-50000" if idiom == "groupby-50000" else "groups-50"]
    loadings = np.random.default_rng(RNG_SEED).standard_normal((meta["genes"], 50))
    cell_mask = np.random.default_rng(RNG_SEED).random(meta["cells"]) < 0.84
    if route in ("loaded", "loaded-sparse"):  # read whole first (not timed), then selected
        import dask

        dask.config.set({"sporadik.pushdown": route == "loaded"})
        counts = _ours(store, None).load()
        if idiom == "loaded-mask":
            return lambda: counts.isel(cell=cell_mask).data
        return lambda: counts.isel(gene=picks["unsorted"]).data
    if route == "sparse-einsum":  # xarray's einsum, sparse's outer product: products not routed
        import dask
        import xarray as xr

        dask.config.set({"sporadik.pushdown": False})
        counts = _ours(store, {})
        return lambda: _done(xr.dot(counts, xr.DataArray(loadings, dims=("gene", "pc"))).data)
    if route == "flox":  # xarray's own groupby through flox, over dask blocks of sparse.COO
        import dask
        import xarray as xr

        dask.config.set({"sporadik.pushdown": False})
        xr.set_options(use_flox=True)
        labelled = _ours(store, {}).assign_coords(group=("cell", groups))
        return lambda: _done(labelled.groupby("group").sum().data)
    if route == "scanpy":
        import anndata as ad
        import pandas as pd
        import scanpy as sc
        import scipy.sparse as sp

        rows, cols, data = (np.load(cache / f"{n}.npy") for n in ("rows", "cols", "data"))
        csr = sp.csr_matrix((data, (rows, cols)), shape=(meta["cells"], meta["genes"]))
        del rows, cols, data
        obs = pd.DataFrame({"group": pd.Categorical(groups.astype(str))})
        adata = ad.AnnData(X=csr, obs=obs)
        return lambda: sc.get.aggregate(adata, by="group", func="sum").layers["sum"]
    if route in ("lazy", "chunks={}"):
        counts = _ours(store, None if route == "lazy" else {})
        if selection is not None:
            return lambda: _done(counts.isel(gene=selection).data)
        if idiom == "points":
            import xarray as xr

            cells, genes = (xr.DataArray(p, dims="p") for p in picks["points"])
            return lambda: _done(counts.isel(cell=cells, gene=genes).data)
        if idiom.startswith("sum"):
            dim = "gene" if idiom == "sum-gene-chunked" else "cell"
            skipna = {"skipna": False} if idiom == "sum-gene-chunked" else {}
            return lambda: _done(counts.sum(dim, **skipna).data)
        if idiom == "mean-cell":
            return lambda: _done(counts.mean("cell").data)
        if idiom == "dot-50":
            import xarray as xr

            pcs = xr.DataArray(loadings, dims=("gene", "pc"))
            return lambda: _done(xr.dot(counts, pcs).data)
        labelled = counts.assign_coords(group=("cell", groups))
        return lambda: _done(labelled.groupby("group").sum().data)
    if route in ("gcxs", "coo"):  # sparse's own reductions of the blocks from_sporadik reads
        import sporadik_dask as sd

        blocks = sd.from_sporadik(store, axis=1, format=route)
        return lambda: _done(blocks.sum(axis=0))
    if route == "totals":  # one pass over values: the floor of a reduction or a pseudobulk
        counts = _ours(store, None)
        kept = "cell" if idiom == "sum-gene-chunked" else "gene"
        return lambda: counts.sporadik.totals(kept).data
    if route == "reference":
        import sporadik

        array = sporadik.open_array(store)
        return lambda: array.slices_at(selection, axis=1)
    if route == "anndata-lazy":
        import zarr
        from anndata.experimental import read_elem_lazy

        csc = read_elem_lazy(zarr.open_group(cache / "anndata.zarr", mode="r")["csc"])
        return lambda: _done(csc[:, selection])
    if route == "scipy":  # the matrix in memory, as CSR and CSC, loaded before the clock starts
        import scipy.sparse as sp

        rows, cols, data = (np.load(cache / f"{n}.npy") for n in ("rows", "cols", "data"))
        coo = sp.coo_matrix((data, (rows, cols)), shape=(meta["cells"], meta["genes"]))
        del rows, cols, data
        csr, csc = coo.tocsr(), coo.tocsc()
        del coo
        if selection is not None:
            return lambda: csc[:, selection]
        if idiom == "points":
            return lambda: np.asarray(csr[picks["points"]]).ravel()
        if idiom == "sum-gene-chunked":
            return lambda: np.asarray(csr.sum(axis=1)).ravel()
        if idiom in ("sum-cell-chunked", "sum-cell-lazy", "sum-from-sporadik"):
            return lambda: np.asarray(csc.sum(axis=0)).ravel()
        if idiom == "mean-cell":
            return lambda: np.asarray(csc.mean(axis=0)).ravel()
        if idiom == "dot-50":
            return lambda: csr @ loadings
        if idiom == "loaded-mask":
            return lambda: csr[cell_mask]
        if idiom == "loaded-genes":
            return lambda: csc[:, picks["unsorted"]]
        size = int(groups.max()) + 1
        indicator = sp.csr_matrix(
            (np.ones(groups.size, dtype=np.float32), (groups, np.arange(groups.size))),
            shape=(size, groups.size),
        )
        return lambda: indicator @ csr
    raise ValueError(route)


def _high_water() -> int:
    """This process's peak RSS in bytes, from ``VmHWM``: ``getrusage``'s ``ru_maxrss`` carries
    the parent's over ``exec`` on Linux, so a child started by a big parent would report its."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _child(idiom: str, route: str, cache: Path) -> None:
    """One idiom by one route, twice, in this process; prints seconds and peak RSS as JSON."""
    import dask

    warnings.simplefilter("ignore")
    dask.config.set(scheduler="threads")
    before = _high_water()
    call = _route(idiom, route, cache)
    seconds = []
    for _ in range(2):
        result = None  # the first call's result is no part of the second call's peak
        started = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - started)
    peak = _high_water()
    kind = type(result).__name__
    print(json.dumps({"seconds": seconds, "peak": peak, "before": before, "type": kind}))


def _ensure(cache: Path, size: str, work: Path) -> None:
    """The input and the stores this needs, made by run.py's own code if missing."""
    sys.path.insert(0, str(Path(__file__).parent))
    import run

    run._make_input(cache, **run.SIZES[size])
    for name in ("ours-threaded", "anndata"):
        if not (cache / f"{name}.zarr").exists():
            run._run_child(["--child", "write", name, str(cache)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sporadik-bench")
    parser.add_argument("--size", default="full")
    parser.add_argument(
        "--idioms",
        nargs="+",
        default=[idiom for idiom in IDIOMS if idiom not in APART],
        choices=list(IDIOMS),
    )
    parser.add_argument(
        "--section",
        help="publish to a section of this name (its own markers and heading), not the main one",
    )
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument(
        "--routes", nargs="+", help="only these routes of each idiom (default: every one)"
    )
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        idiom, route, cache = args.child
        _child(idiom, route, Path(cache))
        return
    cache = args.work / args.size
    _ensure(cache, args.size, args.work)
    meta = json.loads((cache / "meta.json").read_text())
    rows = []
    for idiom in args.idioms:
        label, routes = IDIOMS[idiom]
        for route in (r for r in routes if args.routes is None or r in args.routes):
            stdout, error = _run_child(
                [sys.executable, __file__, "--child", idiom, route, str(cache)]
            )
            if error is not None:
                print(label, route, "FAILED", error, flush=True)
                rows.append((label, route, {"error": error[:80]}))
                continue
            measured = json.loads(stdout.strip().splitlines()[-1])
            rows.append((label, route, measured))
            print(label, route, measured, flush=True)
    _report(args, meta, rows)


def _run_child(command: list[str]) -> tuple[str, str | None]:
    """A child's output, or why it failed: its last error line, or the limit it passed (time,
    or RSS sampled every 0.1 s), so a route that would take the machine down is stopped."""
    import psutil

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        started, watched = time.perf_counter(), psutil.Process(child.pid)
        while child.poll() is None:
            try:
                rss = watched.memory_info().rss
            except psutil.Error:
                rss = 0
            seconds = time.perf_counter() - started
            if rss > LIMIT_BYTES or seconds > LIMIT_SECONDS:
                child.kill()
                child.wait()
                if rss > LIMIT_BYTES:
                    return "", f"stopped past {LIMIT_BYTES / 2**30:.0f} GiB RSS"
                return "", f"stopped past {LIMIT_SECONDS} s"
            time.sleep(0.1)
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            return "", (err.read().strip().splitlines() or ["failed"])[-1]
        return out.read(), None


def _report(args: argparse.Namespace, meta: dict[str, Any], rows: list[Any]) -> None:
    only = f" --routes {' '.join(args.routes)}" if args.routes else ""
    begin, end, title = BEGIN, END, "xarray idioms"
    if args.section:
        only = f" --idioms {' '.join(args.idioms)} --section {args.section}{only}"
        begin = BEGIN.replace("idioms:", f"idioms-{args.section}:")
        end = END.replace("idioms", f"idioms-{args.section}")
        title = f"xarray idioms: {args.section}"
    lines = [
        begin,
        f"## {title}",
        "",
        f"Made by `.venv/bin/python benchmarks/idioms.py --size {args.size}{only}` on "
        f"{date.today().isoformat()}: the {meta['nnz']:,}-value store of {meta['cells']:,} cells "
        f"x {meta['genes']:,} genes (float32) that `benchmarks/run.py` writes. Each idiom runs by "
        "each route twice in a fresh process of its own on the threaded scheduler: *first* is a "
        "new process's first call (imports and opening excluded), *again* the same call once "
        "warm; peak RSS is that process's own high-water mark (`VmHWM`), *at start* its mark "
        "once imports are done: scipy's peak includes the matrix it holds in memory, as CSR and "
        "CSC. `lazy` is `xr.open_dataset(store, engine='sporadik')`, `chunks={}` the same with "
        "`chunks={}` (then `.compute()`), `totals` is `da.sporadik.totals`, "
        "`anndata-lazy` is `read_elem_lazy` of anndata's CSC group, `reference` is the "
        "reference's `slices_at`, `flox` is xarray's groupby through flox over `chunks={}` with "
        "this package's pushdown off (`sporadik.pushdown: False`), `scanpy` is "
        "`sc.get.aggregate` on the AnnData in memory (CSR), `gcxs` and `coo` are `sparse`'s own "
        "sum of the blocks of `from_sporadik(store, axis=1, format=...)` (its kernels loaded "
        "from the disk cache a previous process filled), `sparse-einsum` is `chunks={}` with "
        "products not routed (`sporadik.pushdown: False`), so xarray's `einsum` goes to "
        "`sparse.einsum`; `loaded` is the lazy variable after `.load()` (not timed), "
        "`loaded-sparse` the same with `sporadik.pushdown: False`, so `sparse` indexes it. "
        "A route past "
        f"{LIMIT_SECONDS} s or {LIMIT_BYTES / 2**30:.0f} GiB RSS is stopped.",
        "",
        "| idiom | route | first s | again s | peak RSS GiB | at start GiB | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, route, measured in rows:
        if "error" in measured:
            lines.append(f"| {label} | {route} | fails: {measured['error']} | | | | |")
            continue
        first, again = measured["seconds"]
        lines.append(
            f"| {label} | {route} | {first:.3f} | {again:.3f} | "
            f"{measured['peak'] / 2**30:.2f} | {measured['before'] / 2**30:.2f} | "
            f"{measured['type']} |"
        )
    publish(args.output, begin, end, lines)


if __name__ == "__main__":
    main()
