"""A variance per gene beside the plain pass it rides on (a sum per gene), and numpy's answer.

    .venv/bin/python benchmarks/moments.py [--cells 200000] [--genes 5000] [--offset 1e8]

The store is ``sd.synthetic.counts_matrix`` of that size at 2 % density, its values shifted by
``--offset`` (a large mean against a small spread), written once under ``--work``. Each route
runs in a fresh process: ``sum("cell")`` and ``var("cell")``, each twice (first call, then
again), lazily and with ``chunks={}``; and the largest relative error of the variance against
numpy's two-pass ``var`` of the dense columns. Pass ``--package DIR`` to import the package from
another checkout (``git worktree add DIR REV``) for a side-by-side run of two revisions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROUTES = ["lazy", "chunks={}"]


def _two_pass_variance(csc: Any) -> Any:
    """numpy's two passes per column, over the stored values and the implicit zeros, without
    the dense matrix (8 GB at the default size)."""
    import numpy as np

    rows, columns = csc.shape
    counts = np.diff(csc.indptr)
    column = np.repeat(np.arange(columns), counts)
    mean = np.bincount(column, csc.data, minlength=columns) / rows
    stored = np.bincount(column, (csc.data - mean[column]) ** 2, minlength=columns)
    return (stored + (rows - counts) * mean**2) / rows


def _child(route: str, store: Path) -> dict[str, Any]:
    import numpy as np
    import xarray as xr

    import sporadik_dask as sd

    chunks = None if route == "lazy" else {}
    out: dict[str, Any] = {}
    for op in ("sum", "var"):
        for attempt in ("first", "again"):
            started = time.perf_counter()
            opened = xr.open_dataset(store, engine="sporadik", chunks=chunks)
            result = getattr(opened["x"], op)("cell").compute().values
            out[f"{op} {attempt} s"] = round(time.perf_counter() - started, 3)
    expected = _two_pass_variance(sd.from_sporadik(store, axis=1).compute().tocsc())
    out["var max relative error"] = float(np.max(np.abs(result - expected) / expected))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=200_000)
    parser.add_argument("--genes", type=int, default=5_000)
    parser.add_argument("--offset", type=float, default=1e8)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "moments")
    parser.add_argument("--package", type=Path, default=None)
    parser.add_argument("--child", nargs=2, metavar=("ROUTE", "STORE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child[0], Path(args.child[1]))))
        return

    import numpy as np
    import sparse
    import xarray as xr

    import sporadik_dask as sd
    from sporadik_dask.synthetic import counts_matrix

    store = args.work / f"{args.cells}x{args.genes}+{args.offset:g}.zarr"
    if not store.exists():
        x = counts_matrix(cells=args.cells, genes=args.genes, density=0.02).astype(np.float64)
        shifted = x.map_blocks(
            lambda b: sparse.COO(b.coords, b.data + args.offset, shape=b.shape),
            dtype=np.float64,
        )
        sd.to_sporadik(xr.DataArray(shifted, dims=("cell", "gene"), name="x"), store)
    env = dict(os.environ)
    if args.package is not None:
        env["PYTHONPATH"] = str(args.package.resolve())
    print(f"{args.cells} x {args.genes}, values + {args.offset:g}; package {args.package or '.'}")
    for route in ROUTES:
        done = subprocess.run(
            [sys.executable, __file__, "--child", route, str(store)],
            capture_output=True, text=True, check=True, env=env,
        )  # fmt: skip
        print(route, done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
