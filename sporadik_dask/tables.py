"""Files of coordinates read as dask DataFrames: Parquet and CSV tables, 10x Matrix Market.

A file dask can split (Parquet, plain CSV) is read in byte ranges by the workers. A stream it
cannot split (gzip, Matrix Market with its header) is read once, in fixed-size pieces, into
Parquet parts in a staging directory, so no process ever holds more than one piece.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sporadik_dask.errors import SporadikError

__all__ = ["TenX", "read_10x", "read_table"]

#: Rows per staged Parquet part: ~100 MB of pandas columns while a part is being written.
STAGE_ROWS = 2**22
#: Bytes per partition of a CSV dask splits itself.
CSV_BLOCKSIZE = "64MB"
TABLE_SUFFIXES = (".parquet", ".pq", ".csv", ".tsv", ".csv.gz", ".tsv.gz")


def _dataframe() -> Any:
    try:
        import dask.dataframe as dd
    except ImportError as missing:
        raise SporadikError(
            "Reading tables needs dask's DataFrame: pip install 'sporadik-dask[dataframe]'."
        ) from missing
    return dd


def is_table(path: str | Path) -> bool:
    """Whether ``path`` names a Parquet or CSV table by its suffix."""
    return str(path).lower().endswith(TABLE_SUFFIXES)


def read_table(path: str | Path, columns: Sequence[str], values: str | None, staging: Path) -> Any:
    """The coordinate and value columns of a Parquet or CSV table, as a dask DataFrame."""
    dd = _dataframe()
    wanted = [*columns, *([values] if values else [])]
    name = str(path).lower()
    if name.endswith((".parquet", ".pq")):
        return dd.read_parquet(path, columns=wanted)
    sep = "\t" if ".tsv" in name else ","
    if name.endswith(".gz"):
        import pandas as pd

        return _staged(pd.read_csv(path, sep=sep, usecols=wanted, chunksize=STAGE_ROWS), staging)
    return dd.read_csv(path, sep=sep, usecols=wanted, blocksize=CSV_BLOCKSIZE)


def _staged(pieces: Iterator[Any], staging: Path) -> Any:
    """Pandas pieces written as Parquet parts under ``staging``, read back as one DataFrame."""
    staging.mkdir(parents=True, exist_ok=True)
    written = 0
    for written, piece in enumerate(pieces, start=1):
        piece.to_parquet(staging / f"part-{written:06d}.parquet", index=False)
    if not written:
        raise SporadikError(f"Nothing to read: the input staged into {staging} has no rows.")
    return _dataframe().read_parquet(staging)


@dataclass(frozen=True, slots=True)
class TenX:
    """A 10x Genomics matrix directory, read as cells x features."""

    #: Columns ``obs`` (barcode position), ``var`` (feature position) and ``value``.
    frame: Any
    shape: tuple[int, int]
    barcodes: np.ndarray[Any, Any]
    features: np.ndarray[Any, Any]
    #: The features' other columns: ``feature_name`` and, from Cell Ranger 3 on, ``feature_type``
    #: (a pandas Categorical: a few kinds, such as "Gene Expression", repeated).
    feature_columns: dict[str, Any] = field(default_factory=dict)


def _first(directory: Path, *names: str) -> Path:
    for name in names:
        for candidate in (directory / name, directory / f"{name}.gz"):
            if candidate.exists():
                return candidate
    raise SporadikError(
        f"{directory} has no {' or '.join(names)} (plain or .gz); a 10x matrix directory holds "
        "matrix.mtx, barcodes.tsv and features.tsv (genes.tsv before Cell Ranger 3)."
    )


def is_10x(path: str | Path) -> bool:
    """Whether ``path`` is a directory holding a Matrix Market ``matrix.mtx(.gz)``."""
    directory = Path(path)
    return any((directory / name).is_file() for name in ("matrix.mtx", "matrix.mtx.gz"))


def _text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def _header(stream: io.TextIOBase, path: Path) -> tuple[int, int, int, str]:
    """Rows, columns, entries and field of a Matrix Market coordinate file, refusing others."""
    banner = stream.readline().split()
    if len(banner) != 5 or banner[0] != "%%MatrixMarket" or banner[1:3] != ["matrix", "coordinate"]:
        raise SporadikError(
            f"{path} does not start with a '%%MatrixMarket matrix coordinate' banner; only "
            "sparse coordinate Matrix Market files can be read as a 10x matrix."
        )
    field, symmetry = banner[3], banner[4]
    if field not in ("integer", "real", "pattern") or symmetry != "general":
        raise SporadikError(
            f"{path} is a {field} {symmetry} matrix; only integer, real or pattern general "
            "matrices are read (a symmetric file stores half its values)."
        )
    line = stream.readline()
    while line.startswith("%"):
        line = stream.readline()
    rows, columns, entries = (int(n) for n in line.split())
    return rows, columns, entries, field


def read_10x(directory: str | Path, staging: Path) -> TenX:
    """A 10x matrix directory as a DataFrame of (barcode, feature, value), transposed to cells x
    features as AnnData and scanpy hold it; the matrix is streamed into ``staging``."""
    import pandas as pd

    directory = Path(directory)
    matrix = _first(directory, "matrix.mtx")
    barcodes = pd.read_csv(
        _first(directory, "barcodes.tsv"), sep="\t", header=None, dtype=str, keep_default_na=False
    ).iloc[:, 0]
    table = pd.read_csv(
        _first(directory, "features.tsv", "genes.tsv"),
        sep="\t",
        header=None,
        dtype=str,
        keep_default_na=False,
    )
    features = table.iloc[:, 0]
    feature_columns: dict[str, Any] = {}
    if table.shape[1] > 1:
        feature_columns["feature_name"] = table.iloc[:, 1].to_numpy(dtype=str)
    if table.shape[1] > 2:
        feature_columns["feature_type"] = pd.Categorical(table.iloc[:, 2])
    with _text(matrix) as stream:
        n_features, n_barcodes, entries, field = _header(stream, matrix)
        if (n_features, n_barcodes) != (len(features), len(barcodes)):
            raise SporadikError(
                f"{matrix} is {n_features} features x {n_barcodes} barcodes, but the directory "
                f"lists {len(features)} features and {len(barcodes)} barcodes; the names would "
                "land on the wrong rows."
            )
        names = ["var", "obs"] if field == "pattern" else ["var", "obs", "value"]
        value_dtype = {"integer": np.int32, "real": np.float64}.get(field, np.int32)
        pieces = pd.read_csv(
            stream,
            sep=r"\s+",
            header=None,
            names=names,
            dtype={"var": np.int64, "obs": np.int64, "value": value_dtype},
            chunksize=STAGE_ROWS,
        )
        frame = _staged(_one_based(pieces), staging) if entries else None
    if frame is None:
        raise SporadikError(f"{matrix} holds no entries; there is nothing to write.")
    return TenX(
        frame=frame,
        shape=(n_barcodes, n_features),
        barcodes=barcodes.to_numpy(dtype=str),
        features=features.to_numpy(dtype=str),
        feature_columns=feature_columns,
    )


def _one_based(pieces: Iterator[Any]) -> Iterator[Any]:
    for piece in pieces:
        piece["var"] -= 1
        piece["obs"] -= 1
        if "value" not in piece:
            piece["value"] = np.int32(1)
        yield piece[["obs", "var", "value"]]
