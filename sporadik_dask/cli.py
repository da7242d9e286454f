"""The ``sporadik-dask`` command: demo, info, validate, convert.

A user's mistake is one clear line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sporadik_dask.describe import StoreDescription, describe
from sporadik_dask.errors import AbsentChunkWarning, SporadikError
from sporadik_dask.write import StoreWrite

__all__ = ["main"]


Progress = Callable[[Any], Any]


@contextlib.contextmanager
def _running(scheduler: str | None, quiet: bool) -> Iterator[Progress]:
    """Where the work runs (a dask.distributed address, or threads here), and a function that
    computes a pending write with a progress bar on a terminal."""
    show = not quiet and sys.stderr.isatty()
    with contextlib.ExitStack() as stack:
        if scheduler:
            from distributed import Client

            client = stack.enter_context(Client(scheduler))

            def on_cluster(write: Any) -> Any:
                if not isinstance(write, StoreWrite):  # nothing left to write
                    return write
                future = client.compute(write.written())
                if show:
                    from distributed import progress

                    progress(future)
                future.result()
                return write.commit()

            yield on_cluster
            return
        if show:
            from dask.diagnostics import ProgressBar

            stack.enter_context(ProgressBar(out=sys.stderr))
        yield lambda write: write.compute() if isinstance(write, StoreWrite) else write


def _say(quiet: bool, message: str) -> None:
    if not quiet:
        print(message, flush=True)


def _summary(description: StoreDescription) -> dict[str, Any]:
    return {
        "location": description.location,
        "spec": description.spec,
        "shape": list(description.shape),
        "dtype": str(description.dtype),
        "nnz": description.nnz,
        "layouts": [
            {
                "path": layout.path,
                "indexed_axis": layout.indexed_axis,
                "index_order": list(layout.index_order),
                "encoding": layout.encoding,
                "index_dtypes": {k: str(v) for k, v in layout.index_dtypes.items()},
                "chunks": dict(layout.chunks),
                "byte_addressable": layout.byte_addressable,
                "has_maxima": layout.has_maxima,
            }
            for layout in description.layouts.values()
        ],
    }


def _info(args: argparse.Namespace) -> None:
    description = describe(args.store)
    summary = _summary(description)
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    shape = " x ".join(str(s) for s in description.shape)
    print(f"{description.location}: sporadik spec {description.spec}, complete")
    print(f"  array   {shape}, {description.dtype}, {description.nnz:,} values")
    for layout in summary["layouts"]:
        extras = ["byte addressable" if layout["byte_addressable"] else "chunked"]
        extras.append("maxima" if layout["has_maxima"] else "no maxima")
        print(
            f"  {layout['path']:<14} axis {layout['indexed_axis']} contiguous, "
            f"index_order {layout['index_order']}, {layout['encoding']}, "
            f"chunks {layout['chunks']}, {', '.join(extras)}"
        )


def _validate(args: argparse.Namespace) -> None:
    from sporadik_dask.validate import validate

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AbsentChunkWarning)
        description = validate(args.store)
    for warning in caught:
        print(f"sporadik-dask: warning: {warning.message}", file=sys.stderr)
    _say(
        args.quiet,
        f"{description.location}: valid ({len(description.layouts)} layouts, "
        f"{description.nnz:,} values, every check passed)",
    )


def _open_input(args: argparse.Namespace, staging: Path) -> Any:
    """The array to write from ``args.input``, read lazily or streamed where its format allows."""
    from sporadik_dask import tables

    source = Path(args.input)
    if tables.is_table(source):
        if not args.columns:
            raise SporadikError(
                f"{args.input} is a table: say which columns hold the coordinates with "
                "--columns (one per axis) and, unless each row counts one, --values."
            )
        from sporadik_dask.sources import source_of

        frame = tables.read_table(source, args.columns, args.values, staging)
        return source_of(frame, shape=args.shape, columns=args.columns, values=args.values)
    if args.columns or args.values or args.shape:
        raise SporadikError("--columns, --values and --shape apply to Parquet and CSV tables only.")
    if tables.is_10x(source):
        return _tenx_source(tables.read_10x(source, staging))
    if source.suffix == ".npz":
        import scipy.sparse

        return scipy.sparse.load_npz(source)
    if source.suffix == ".h5ad" or (source / ".zattrs").exists() or _is_anndata_zarr(source):
        return _anndata_matrix(source)
    raise SporadikError(
        f"Cannot tell what {args.input!r} holds: convert reads an AnnData .h5ad file or .zarr "
        "store, a 10x matrix directory, a Parquet or CSV table, a scipy .npz file, or an "
        "existing sporadik store."
    )


def _tenx_source(tenx: Any) -> Any:
    """The staged 10x matrix with barcodes and feature ids as the coordinates of obs and var,
    and the features' names and types as coordinates along var."""
    from dataclasses import replace

    from sporadik_dask.sources import Labels, source_of

    source = source_of(tenx.frame, shape=tenx.shape, columns=("obs", "var"), values="value")
    extra = {name: ("var", values) for name, values in tenx.feature_columns.items()}
    labels = Labels(
        name="X",
        dims=("obs", "var"),
        attrs={},
        coords={"obs": tenx.barcodes, "var": tenx.features, **extra},
    )
    return replace(source, labels=labels)


