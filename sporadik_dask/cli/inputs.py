"""What ``convert`` reads: AnnData (.h5ad, .zarr), 10x, Parquet and CSV tables, .npz, a store.

Each input becomes something ``to_sporadik`` takes, read lazily or streamed where its format
allows; inputs that must be streamed before dask can split them go to a staging directory.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sporadik_dask.format.errors import SporadikError

__all__ = ["is_sporadik", "open_input", "root_attributes", "staging_directory"]


def _is_url(location: str) -> bool:
    return "://" in location


def root_attributes(location: str, options: dict[str, Any] | None) -> dict[str, Any] | None:
    """The root attributes of a zarr group (v2 or v3) at ``location``, or None if there is none."""
    if not _is_url(location) and not Path(location).is_dir():
        return None
    import zarr

    try:
        group = zarr.open_group(location, mode="r", storage_options=options)
    except Exception:  # not a zarr group, whatever zarr or the file system says about it
        return None
    return dict(group.attrs)


def open_input(args: argparse.Namespace, staging: Path, attributes: dict[str, Any] | None) -> Any:
    """The array to write from ``args.input``, read lazily or streamed where its format allows."""
    from sporadik_dask.write import tables

    if tables.is_parquet(args.input):
        from sporadik_dask.write.parquet import parquet_source

        return parquet_source(
            args.input, args.columns, args.values, args.shape, staging, args.storage_options
        )
    if tables.is_table(args.input):
        from sporadik_dask.write.sources import source_of

        frame = tables.read_table(
            args.input, args.columns, args.values, staging, args.storage_options
        )
        return source_of(frame, shape=args.shape, columns=args.columns, values=args.values)
    if (attributes or {}).get("encoding-type") == "anndata":
        return _anndata_matrix(args.input, args.storage_options, args.quiet)
    if _is_url(args.input):
        raise SporadikError(
            f"{args.input!r} is not a sporadik store, an AnnData zarr store or a Parquet or CSV "
            "table, the inputs read from an object store; copy a .h5ad, .npz or 10x directory "
            "to a local disk first."
        )
    source = Path(args.input)
    if not source.exists():
        raise SporadikError(f"{args.input} does not exist.")
    if tables.is_10x(source):
        return _tenx_source(tables.read_10x(source, staging))
    if source.suffix == ".npz":
        import scipy.sparse

        try:
            return scipy.sparse.load_npz(source)
        except ValueError as dense:
            if "does not contain a sparse" not in str(dense):
                raise
            raise SporadikError(
                f"{source} holds no scipy sparse matrix (arrays saved by np.savez are not one): "
                "save it with scipy.sparse.save_npz, or convert a dense array from Python with "
                "sporadik_dask.to_sporadik."
            ) from None
    if source.suffix == ".h5ad":
        return _anndata_matrix(args.input, None, args.quiet)
    raise SporadikError(
        f"Cannot tell what {args.input!r} holds: convert reads an AnnData .h5ad file or .zarr "
        "store, a 10x matrix directory, a Parquet or CSV table, a scipy .npz file, or an "
        "existing sporadik store."
    )


def _tenx_source(tenx: Any) -> Any:
    """The staged 10x matrix with barcodes and feature ids as the coordinates of obs and var,
    and the features' names and types as coordinates along var."""
    from dataclasses import replace

    from sporadik_dask.write.sources import Labels, source_of

    source = source_of(tenx.frame, shape=tenx.shape, columns=("obs", "var"), values="value")
    extra = {name: ("var", values) for name, values in tenx.feature_columns.items()}
    labels = Labels(
        name="X",
        dims=("obs", "var"),
        attrs={},
        coords={"obs": tenx.barcodes, "var": tenx.features, **extra},
    )
    return replace(source, labels=labels)


def _anndata_matrix(source: str, options: dict[str, Any] | None, quiet: bool) -> Any:
    """X of an AnnData file as a lazy DataArray with obs and var names as coordinates, and the
    columns of obs and var as coordinates along them; its layers are named, not written."""
    try:
        import anndata
        from anndata.experimental import read_elem_lazy
    except ImportError as missing:
        raise SporadikError(
            "Reading AnnData needs the anndata package: pip install 'sporadik-dask[anndata]'."
        ) from missing
    import xarray as xr

    if source.endswith(".h5ad"):
        import h5py

        try:
            group: Any = h5py.File(source, "r")
        except OSError as unreadable:
            raise SporadikError(
                f"{source} cannot be opened as HDF5 ({unreadable}); a truncated or unfinished "
                ".h5ad file looks like this. Copy or write it again."
            ) from None
    else:
        import zarr

        group = zarr.open_group(source, mode="r", storage_options=options)
    from sporadik_dask.store.labels import frame_coords

    try:
        x = _h5ad_sparse_matrix(source, group["X"])
        if x is None:
            x = read_elem_lazy(group["X"])
        tables = {dim: anndata.io.read_elem(group[dim]) for dim in ("obs", "var")}
    except (KeyError, OSError) as unreadable:
        raise SporadikError(
            f"{source} cannot be read as AnnData ({type(unreadable).__name__}: {unreadable}); "
            "X, obs or var is missing or damaged."
        ) from None
    layers = sorted(group["layers"]) if "layers" in group else []
    if layers and not quiet:
        print(
            f"sporadik-dask: note: {source} also holds layers {', '.join(layers)}; convert "
            "writes X (and obs, var) only.",
            file=sys.stderr,
        )
    coords: dict[str, Any] = {
        dim: table.index.to_numpy().astype(str) for dim, table in tables.items()
    }
    taken = {*coords, "X"}
    for dim, table in tables.items():
        coords.update(frame_coords(table, dim, ("obs", "var"), taken))
    # scipy chunks go to the writer as they are: it reads CSR and CSC through their own arrays
    return xr.DataArray(x, dims=("obs", "var"), coords=coords, name="X")


def _h5ad_sparse_matrix(source: str, x: Any) -> Any:
    """An .h5ad's sparse X read in blocks whose gzip chunks are inflated on every core (h5py
    inflates one at a time), or None for any other X."""
    import h5py

    if not source.endswith(".h5ad") or not isinstance(x, h5py.Group):
        return None
    from sporadik_dask.cli.h5ad import sparse_matrix

    return sparse_matrix(source, x)


@contextlib.contextmanager
def staging_directory(args: argparse.Namespace) -> Iterator[Path]:
    """A directory for inputs that must be streamed before dask can split them, removed after.

    It sits beside the output by default, so workers on the same file system can read it.
    """
    import tempfile

    parent = args.staging
    if parent is None and not _is_url(args.output):
        beside = Path(args.output).absolute().parent
        parent = beside if beside.is_dir() else None
    with tempfile.TemporaryDirectory(prefix=".sporadik-staging-", dir=parent) as directory:
        yield Path(directory)


def is_sporadik(attributes: dict[str, Any]) -> bool:
    """Whether root attributes are a sporadik store's, finished or torn (``describe`` then
    says which)."""
    from sporadik_dask.format.spec import BLOCK_KEY
    from sporadik_dask.store.labels import LABELS_KEY

    return BLOCK_KEY in attributes or LABELS_KEY in attributes
