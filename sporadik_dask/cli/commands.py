"""What each command does: demo, info, validate, convert; its output and progress."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sporadik_dask.cli.inputs import is_sporadik, open_input, root_attributes, staging_directory
from sporadik_dask.cli.messages import in_flags, one_line
from sporadik_dask.format.errors import AbsentChunkWarning, SporadikError
from sporadik_dask.store.describe import StoreDescription, describe
from sporadik_dask.write.store_write import StoreWrite

__all__ = [
    "Progress",
    "reported",
    "run_convert",
    "run_demo",
    "run_info",
    "run_validate",
]


Progress = Callable[[Any], Any]


@contextlib.contextmanager
def _running(scheduler: str | None, quiet: bool) -> Iterator[Progress]:
    """Where the work runs (a dask.distributed address, or threads here), and a function that
    computes a pending write with a progress bar on a terminal."""
    show = not quiet and sys.stderr.isatty()
    with contextlib.ExitStack() as stack:
        if scheduler:
            from distributed import Client

            try:
                client = stack.enter_context(Client(scheduler))
            except OSError as unreachable:
                raise SporadikError(
                    f"Cannot reach the dask scheduler at {scheduler!r} ({unreachable}); check "
                    "the address (tcp://host:8786) and that the scheduler is running."
                ) from None

            def on_cluster(write: Any) -> Any:
                if not isinstance(write, StoreWrite):  # nothing left to write
                    return write
                futures = write.futures(client)
                if show:
                    from distributed import progress

                    progress(futures)
                write.wait(client, futures)
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


def _summary(description: StoreDescription, stored: dict[str, dict[str, int]]) -> dict[str, Any]:
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
                "shards": dict(layout.shards) if layout.shards else None,
                "byte_addressable": layout.byte_addressable,
                "has_maxima": layout.has_maxima,
                "codecs": dict(layout.codecs),
                "bytes_per_value": {
                    name: round(size / max(layout.nnz, 1), 3)
                    for name, size in stored[layout.path].items()
                },
            }
            for layout in description.layouts.values()
        ],
    }


def run_info(args: argparse.Namespace) -> None:
    from sporadik_dask.store.describe import open_store

    opened = open_store(args.store, storage_options=args.storage_options)
    description = opened.description
    stored = {  # the bytes of each array's objects, zarr.json included: one listing each
        layout.path: {
            name: array.nbytes_stored()
            for name, array in opened.layout_arrays(layout).items()
            if name in ("data", "indices", "indptr")
        }
        for layout in description.layouts.values()
    }
    summary = _summary(description, stored)
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    shape = " x ".join(str(s) for s in description.shape)
    print(f"{description.location}: sporadik spec {description.spec}, complete")
    print(f"  array   {shape}, {description.dtype}, {description.nnz:,} values")
    for layout in summary["layouts"]:
        extras = ["byte addressable" if layout["byte_addressable"] else "chunked"]
        if layout["shards"]:
            extras.append(f"shards {layout['shards']}")
        extras.append("maxima" if layout["has_maxima"] else "no maxima")
        print(
            f"  {layout['path']:<14} axis {layout['indexed_axis']} contiguous, "
            f"index_order {layout['index_order']}, {layout['encoding']}, "
            f"chunks {layout['chunks']}, {', '.join(extras)}"
        )
        per_value = layout["bytes_per_value"]
        print(
            f"  {'':<14} "
            + ", ".join(
                f"{name} {chain} {per_value[name]:.2f} B/value"
                for name, chain in layout["codecs"].items()
            )
            + f"; {sum(per_value.values()):.2f} bytes per value in all"
        )


def run_validate(args: argparse.Namespace) -> int:
    """0 for a valid store; 1, with the first failed check on stderr, for one that is not."""
    from sporadik_dask.format.errors import StoreNotFoundError
    from sporadik_dask.read.validate import Absent, validate

    absent: Absent = "warn" if args.allow_absent_chunks else "error"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AbsentChunkWarning)
        try:
            description = validate(args.store, storage_options=args.storage_options, absent=absent)
        except StoreNotFoundError:
            raise
        except SporadikError as invalid:
            print(f"sporadik-dask: invalid: {in_flags(one_line(invalid))}", file=sys.stderr)
            return 1
    for warning in caught:
        print(f"sporadik-dask: warning: {warning.message}", file=sys.stderr)
    _say(
        args.quiet,
        f"{description.location}: valid ({len(description.layouts)} layouts, "
        f"{description.nnz:,} values, every check passed)",
    )
    return 0


def _check_flags(args: argparse.Namespace) -> None:
    """Refuse flags that contradict each other or the input, before anything is read."""
    from sporadik_dask.write.tables import is_table

    if args.byte_addressable and (args.chunk or args.shard):
        flag = "--chunk" if args.chunk else "--shard"
        raise SporadikError(
            f"{flag} and --byte-addressable contradict each other: a byte-addressable array is "
            "one uncompressed chunk. Give one of them."
        )
    repeated = sorted({c for c in args.columns or () if list(args.columns).count(c) > 1})
    if repeated:
        raise SporadikError(
            f"--columns names {', '.join(map(repr, repeated))} more than once: each axis needs "
            "a column of its own, and one column on two axes would write only a diagonal."
        )
    if is_table(args.input) and not args.columns:
        raise SporadikError(
            f"{args.input} is a table: say which columns hold the coordinates with "
            "--columns (one per axis) and, unless each row counts one, --values."
        )
    if not is_table(args.input) and (args.columns or args.values or args.shape):
        raise SporadikError("--columns, --values and --shape apply to Parquet and CSV tables only.")


def run_convert(args: argparse.Namespace) -> None:
    from sporadik_dask.planning.dtypes import check_dtype_option
    from sporadik_dask.store.codecs import check_codecs
    from sporadik_dask.write.targets import check_target
    from sporadik_dask.write.writer import add_axis, to_sporadik

    _check_flags(args)
    codecs = _codecs(args.codecs)
    check_codecs(codecs)
    check_dtype_option(args.dtype)
    started = time.perf_counter()
    axes = tuple(args.axes) if args.axes else None
    options = args.storage_options
    attributes = root_attributes(args.input, options)
    with _running(args.scheduler, args.quiet) as progress:
        if attributes is not None and is_sporadik(attributes):
            if args.output.rstrip("/") != args.input.rstrip("/"):
                raise SporadikError(
                    "To add layouts to an existing store, give it as both INPUT and OUTPUT; "
                    "copying a store is a job for the object store's own tools."
                )
            present = describe(args.input, storage_options=options)
            if args.dtype:
                raise SporadikError(
                    f"--dtype applies to a new store: a layout added to {args.input} holds its "
                    f"values as they are stored there ({present.dtype}). Leave --dtype out."
                )
            wanted = axes or range(present.rank)
            if all(axis in present.layouts for axis in wanted):
                _say(
                    args.quiet,
                    f"{args.input} has layouts {sorted(present.layouts)} already; nothing to "
                    "write (--axes names others to add).",
                )
                return
            for axis in wanted:
                write = add_axis(
                    args.input,
                    axis,
                    chunk=args.chunk,
                    shard=args.shard,
                    byte_addressable=args.byte_addressable,
                    codecs=codecs,
                    compute=False,
                    storage_options=options,
                )
                description = reported(args, write, progress, f"layout axis{axis} of {args.input}")
        else:
            target = check_target(
                args.output, overwrite=args.overwrite, storage_options=options, inputs=[args.input]
            )
            with staging_directory(args) as staging:
                write = to_sporadik(
                    open_input(args, staging, attributes),
                    args.output,
                    axes=axes,
                    chunk=args.chunk,
                    shard=args.shard,
                    byte_addressable=args.byte_addressable,
                    codecs=codecs,
                    dtype=args.dtype,
                    overwrite=args.overwrite,
                    compute=False,
                    storage_options=options,
                )
                try:
                    description = reported(args, write, progress, str(args.output))
                except BaseException:
                    if target.empty:  # nothing was there: leave nothing, not a torn store
                        write.discard()
                    raise
    assert isinstance(description, StoreDescription)
    _say(
        args.quiet,
        f"wrote {description.location}: {description.nnz:,} values, layouts "
        f"{list(description.indexed_axes)}, in {time.perf_counter() - started:.1f} s",
    )


def reported(args: argparse.Namespace, write: Any, progress: Any, what: str) -> Any:
    """Run ``write``, noting on ``args`` what it committed, even when interrupted after its
    commit went through, so an interrupt is reported as what it left: complete layouts or a
    complete store, not nothing."""
    try:
        description = progress(write)
    except KeyboardInterrupt:
        if isinstance(write, StoreWrite) and write.committed():
            args.committed = [*getattr(args, "committed", []), what]
        raise
    args.committed = [*getattr(args, "committed", []), what]
    return description


def run_demo(args: argparse.Namespace) -> None:
    """Build a store from a generated dask array, open it lazily with xarray, slice each axis."""
    import numpy as np
    import xarray as xr

    from sporadik_dask.synthetic import counts_matrix
    from sporadik_dask.write.targets import check_target
    from sporadik_dask.write.writer import to_sporadik

    check_target(args.output, overwrite=True)  # a store the demo made before, or nothing
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
    largest = tuple(max(sizes) for sizes in chunked.data.chunks)  # either dask model's arrays
    print(
        f"with chunks={{}}: a dask array, chunks {largest} of "
        f"{type(chunked.data._meta).__name__}; a sum per cell gives a "
        f"{type(per_cell.data).__name__} {per_cell.shape}, {'equal' if same else 'NOT equal'} "
        "to the totals per cell"
    )


def _codecs(given: Sequence[str] | None) -> Any:
    """``--codecs``: one chain for every array, or ``NAME=CHAIN`` for each array named."""
    if not given:
        return "zstd"
    if len(given) == 1 and "=" not in given[0]:
        return given[0]
    pairs = [item.partition("=") for item in given]
    bare = [name for name, equals, _ in pairs if not equals]
    if bare:
        raise SporadikError(
            f"--codecs {' '.join(given)}: give one chain for every array, or NAME=CHAIN for "
            f"each (e.g. data=blosc-lz4), not both ({', '.join(map(repr, bare))})."
        )
    return {name: chain for name, _, chain in pairs}
