"""The ``sporadik-dask`` command: demo, info, validate, convert.

A user's mistake is one clear line on stderr and exit status 2, never a traceback; the line
names the command's flags (``--overwrite``), not the Python arguments behind them.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sporadik_dask.cli.inputs import is_sporadik, open_input, root_attributes, staging_directory
from sporadik_dask.format.errors import AbsentChunkWarning, SporadikError
from sporadik_dask.store.describe import StoreDescription, describe
from sporadik_dask.write.store_write import StoreWrite

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


def _info(args: argparse.Namespace) -> None:
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


def _validate(args: argparse.Namespace) -> int:
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
            print(f"sporadik-dask: invalid: {_in_flags(_one_line(invalid))}", file=sys.stderr)
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


def _convert(args: argparse.Namespace) -> None:
    from sporadik_dask.store.codecs import check_codecs
    from sporadik_dask.write.targets import check_target
    from sporadik_dask.write.writer import add_axis, to_sporadik

    _check_flags(args)
    codecs = _codecs(args.codecs)
    check_codecs(codecs)
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
                description = _reported(args, write, progress, f"layout axis{axis} of {args.input}")
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
                    overwrite=args.overwrite,
                    compute=False,
                    storage_options=options,
                )
                try:
                    description = _reported(args, write, progress, str(args.output))
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


def _reported(args: argparse.Namespace, write: Any, progress: Any, what: str) -> Any:
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


def _demo(args: argparse.Namespace) -> None:
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
    print(
        f"with chunks={{}}: a dask array, chunks {chunked.data.chunksize} of "
        f"{type(chunked.data._meta).__name__}; a sum per cell gives a "
        f"{type(per_cell.data).__name__} {per_cell.shape}, {'equal' if same else 'NOT equal'} "
        "to the totals per cell"
    )


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as bad:
        raise argparse.ArgumentTypeError(f"not JSON ({bad}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"a JSON object is needed, not {text!r}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


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


def _length(text: str) -> int | None:
    """An axis length, or None (for an axis of names, whose length its names decide)."""
    return None if text.lower() == "none" else _positive(text)


def _parser() -> argparse.ArgumentParser:
    from sporadik_dask import __version__

    parser = argparse.ArgumentParser(
        prog="sporadik-dask", description="Write, inspect and check sporadik sparse stores."
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}", help="print the version"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="build a store with dask, open it with xarray")
    demo.add_argument(
        "--output",
        default="demo.zarr",
        help="where to write (default demo.zarr); a store already there is replaced, anything "
        "else is refused",
    )
    demo.add_argument("--cells", type=_positive, default=40_000, help="rows (default 40000)")
    demo.add_argument("--genes", type=_positive, default=5_000, help="columns (default 5000)")
    demo.set_defaults(run=_demo)

    info = commands.add_parser("info", help="what a store says about itself")
    info.add_argument("store", help="a store's path or URL (s3://bucket/prefix)")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(run=_info)

    check = commands.add_parser("validate", help="every check, including those reading data")
    check.add_argument("store", help="a store's path or URL (s3://bucket/prefix)")
    check.add_argument(
        "--allow-absent-chunks",
        action="store_true",
        help="warn, rather than fail, on absent chunk objects the layout does not prove to be "
        "zeros (for a store known to hold stored zeros)",
    )
    check.set_defaults(run=_validate)

    convert = commands.add_parser(
        "convert",
        help="write a store from AnnData, 10x, a table, .npz or a store",
        description="Write every layout of a store from an AnnData .h5ad file or .zarr store, a "
        "10x matrix directory, a Parquet or CSV coordinate table, a scipy .npz file, or an "
        "existing store (whose missing layouts are added). OUTPUT must not exist, be an empty "
        "directory, or (with --overwrite) be a sporadik store; nothing else is ever replaced.",
    )
    convert.add_argument("input", help="the file, directory, store or URL to read")
    convert.add_argument(
        "output", help="where to write the store (the same as INPUT to add layouts to a store)"
    )
    convert.add_argument(
        "--columns", nargs="+", help="a table's coordinate columns, one per axis, in axis order"
    )
    convert.add_argument("--values", help="a table's value column (default: each row counts 1)")
    convert.add_argument(
        "--shape",
        type=_length,
        nargs="+",
        help="axis lengths, for integer coordinate columns (None for a column of names)",
    )
    convert.add_argument(
        "--staging",
        help="where to stream gzip'd or Matrix Market input (default: beside OUTPUT)",
    )
    convert.add_argument("--axes", type=int, nargs="+", help="layouts to write (default all)")
    convert.add_argument("--chunk", type=_positive, help="elements per zarr chunk")
    convert.add_argument(
        "--shard",
        type=_positive,
        help="elements per object: many chunks in one sharded object (e.g. 16777216, 64 MiB of "
        "4-byte values); default one object per chunk",
    )
    convert.add_argument(
        "--byte-addressable",
        action="store_true",
        help="one uncompressed zarr chunk per array, for readers that fetch byte ranges",
    )
    convert.add_argument(
        "--codecs",
        nargs="+",
        metavar="CHAIN",
        help="codecs of every array (zstd, the default; blosc-zstd, the fewest bytes; blosc-lz4, "
        "the fastest decode), or NAME=CHAIN per array (data=blosc-lz4 indices=blosc-zstd)",
    )
    convert.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a sporadik store at OUTPUT (never anything else)",
    )
    convert.set_defaults(run=_convert)

    for command in (info, check, convert):
        command.add_argument(
            "--storage-options",
            type=_json_object,
            help="a JSON object of fsspec options for s3:// and other URLs, e.g. "
            '\'{"anon": true}\' or \'{"endpoint_url": "http://localhost:9000"}\'',
        )
    for command in (demo, convert):
        command.add_argument("--scheduler", help="a dask.distributed scheduler address")
    for command in (demo, check, convert):
        command.add_argument("--quiet", action="store_true", help="no progress output")
    return parser


#: Python arguments named in messages, and the flags that set them here.
FLAGS: dict[str, str | Callable[[re.Match[str]], str]] = {
    r"\bshape=\(([^)]*)\)": lambda found: (
        "--shape " + " ".join(part.strip() for part in found.group(1).split(",") if part.strip())
    ),
    r"\boverwrite=True\b": "--overwrite",
    r"\bbyte_addressable=True\b": "--byte-addressable",
    r"\bstorage_options\b": "--storage-options",
    r"\b(shape|columns|values|chunk|shard|axes|codecs)=(?=[\s:;,.)]|$)": r"--\1",
    r"\b(shape|columns|values|chunk|shard|axes|codecs)=": r"--\1 ",
}


def _in_flags(message: str) -> str:
    """``message`` with the Python arguments it names spelled as this command's flags."""
    for pattern, flag in FLAGS.items():
        message = re.sub(pattern, flag, message)
    return message


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush into a closed pipe is quiet."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status.

    0 done; 1 ``validate`` found the store invalid; 2 refused (one line on stderr); 130
    interrupted; 141 stdout closed early (``| head``).
    A traceback means a fault in this package, not the user's.
    """
    args = _parser().parse_args(argv)
    shown = warnings.formatwarning
    warnings.formatwarning = _one_line_warning
    try:
        return _run(args)
    finally:
        warnings.formatwarning = shown


def _run(args: argparse.Namespace) -> int:
    try:
        status = args.run(args) or 0
        sys.stdout.flush()
    except KeyboardInterrupt:
        committed = getattr(args, "committed", [])
        print(
            f"sporadik-dask: interrupted; {' and '.join(committed)} committed, complete"
            if committed
            else "sporadik-dask: interrupted; nothing was committed",
            file=sys.stderr,
        )
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 141
    except OSError as error:
        print(f"sporadik-dask: {_os_error_line(error, args)}", file=sys.stderr)
        return 2
    except (SporadikError, EOFError) as error:
        print(f"sporadik-dask: {_in_flags(_one_line(error))}", file=sys.stderr)
        return 2
    except Exception as error:
        if isinstance(error, _damaged_input_errors()) and getattr(args, "input", None):
            print(
                f"sporadik-dask: {args.input} cannot be read ({_one_line(error)}); a truncated "
                "or damaged file looks like this. Copy or write it again.",
                file=sys.stderr,
            )
            return 2
        if not isinstance(error, _object_store_errors()):
            raise
        print(f"sporadik-dask: {_one_line(error)} ({_object_store_advice(error)})", file=sys.stderr)
        return 2
    return int(status)


#: Errors of the file system a shell user acts on, by errno: what happened, in plain words.
_FILE_SYSTEM = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
}


def _os_error_line(error: OSError, args: argparse.Namespace) -> str:
    """An ``OSError`` as one line: a full disk, a quota or a permission named in plain words with
    the path it struck (the file's, or the output's when the error names none), and what to do.

    Python's own text says "[Errno 28] No space left on device" and, where zarr writes a chunk
    through a stream, no path: a user with several disks cannot tell which one filled."""
    cause = _FILE_SYSTEM.get(error.errno or 0)
    if isinstance(error, SporadikError) or cause is None:
        return _in_flags(_one_line(error))
    where = error.filename or getattr(args, "output", None) or getattr(args, "store", None)
    at = f" at {where}" if where else ""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        todo = (
            "nothing was committed; free space there, or write elsewhere, and run again "
            "(with --overwrite to replace what this run left)"
        )
    else:
        todo = "write where you may, or ask for access"
    return f"{cause}{at} ({error.strerror or error}); {todo}"


def _one_line_warning(message: Any, category: type[Warning], *_: Any, **__: Any) -> str:
    """A warning as a shell user reads it: what, not which line of which module raised it."""
    return f"sporadik-dask: {category.__name__}: {message}\n"


def _damaged_input_errors() -> tuple[type[BaseException], ...]:
    """What the readers of input files raise on a file cut short or damaged: a zip archive's
    (``.npz``), Arrow's (Parquet, CSV) and pandas' parser's, when they are loaded."""
    import zipfile

    arrow = sys.modules.get("pyarrow.lib")
    pandas = sys.modules.get("pandas.errors")  # a CSV row of too many or too few fields
    return (
        zipfile.BadZipFile,
        *([arrow.ArrowInvalid] if arrow is not None else []),
        *([pandas.ParserError] if pandas is not None else []),
    )


def _object_store_errors() -> tuple[type[BaseException], ...]:
    """The object-store client's own errors (no credentials, a bad endpoint), when loaded; s3fs
    lets botocore's through, where other failures arrive as an ``OSError``."""
    botocore = sys.modules.get("botocore.exceptions")
    if botocore is None:
        return ()
    return (botocore.BotoCoreError, botocore.ClientError)


def _object_store_advice(error: BaseException) -> str:
    """What to do about an object-store client's error: a server not reached is an outage or a
    wrong endpoint, never a credential to set."""
    botocore = sys.modules.get("botocore.exceptions")
    unreachable = () if botocore is None else (
        botocore.EndpointConnectionError, botocore.ConnectTimeoutError, botocore.ReadTimeoutError
    )  # fmt: skip
    if isinstance(error, unreachable):
        return (
            "the object store did not answer: it is down or unreachable from here, or the "
            "endpoint_url in --storage-options is wrong; try again when it answers"
        )
    return (
        "reaching the object store: set its credentials, or give them, an endpoint or anon with "
        "--storage-options"
    )


def _one_line(error: BaseException) -> str:
    message = " ".join(str(error).split())
    if isinstance(error, SporadikError):
        return message
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