def _is_anndata_zarr(source: Path) -> bool:
    try:
        attributes = json.loads((source / "zarr.json").read_text()).get("attributes", {})
    except (OSError, ValueError):
        return False
    return attributes.get("encoding-type") == "anndata"


def _anndata_matrix(source: Path) -> Any:
    """X of an AnnData file as a lazy DataArray with obs and var names as coordinates, and the
    columns of obs and var as coordinates along them."""
    try:
        import anndata
        from anndata.experimental import read_elem_lazy
    except ImportError as missing:
        raise SporadikError(
            "Reading AnnData needs the anndata package: pip install 'sporadik-dask[anndata]'."
        ) from missing
    import dask.array as da
    import numpy as np
    import sparse
    import xarray as xr

    if source.suffix == ".h5ad":
        import h5py

        group: Any = h5py.File(source, "r")
    else:
        import zarr

        group = zarr.open_group(source, mode="r")
    x = read_elem_lazy(group["X"])
    from sporadik_dask.labels import frame_coords

    tables = {dim: anndata.io.read_elem(group[dim]) for dim in ("obs", "var")}
    coords: dict[str, Any] = {
        dim: table.index.to_numpy().astype(str) for dim, table in tables.items()
    }
    taken = {*coords, "X"}
    for dim, table in tables.items():
        coords.update(frame_coords(table, dim, ("obs", "var"), taken))
    if not isinstance(x._meta, np.ndarray):
        meta = sparse.COO.from_numpy(np.zeros((0, 0), dtype=x.dtype))
        x = x.map_blocks(sparse.COO.from_scipy_sparse, dtype=x.dtype, meta=meta)
    data = da.Array(x.dask, x.name, x.chunks, meta=x._meta)
    return xr.DataArray(data, dims=("obs", "var"), coords=coords, name="X")


def _convert(args: argparse.Namespace) -> None:
    from sporadik_dask.write import add_axis, to_sporadik

    started = time.perf_counter()
    axes = tuple(args.axes) if args.axes else None
    with _running(args.scheduler, args.quiet) as progress:
        if _is_sporadik(args.input):
            if args.output != args.input:
                raise SporadikError(
                    "To add layouts to an existing store, give it as both INPUT and OUTPUT; "
                    "copying a store is a job for the object store's own tools."
                )
            present = describe(args.input)
            for axis in axes or range(present.rank):
                write = add_axis(
                    args.input,
                    axis,
                    chunk=args.chunk,
                    byte_addressable=args.byte_addressable,
                    compute=False,
                )
                description = progress(write)
        else:
            with _staging(args) as staging:
                write = to_sporadik(
                    _open_input(args, staging),
                    args.output,
                    axes=axes,
                    chunk=args.chunk,
                    byte_addressable=args.byte_addressable,
                    overwrite=args.overwrite,
                    compute=False,
                )
                description = progress(write)
    assert isinstance(description, StoreDescription)
    _say(
        args.quiet,
        f"wrote {description.location}: {description.nnz:,} values, layouts "
        f"{list(description.indexed_axes)}, in {time.perf_counter() - started:.1f} s",
    )


@contextlib.contextmanager
def _staging(args: argparse.Namespace) -> Iterator[Path]:
    """A directory for inputs that must be streamed before dask can split them, removed after.

    It sits beside the output by default, so workers on the same file system can read it.
    """
    import tempfile

    parent = args.staging or (Path(args.output).parent if "://" not in args.output else None)
    with tempfile.TemporaryDirectory(prefix=".sporadik-staging-", dir=parent) as directory:
        yield Path(directory)


def _is_sporadik(path: str) -> bool:
    try:
        attributes = json.loads((Path(path) / "zarr.json").read_text()).get("attributes", {})
    except (OSError, ValueError):
        return False
    return "sporadik" in attributes


