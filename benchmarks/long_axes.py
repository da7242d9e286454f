"""Reads of genome-length axes: the same values in 100 x L stores for L = 3.1e7, 3.1e8, 3.1e9,
read one way at a time, each in a fresh process: time and peak RSS, beside the reference
package ``sporadik`` reading the same row.

    .venv/bin/python benchmarks/long_axes.py --label after

Stores are made under ``--work`` if missing: the row layout only, or both layouts with
``--both`` (then a region, a list of positions and points read the position layout's runs). Every
value sits in the first 3.1e7 positions, so only the axis's length
differs. Each case runs with an address-space limit (``--limit-gb``); one killed or refused is
reported as such. Results replace this label's section between the script's markers in
``docs/benchmarks.md``, with the command that made them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from page import publish

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = 100
LENGTHS = (31_000_000, 310_000_000, 3_100_000_000)
#: Where every value sits, whatever the axis's length: the first (shortest) axis.
SPAN = LENGTHS[0]
RNG_SEED = 11
REGION = (12_000_000, 13_000_000)
CASES = {
    "row, lazy": "lazy",
    "row, chunks={}": "chunks",
    "row, from_sporadik": "dask",
    "row, StoreReader": "reader",
    "row, reference": "reference",
    "1 Mb region, lazy": "lazy",
    "1 Mb region, chunks={}": "chunks",
    "1 Mb region, from_sporadik": "dask",
    "1 Mb region, values alone": "zarr",
    "1 Mb region, runs alone": "zarr",
    "10,000 positions, lazy": "lazy",
    "10,000 positions, chunks={}": "chunks",
    "10,000 positions, from_sporadik": "dask",
    "sample mask, lazy": "lazy",
    "sample mask, chunks={}": "chunks",
    "sample mask, from_sporadik": "dask",
    "1,000 points, lazy": "lazy",
    "1,000 points, chunks={}": "chunks",
    "1,000 points, StoreReader": "reader",
    "open, lazy": "lazy",
    "blocks of 1e8 positions, chunks=": "chunks",
    "blocks of 1e8 positions, from_sporadik": "dask",
    "sum per position, lazy": "lazy",
    "sum per position, chunks={}": "chunks",
    "positions from 1,000 on summed per sample, lazy": "lazy",
    "positions from 1,000 on summed per sample, chunks={}": "chunks",
    "positions from 1,000 on summed per sample, from_sporadik": "dask",
    "every other position summed per position, lazy": "lazy",
}
#: Blocks along the positions, for the cases that cut them (``chunks={"pos": BLOCK}``).
BLOCK = 10**8


def values() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Peaks (runs of 2,000 positions in a tenth of the samples) and scattered sites: ~2 M
    int32 values, every position below :data:`SPAN`."""
    rng = np.random.default_rng(RNG_SEED)
    rows, cols = [], []
    for start in rng.choice(SPAN - 2_000, 500, replace=False):
        samples = rng.choice(SAMPLES, SAMPLES // 10, replace=False)
        rows.append(np.repeat(samples, 2_000))
        cols.append(np.tile(np.arange(start, start + 2_000), samples.size))
    sites = 10_000 * SAMPLES
    rows.append(rng.integers(0, SAMPLES, sites))
    cols.append(rng.integers(0, SPAN, sites))
    row, col = np.concatenate(rows), np.concatenate(cols)
    order = np.unique(row.astype(np.int64) * SPAN + col, return_index=True)[1]
    row, col = row[order], col[order]
    return row, col, rng.integers(1, 100, row.size, dtype=np.int32)


def make_store(path: Path, length: int, axes: tuple[int, ...]) -> None:
    import sparse

    import sporadik_dask

    row, col, data = values()
    x = sparse.COO(np.stack([row, col]), data, shape=(SAMPLES, length))
    sporadik_dask.to_sporadik(x, path, axes=axes, overwrite=True)


def keys() -> dict[str, Any]:
    rng = np.random.default_rng(RNG_SEED + 1)
    mask = np.zeros(SAMPLES, dtype=bool)
    mask[rng.choice(SAMPLES, 10, replace=False)] = True
    return {
        "row": {"sample": 3},
        "1 Mb region": {"pos": slice(*REGION)},
        "10,000 positions": {"pos": np.sort(rng.choice(SPAN, 10_000, replace=False))},
        "sample mask": {"sample": mask},
        "1,000 points": (rng.integers(0, SAMPLES, 1_000), rng.integers(0, SPAN, 1_000)),
        "blocks of 1e8 positions": {},
        "sum per position": {},
        "positions from 1,000 on summed per sample": {},
        "every other position summed per position": {},
    }


def resident_mb(field: str) -> float:
    """This process's ``VmRSS`` or ``VmHWM`` (peak), in MB."""
    status = Path("/proc/self/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith(field))
    return int(line.split()[1]) / 1024


def run_case(store: str, case: str, again: int = 0) -> dict[str, Any]:
    """One case in this process: seconds of the route's imports, of the read (and the median of
    ``again`` reads of the same again, if asked), the values read (a checksum), and the resident
    memory after the imports."""
    what, route = case.rsplit(", ", 1)[0], CASES[case]
    began = time.perf_counter()
    if route == "reference":
        import sporadik
    elif route == "zarr":
        import zarr
    else:  # the reading stack, imported lazily by the package, and sparse: the result's type
        import dask
        import dask.array  # from_sporadik's and chunks='s arrays; opening installs patches of it
        import sparse  # noqa: F401
        import xarray as xr

        import sporadik_dask
        import sporadik_dask.read

        with contextlib.suppress(ImportError):  # dask's first compute imports it (a client?)
            import distributed  # noqa: F401

        dask.config.set(scheduler="synchronous")
    result: dict[str, Any] = {
        "imported_mb": resident_mb("VmRSS"),
        "import_seconds": time.perf_counter() - began,
    }
    key = keys().get(what)

    def read() -> int:
        if route == "reference":
            with sporadik.open_store(store, axis=0) as reader:
                _, found = reader.coords_at(key["sample"])
            return int(found.sum())
        if route == "zarr":  # the region's values in the position layout, read by zarr alone:
            # with the offsets at its ends, or with every position's (its runs)
            layout = zarr.open_group(store, mode="r")["layouts/axis1"]
            start, stop = key["pos"].start, key["pos"].stop
            if case.endswith("runs alone"):
                offsets = layout["indptr"][start : stop + 1]
                low, high = int(offsets[0]), int(offsets[-1])
            else:
                low, high = (int(v) for v in layout["indptr"][[start, stop]])
            layout["indices"][low:high]
            return int(layout["data"][low:high].sum(dtype=np.int64))
        if what == "open":
            ds = xr.open_dataset(store, engine="sporadik")
            return len(ds.sizes)
        if route in ("lazy", "chunks"):
            chunks: dict[str, int] | None = {} if route == "chunks" else None
            if what.startswith("blocks"):
                chunks = {"dim_1": BLOCK}
            ds = xr.open_dataset(store, engine="sporadik", chunks=chunks)
            (var,) = ds.data_vars.values()
            var = var.rename({var.dims[0]: "sample", var.dims[1]: "pos"})
            if what == "sum per position":
                picked = var.sum("sample")
            elif what == "positions from 1,000 on summed per sample":
                picked = var.isel(pos=slice(1_000, None)).sum("pos")
            elif what == "every other position summed per position":
                picked = var.isel(pos=slice(0, None, 2)).sum("sample")
            elif what == "1,000 points":
                rows, cols = key
                picked = var.isel(
                    sample=xr.DataArray(rows, dims="p"), pos=xr.DataArray(cols, dims="p")
                )
            else:
                picked = var.isel(key)
            return checksum(picked.data)
        if route == "dask" and what.startswith("blocks"):
            x = sporadik_dask.from_sporadik(store, chunks=(SAMPLES, BLOCK))
        elif route == "dask" and what == "positions from 1,000 on summed per sample":
            x = sporadik_dask.from_sporadik(store)
            return checksum(x[:, 1_000:].sum(1))
        elif route == "dask":
            x = sporadik_dask.from_sporadik(store)
            get = x.vindex if what == "1,000 points" else x
        else:
            x = get = sporadik_dask.StoreReader(store)
            get = x.vindex if what == "1,000 points" else x
        if what == "1,000 points":
            part = get[key]
        elif not key:
            part = x
        else:
            ((dim, part_key),) = key.items()
            part = get[(part_key,) if dim == "sample" else (slice(None), part_key)]
        return checksum(part)

    start = time.perf_counter()
    result["total"] = read()
    result["seconds"] = time.perf_counter() - start
    if again:
        times = []
        for _ in range(again):
            start = time.perf_counter()
            read()
            times.append(time.perf_counter() - start)
        result["again_seconds"] = statistics.median(times)
    return result


def checksum(x: Any) -> int:
    """The values' sum (``sparse``'s own ``sum`` overflows counting the cells of an axis past
    2**31)."""
    computed = x.compute() if hasattr(x, "dask") else x
    return int(np.asarray(computed.data).sum(dtype=np.int64))


def child(store: str, case: str, limit: int, again: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    result = run_case(store, case, again)
    result["peak_mb"] = resident_mb("VmHWM")
    print(json.dumps(result))


def measure(
    store: Path,
    case: str,
    limit_gb: float,
    timeout: float,
    again: int,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``case`` read in a fresh process (with ``env``, say a ``PYTHONPATH`` choosing a tree)."""
    limit = str(int(limit_gb * 2**30))
    command = [sys.executable, __file__, "--child", str(store), case, limit, str(again)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"failed": f"past {timeout:.0f} s"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["killed"])[-1]
        return {"failed": "out of memory" if "Memory" in last else last[:60]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def cell(result: dict[str, Any]) -> str:
    if "failed" in result:
        return result["failed"]
    read = result["peak_mb"] - result["imported_mb"]
    again = f", again {result['again_seconds']:.2f} s" if "again_seconds" in result else ""
    return (
        f"{result['seconds']:.2f} s{again} (imports {result['import_seconds']:.2f} s), "
        f"+{read:,.0f} MB ({result['peak_mb']:,.0f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "long-axes")
    parser.add_argument("--label", default="after", help="which section: before or after")
    parser.add_argument("--limit-gb", type=float, default=6.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("--both", action="store_true", help="stores with both layouts")
    parser.add_argument(
        "--again",
        type=int,
        nargs="?",
        const=1,
        default=0,
        help="time each read again in its process (N times: their median)",
    )
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    stores = {}
    for length in LENGTHS:
        name = f"long-{length:.0e}{'-both' if args.both else ''}.zarr".replace("+", "")
        stores[length] = args.work / name
        if not stores[length].exists():
            make_store(stores[length], length, (0, 1) if args.both else (0,))
    header = " | ".join(f"L = {length:.1e}" for length in LENGTHS)
    lines = [
        f"<!-- long-axes-{args.label}: made by benchmarks/long_axes.py -->",
        f"## Genome-length axes, {args.label} ({date.today()})",
        "",
        f"`python benchmarks/long_axes.py {shlex.join(sys.argv[1:])}` (load average before the "
        f"run: {os.getloadavg()[0]:.1f}): 100 samples x L positions, "
        f"{values()[2].size:,} int32 values (all below 3.1e7), "
        f"{'both layouts' if args.both else 'row layout only'}; each case in a "
        "fresh process (synchronous scheduler): seconds of the read (then of the same read again "
        "in that process, with --again; with --again N, the median of N; in brackets, of the "
        "route's imports: for this package "
        "xarray, dask with dask.array and distributed, zarr and sparse; for the reference, zarr) "
        "and peak RSS past the imports (for this package about 230 MB, for the reference about "
        f"50 MB), then the peak RSS in brackets; under a {args.limit_gb:g} GB "
        "address-space limit.",
        "",
        f"| case | {header} |",
        "|---|" + "---|" * len(LENGTHS),
    ]
    for case in args.cases:
        results = [
            measure(stores[n], case, args.limit_gb, args.timeout, args.again) for n in LENGTHS
        ]
        totals = {r["total"] for r in results if "total" in r}
        flag = "" if len(totals) <= 1 else " (values differ!)"
        lines.append(f"| {case}{flag} | " + " | ".join(map(cell, results)) + " |")
        print(lines[-1], flush=True)
    end = f"<!-- /long-axes-{args.label} -->"
    publish(ROOT / "docs" / "benchmarks.md", lines[0], end, lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
