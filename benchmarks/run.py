"""Side-by-side benchmarks of writing both layouts and of reading, in one run.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python benchmarks/run.py --sizes small full --repeats 3

Contenders: ours (threads, its shuffle parts spilled to local disk or held in memory; sharded;
a 2-worker cluster), the reference ``sporadik``, the scipy route,
anndata (CSR written, converted to CSC, written), TileDB-SOMA (a SparseNDArray ingested), and the
zarr floor.
Each contender runs in a fresh process (so its memory is its own), on the same seeded input,
cached once as ``.npy`` files so that generating it is never timed. Wall time is measured inside
the process around the work alone; peak memory is the largest summed RSS of the process and its
children (cluster workers included), sampled every 20 ms. Results are written to
``docs/benchmarks.md`` with the command that made them, and plotted beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
SIZES = {
    "tiny": {"cells": 6_000, "genes": 2_000},  # a check of the harness, in a minute
    "small": {"cells": 60_000, "genes": 20_000},
    "full": {"cells": 300_000, "genes": 20_000},
}
WRITERS = [
    "floor",
    "ours-threaded",
    "ours-threaded-held",
    "ours-sharded",
    "ours-cluster",
    "scipy",
    "reference",
    "anndata",
    "tiledbsoma",
]
#: Values per shard object of ``ours-sharded`` (inner chunks stay the spec's ~128 KB): a
#: sharded store is a few dozen objects where an unsharded one is ~11,000 chunk files, each
#: created (and renamed into place) by its own system calls.
SHARD = 2**24
#: Everything after this line of the results page is hand-written and kept across runs.
DISCUSSION = "<!-- discussion: kept across runs -->"


# --------------------------------------------------------------------------------------------
# Work done inside a contender's own process


def _load(cache: Path) -> tuple[tuple[int, int], np.ndarray, np.ndarray, np.ndarray]:
    meta = json.loads((cache / "meta.json").read_text())
    rows, cols, data = (np.load(cache / f"{n}.npy") for n in ("rows", "cols", "data"))
    return (meta["cells"], meta["genes"]), rows, cols, data


def _dask_input(shape: tuple[int, int], rows: Any, cols: Any, data: Any) -> Any:
    """The input as the issue gives it: a dask array of sparse.COO blocks of 10,000 rows."""
    import dask.array as da
    import sparse

    from sporadik_dask.synthetic import ROWS_PER_CHUNK

    blocks = []
    for start in range(0, shape[0], ROWS_PER_CHUNK):
        stop = min(start + ROWS_PER_CHUNK, shape[0])
        lo, hi = np.searchsorted(rows, [start, stop])
        coords = np.stack([rows[lo:hi] - start, cols[lo:hi]]).astype(np.int64)
        block = sparse.COO(
            coords, data[lo:hi], shape=(stop - start, shape[1]), has_duplicates=False, sorted=True
        )
        blocks.append(da.from_array(block, chunks=block.shape, asarray=False))
    return da.concatenate(blocks, axis=0)


def _write(name: str, cache: Path, out: Path) -> float:
    shape, rows, cols, data = _load(cache)
    if name == "floor":
        import scipy.sparse as sp
        import sporadik
        import zarr

        coo = sp.coo_matrix((data, (rows, cols)), shape=shape)
        arrays = []
        for matrix in (coo.tocsr(), coo.tocsc()):
            arrays += [matrix.data, matrix.indices, matrix.indptr]
        group = zarr.open_group(out, mode="w")
        started = time.perf_counter()
        for i, array in enumerate(arrays):
            chunk = sporadik.chunk_for(array.dtype, len(array))
            group.create_array(f"a{i}", shape=array.shape, dtype=array.dtype, chunks=(chunk,))[
                :
            ] = array
        return time.perf_counter() - started
    if name.startswith("ours"):
        import sporadik_dask as sd

        x = _dask_input(shape, rows, cols, data)
        del rows, cols, data
        if name == "ours-cluster":
            from distributed import Client, LocalCluster

            with (
                LocalCluster(
                    n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
                ) as cluster,
                Client(cluster) as client,
            ):
                x = client.persist(x)
                from distributed import wait

                wait(x)
                started = time.perf_counter()
                sd.to_sporadik(x, out)
                return time.perf_counter() - started
        # held: the shuffle's parts stay in memory, none spilled to local disk
        spill = -1 if name == "ours-threaded-held" else None
        import dask

        with dask.config.set({"sporadik.spill-bytes": spill} if spill is not None else {}):
            started = time.perf_counter()
            sd.to_sporadik(x, out, shard=SHARD if name == "ours-sharded" else None)
            return time.perf_counter() - started
    if name == "scipy":
        import scipy.sparse as sp
        import sporadik

        started = time.perf_counter()
        coo = sp.coo_matrix((data, (rows, cols)), shape=shape)
        sporadik.write_store(out, [coo.tocsr(), coo.tocsc()])
        return time.perf_counter() - started
    if name == "reference":
        import sporadik

        started = time.perf_counter()
        sporadik.SparseArray.from_coords(shape, (rows, cols), data).write(out)
        return time.perf_counter() - started
    if name == "anndata":
        import anndata
        import scipy.sparse as sp
        import zarr

        anndata.settings.zarr_write_format = 3
        started = time.perf_counter()
        csr = sp.csr_matrix(sp.coo_matrix((data, (rows, cols)), shape=shape))
        group = zarr.open_group(out, mode="w", zarr_format=3)
        anndata.io.write_elem(group, "csr", csr)
        anndata.io.write_elem(group, "csc", csr.tocsc())
        return time.perf_counter() - started
    if name == "tiledbsoma":
        import pyarrow as pa
        import tiledbsoma as soma

        started = time.perf_counter()
        table = pa.Table.from_arrays(
            [pa.array(rows), pa.array(cols), pa.array(data)],
            names=["soma_dim_0", "soma_dim_1", "soma_data"],
        )
        with soma.SparseNDArray.create(
            str(out), type=pa.from_numpy_dtype(data.dtype), shape=shape
        ) as array:
            array.write(table)
        return time.perf_counter() - started
    raise ValueError(name)


def _size_on_disk(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _median_ms(calls: list[Any]) -> float:
    """Median wall time of the calls, after one more call of the first to warm caches and JITs."""
    calls[0]()
    times = []
    for call in calls:
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


READERS = ["ours", "reference", "anndata (read_elem_lazy)", "tiledbsoma"]
#: The route an xarray user takes for a sum: COO chunks, reduced by ``sparse`` itself.
XARRAY_SUM = "ours via xarray chunks={}"


def _reads(cache: Path) -> dict[str, dict[str, float]]:
    """Each read by each reader, side by side in this one process: median ms by case.

    Ours and the reference read our store; anndata reads the store anndata wrote, lazily
    (``read_elem_lazy``: a dask array of scipy chunks); TileDB-SOMA reads its own array.
    """
    import warnings
    from functools import partial

    import dask
    import sporadik
    import tiledbsoma as soma
    import xarray as xr
    import zarr
    from anndata.experimental import read_elem_lazy

    import sporadik_dask as sd

    store = cache / "ours-threaded.zarr"
    rng = np.random.default_rng(1)
    ds = xr.open_dataset(store, engine="sporadik")
    counts = ds[next(iter(ds.data_vars))]
    group = zarr.open_group(cache / "anndata.zarr", mode="r")
    lazy = [read_elem_lazy(group["csr"]), read_elem_lazy(group["csc"])]
    tiles = soma.open(str(cache / "tiledbsoma.zarr"))

    def ours(dim: str, selection: Any) -> Any:
        return counts.isel({dim: selection}).data

    def anndata_lazy(axis: int, selection: Any) -> Any:
        x = lazy[axis]
        return (x[selection] if axis == 0 else x[:, selection]).compute()

    def soma_read(axis: int, selection: Any) -> Any:
        if isinstance(selection, slice):  # SOMA slices include their stop
            selection = slice(selection.start, selection.stop - 1)
        coords = (selection,) if axis == 0 else (slice(None), selection)
        return tiles.read(coords=coords).tables().concat()

    results: dict[str, dict[str, float]] = {}
    with sporadik.open_array(store) as reference:
        for axis, dim in enumerate(counts.dims):
            size = counts.shape[axis]
            ones = [int(i) for i in rng.integers(0, size, 20)]
            batches = [np.sort(rng.choice(size, 1000, replace=False)) for _ in range(3)]
            starts = [int(i) for i in rng.integers(0, size - 1000, 3)]
            cases = {
                "one position": [int(i) for i in ones],
                "1,000 random positions": batches,
                "1,000-position range": [slice(a, a + 1000) for a in starts],
            }
            for case, selections in cases.items():
                calls = {
                    "ours": [partial(ours, dim, x) for x in selections],
                    "reference": [
                        partial(reference.slice_at, x, axis=axis)
                        if isinstance(x, int)
                        else partial(reference.slices_over, x.start, x.stop, axis=axis)
                        if isinstance(x, slice)
                        else partial(reference.slices_at, x, axis=axis)
                        for x in selections
                    ],
                    "anndata (read_elem_lazy)": [
                        partial(anndata_lazy, axis, x) for x in selections
                    ],
                    "tiledbsoma": [partial(soma_read, axis, x) for x in selections],
                }
                results[f"{case}, axis {axis}"] = {
                    reader: _median_ms(reader_calls) for reader, reader_calls in calls.items()
                }
                print(case, axis, results[f"{case}, axis {axis}"], flush=True)
        chunked = xr.open_dataset(store, engine="sporadik", chunks={})[counts.name]
        for axis in range(counts.ndim):
            other = 1 - axis
            x = sd.from_sporadik(store, axis=axis, format="gcxs")
            with dask.config.set(scheduler="threads"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mine = partial(lambda x, other: x.sum(axis=other).compute(), x, other)
                theirs = partial(_soma_sum, tiles, other)
                scipy_chunks = partial(_block_sums, lazy[axis], other)
                through_xarray = partial(
                    lambda dim: chunked.sum(dim, skipna=False).compute(), counts.dims[other]
                )
                results[f"sum along axis {other}"] = {
                    "ours": _median_ms([mine] * 3),
                    XARRAY_SUM: _median_ms([through_xarray] * 2),
                    "anndata (read_elem_lazy)": _median_ms([scipy_chunks] * 3),
                    "tiledbsoma": _median_ms([theirs] * 2),
                }
            layout = zarr.open_group(store, mode="r")[f"layouts/axis{axis}"]
            decode = partial(lambda g: [g[n][:] for n in ("data", "indices", "indptr")], layout)
            results[f"sum along axis {other}"]["zarr decoding the layout alone"] = _median_ms(
                [decode] * 3
            )
            print(f"sum along axis {other}", results[f"sum along axis {other}"], flush=True)
    tiles.close()
    return results


def _block_sums(x: Any, axis: int) -> Any:
    """A sum over a dask array of scipy chunks, block by block (scipy has no ``keepdims``)."""
    import dask

    parts = dask.compute(
        *[dask.delayed(lambda b: b.sum(axis=axis))(b) for b in x.to_delayed().ravel()]
    )
    return parts


def _soma_sum(array: Any, axis: int) -> Any:
    """What a SOMA user does for a sum: stream every table and add by coordinate."""
    keep = 1 - axis
    total = np.zeros(array.shape[keep])
    for table in array.read().tables():
        at, values = table[f"soma_dim_{keep}"].to_numpy(), table["soma_data"].to_numpy()
        total += np.bincount(at, weights=values, minlength=total.size)
    return total


# --------------------------------------------------------------------------------------------
# The driver


def _peak_rss(process: subprocess.Popen[bytes]) -> tuple[int, int]:
    """Poll the process tree until it exits: its largest summed RSS, and the largest RSS of any
    one child (a cluster worker), in bytes."""
    peak = worker = 0
    parent = psutil.Process(process.pid)
    while process.poll() is None:
        try:
            children = [p.memory_info().rss for p in parent.children(recursive=True)]
            peak = max(peak, parent.memory_info().rss + sum(children))
            worker = max(worker, *children, 0)
        except psutil.Error:
            pass
        time.sleep(0.02)
    return peak, worker


def _run_child(args: list[str]) -> tuple[dict[str, Any], tuple[int, int]]:
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(
            [sys.executable, __file__, *args], stdout=out, stderr=subprocess.DEVNULL
        )
        peak = _peak_rss(process)
        out.seek(0)
        text = out.read().decode()
    if process.returncode:
        raise RuntimeError(f"{args} failed with {process.returncode}: {text[-2000:]}")
    return json.loads(text.strip().splitlines()[-1]), peak


def _make_input(cache: Path, cells: int, genes: int) -> int:
    import dask

    from sporadik_dask.synthetic import counts_matrix

    if (cache / "meta.json").exists():
        return int(json.loads((cache / "meta.json").read_text())["nnz"])
    cache.mkdir(parents=True, exist_ok=True)
    blocks = dask.compute(*counts_matrix(cells=cells, genes=genes).to_delayed().ravel())
    from sporadik_dask.synthetic import ROWS_PER_CHUNK

    rows = np.concatenate([b.coords[0] + i * ROWS_PER_CHUNK for i, b in enumerate(blocks)])
    np.save(cache / "rows.npy", rows.astype(np.int64))
    np.save(cache / "cols.npy", np.concatenate([b.coords[1] for b in blocks]).astype(np.int64))
    np.save(cache / "data.npy", np.concatenate([b.data for b in blocks]))
    meta = {"cells": cells, "genes": genes, "nnz": int(rows.size)}
    (cache / "meta.json").write_text(json.dumps(meta))
    return int(rows.size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["small", "full"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--writers", nargs="+", default=WRITERS, choices=WRITERS)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sporadik-bench")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, name, cache = args.child
        if kind == "write":
            out = Path(cache) / f"{name}.zarr"
            shutil.rmtree(out, ignore_errors=True)
            seconds = _write(name, Path(cache), out)
            print(json.dumps({"seconds": seconds, "bytes": _size_on_disk(out)}))
        else:
            print(json.dumps(_reads(Path(cache))))
        return

    started = time.perf_counter()
    results = {}
    for size_name in args.sizes:
        size = SIZES[size_name]
        cache = args.work / size_name
        nnz = _make_input(cache, **size)
        writes: dict[str, list[dict[str, float]]] = {name: [] for name in args.writers}
        for _ in range(args.repeats):  # interleaved, so drift on a noisy machine hits all alike
            for name in args.writers:
                result, (peak, worker) = _run_child(["--child", "write", name, str(cache)])
                writes[name].append({**result, "peak": peak, "worker": worker})
                print(f"{size_name} {name}: {result['seconds']:.2f} s, {peak / 2**30:.2f} GiB")
        for needed in ("ours-threaded", "anndata", "tiledbsoma"):
            if not (cache / f"{needed}.zarr").exists():
                _run_child(["--child", "write", needed, str(cache)])
        reads, _ = _run_child(["--child", "read", "-", str(cache)])
        results[size_name] = {"size": size, "nnz": nnz, "writes": writes, "reads": reads}
    minutes = (time.perf_counter() - started) / 60
    _report(args, results, minutes)
    _plot(results, args.output.parent)


def _report(args: argparse.Namespace, results: dict[str, Any], minutes: float) -> None:
    command = (
        f".venv/bin/python benchmarks/run.py --sizes {' '.join(args.sizes)} "
        f"--repeats {args.repeats}"
    )
    lines = [
        "# Benchmarks",
        "",
        f"Made by `{command}` on {time.strftime('%Y-%m-%d')} in {minutes:.0f} minutes, "
        f"{platform.machine()} with {os.cpu_count()} cores and "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()} "
        '(the contenders\' packages: `pip install -e ".[bench]"`).',
        "",
        "Each writer runs in its own process, interleaved across repeats; wall time is of the work "
        "alone (the input, already in memory as COO columns, is not timed); *peak RSS* is the "
        "largest summed RSS of the process tree (input and cluster workers included); *x floor* "
        "is a writer's minimum over the floor's in the same run, the floor being zarr writing "
        "the six already-sorted arrays (CSR and CSC) on one thread. *anndata* builds CSR with "
        "scipy, writes it with `write_elem`, converts to CSC and writes that; *tiledbsoma* "
        "ingests the COO columns into a `SparseNDArray`, which TileDB sorts and tiles in 2-D.",
        "",
        "![write time and memory](benchmarks-writes.png)",
        "",
        "![read times](benchmarks-reads.png)",
        "",
    ]
    for result in results.values():
        size, writes = result["size"], result["writes"]
        floor = min(run["seconds"] for run in writes["floor"]) if "floor" in writes else None
        lines += [
            f"## {result['nnz'] / 1e6:.1f} M nonzeros ({size['cells']:,} cells x "
            f"{size['genes']:,} genes, float32)",
            "",
            "### Writing both layouts",
            "",
            "| writer | min s | median s | x floor (min) | peak RSS GiB | largest worker GiB "
            "| on disk MiB |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, runs in writes.items():
            seconds = [run["seconds"] for run in runs]
            ratio = f"{min(seconds) / floor:.2f}" if floor else "-"
            worker = max(run["worker"] for run in runs)
            lines.append(
                f"| {name} | {min(seconds):.2f} | {statistics.median(seconds):.2f} | {ratio} | "
                f"{max(run['peak'] for run in runs) / 2**30:.2f} | "
                f"{f'{worker / 2**30:.2f}' if worker else '-'} | "
                f"{runs[-1]['bytes'] / 2**20:,.0f} |"
            )
        readers = [*READERS, XARRAY_SUM, "zarr decoding the layout alone"]
        lines += [
            "",
            "### Reading",
            "",
            "Median milliseconds. Ours: `xr.open_dataset(..., engine='sporadik')` then "
            "`.isel(...).data` (a `sparse.COO`), and `from_sporadik(store, axis=k, "
            "format='gcxs').sum(...)` for sums (and, in its own column, the xarray route: "
            "`open_dataset(..., chunks={})` then `.sum(dim, skipna=False)`, chunks of `sparse.COO` "
            "reduced by `sparse`); the reference: `slice_at` / `slices_at` / "
            "`slices_over`; anndata: `read_elem_lazy` of the CSR (axis 0) or CSC (axis 1) group, "
            "indexed and computed; TileDB-SOMA: `read(coords=...).tables().concat()`, and for "
            "sums every table streamed and added with `np.bincount`.",
            "",
            "| read | " + " | ".join(readers) + " |",
            "|---|" + "---|" * len(readers),
        ]
        for case, by_reader in result["reads"].items():
            cells = [f"{by_reader[r]:.1f}" if r in by_reader else "-" for r in readers]
            lines.append(f"| {case} | " + " | ".join(cells) + " |")
        lines.append("")
    kept = ""
    if args.output.exists() and DISCUSSION in args.output.read_text():
        kept = DISCUSSION + args.output.read_text().split(DISCUSSION, 1)[1]
    args.output.write_text("\n".join(lines) + ("\n" + kept if kept else ""))
    print(f"wrote {args.output}")


def _plot(results: dict[str, Any], docs: Path) -> None:
    """Two figures: writes (time as a ratio to the floor, and peak memory) and reads."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(results)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    writers = list(next(iter(results.values()))["writes"])
    width = 0.8 / len(sizes)
    for i, size_name in enumerate(sizes):
        writes = results[size_name]["writes"]
        floor = min(run["seconds"] for run in writes["floor"])
        label = f"{results[size_name]['nnz'] / 1e6:.1f} M nonzeros"
        at = np.arange(len(writers)) + i * width
        ratio = [min(r["seconds"] for r in writes[w]) / floor for w in writers]
        peak = [max(r["peak"] for r in writes[w]) / 2**30 for w in writers]
        axes[0].barh(at, ratio, height=width, label=label)
        axes[1].barh(at, peak, height=width, label=label)
    for ax, title in zip(axes, ["write time, x zarr floor (min)", "peak RSS, GiB"], strict=True):
        ax.set_yticks(np.arange(len(writers)) + width * (len(sizes) - 1) / 2, writers)
        ax.invert_yaxis()
        ax.set_title(title)
        ax.legend()
    axes[0].axvline(1, color="k", lw=0.8)
    fig.tight_layout()
    fig.savefig(docs / "benchmarks-writes.png", dpi=110)
    plt.close(fig)

    largest = results[sizes[-1]]
    cases = list(largest["reads"])
    readers = [*READERS, "zarr decoding the layout alone"]
    fig, ax = plt.subplots(figsize=(12, 5))
    width = 0.8 / len(readers)
    for i, reader in enumerate(readers):
        values = [largest["reads"][case].get(reader, np.nan) for case in cases]
        ax.bar(np.arange(len(cases)) + i * width, values, width=width, label=reader)
    ax.set_xticks(
        np.arange(len(cases)) + width * (len(readers) - 1) / 2, cases, rotation=25, ha="right"
    )
    ax.set_yscale("log")
    ax.set_ylabel("median ms (log)")
    ax.set_title(f"reads at {largest['nnz'] / 1e6:.1f} M nonzeros")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(docs / "benchmarks-reads.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