def _demo(args: argparse.Namespace) -> None:
    """Build a store from a generated dask array, open it lazily with xarray, slice each axis."""
    import numpy as np
    import xarray as xr

    from sporadik_dask.synthetic import counts_matrix
    from sporadik_dask.write import to_sporadik

    x = counts_matrix(cells=args.cells, genes=args.genes, rows_per_chunk=max(args.cells // 8, 1))
    print(f"input: a dask array {x.shape} of sparse.COO chunks, {x.numblocks[0]} blocks")
    array = xr.DataArray(x, dims=("cell", "gene"), name="counts", attrs={"units": "reads"})
    started = time.perf_counter()
    with _running(args.scheduler, args.quiet) as progress:
        description = progress(to_sporadik(array, args.output, overwrite=True, compute=False))
    assert isinstance(description, StoreDescription)
    print(
        f"wrote {args.output}: {description.nnz:,} values, a layout per axis, "
        f"in {time.perf_counter() - started:.2f} s"
    )

    started = time.perf_counter()
    ds = xr.open_dataset(args.output, engine="sporadik")
    counts = ds[next(iter(ds.data_vars))]
    print(f"opened lazily in {1000 * (time.perf_counter() - started):.1f} ms: {counts.dims}")
    rng = np.random.default_rng(0)
    for dim, size in counts.sizes.items():
        picked = np.sort(rng.choice(size, size=min(5, size), replace=False))
        started = time.perf_counter()
        selection = counts.isel({dim: picked}).data
        print(
            f"  {len(picked)} positions along {dim}: {type(selection).__name__} "
            f"{selection.shape}, {selection.nnz:,} values, "
            f"{1000 * (time.perf_counter() - started):.1f} ms"
        )
    detected = counts.sporadik.nnz("gene")
    top = int(detected.argmax("gene"))
    print(f"  most detected gene: position {top}, in {int(detected[top]):,} cells (from indptr)")
    started = time.perf_counter()
    totals = counts.sporadik.totals("gene")
    print(
        f"  total counts per gene: {float(totals.sum()):,.0f} in all, "
        f"{1000 * (time.perf_counter() - started):.1f} ms (values and indptr, no index)"
    )
    chunked = xr.open_dataset(args.output, engine="sporadik", chunks={})[counts.name]
    per_cell = chunked.sum("gene").compute()
    same = np.allclose(per_cell.values, counts.sporadik.totals("cell"))
    print(
        f"with chunks={{}}: a dask array, chunks {chunked.data.chunksize} of "
        f"{type(chunked.data._meta).__name__}; a sum per cell gives a "
        f"{type(per_cell.data).__name__} {per_cell.shape}, {'equal' if same else 'NOT equal'} "
        "to the totals per cell"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sporadik-dask", description="Write, inspect and check sporadik sparse stores."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="build a store with dask, open it with xarray")
    demo.add_argument("--output", default="demo.zarr", help="where to write (default demo.zarr)")
    demo.add_argument("--cells", type=int, default=40_000)
    demo.add_argument("--genes", type=int, default=5_000)
    demo.set_defaults(run=_demo)

    info = commands.add_parser("info", help="what a store says about itself")
    info.add_argument("store")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(run=_info)

    check = commands.add_parser("validate", help="every check, including those reading data")
    check.add_argument("store")
    check.set_defaults(run=_validate)

    convert = commands.add_parser(
        "convert",
        help="write a store from AnnData, 10x, a table, .npz or a store",
        description="Write every layout of a store from an AnnData .h5ad file or .zarr store, a "
        "10x matrix directory, a Parquet or CSV coordinate table, a scipy .npz file, or an "
        "existing store (whose missing layouts are added).",
    )
    convert.add_argument("input")
    convert.add_argument("output")
    convert.add_argument(
        "--columns", nargs="+", help="a table's coordinate columns, one per axis, in axis order"
    )
    convert.add_argument("--values", help="a table's value column (default: each row counts 1)")
    convert.add_argument(
        "--shape", type=int, nargs="+", help="axis lengths, for integer coordinate columns"
    )
    convert.add_argument("--staging", help="where to stream gzip'd or Matrix Market input")
    convert.add_argument("--axes", type=int, nargs="+", help="layouts to write (default all)")
    convert.add_argument("--chunk", type=int, help="elements per zarr chunk")
    convert.add_argument("--byte-addressable", action="store_true")
    convert.add_argument("--overwrite", action="store_true")
    convert.set_defaults(run=_convert)

    for command in (demo, convert):
        command.add_argument("--scheduler", help="a dask.distributed scheduler address")
    for command in (demo, check, convert):
        command.add_argument("--quiet", action="store_true", help="no progress output")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    try:
        args.run(args)
    except (SporadikError, FileNotFoundError) as error:
        print(f"sporadik-dask: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
