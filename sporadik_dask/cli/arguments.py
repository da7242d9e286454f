"""The command line's parsing: each command, its flags and their help, and the flags' types."""

from __future__ import annotations

import argparse
import json
from typing import Any

from sporadik_dask.cli.commands import run_convert, run_demo, run_info, run_validate

__all__ = [
    "parser",
]


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


def _length(text: str) -> int | None:
    """An axis length, or None (for an axis of names, whose length its names decide)."""
    return None if text.lower() == "none" else _positive(text)


def parser() -> argparse.ArgumentParser:
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
    demo.set_defaults(run=run_demo)

    info = commands.add_parser("info", help="what a store says about itself")
    info.add_argument("store", help="a store's path or URL (s3://bucket/prefix)")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(run=run_info)

    check = commands.add_parser("validate", help="every check, including those reading data")
    check.add_argument("store", help="a store's path or URL (s3://bucket/prefix)")
    check.add_argument(
        "--allow-absent-chunks",
        action="store_true",
        help="warn, rather than fail, on absent chunk objects the layout does not prove to be "
        "zeros (for a store known to hold stored zeros)",
    )
    check.set_defaults(run=run_validate)

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
        "--dtype",
        help="store the values as smallest-integer (the narrowest integer dtype holding every "
        "value: uint8 or uint16 for most counts) or a named integer dtype (uint16); every value "
        "must be a whole number it holds, or nothing is written (default: the input's dtype)",
    )
    convert.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a sporadik store at OUTPUT (never anything else)",
    )
    convert.set_defaults(run=run_convert)

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
