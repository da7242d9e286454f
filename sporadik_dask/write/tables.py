"""Files of coordinates read as dask DataFrames: Parquet and CSV tables, 10x Matrix Market.

A file dask can split (Parquet, plain CSV) is read in byte ranges by the workers. A stream it
cannot split (gzip, Matrix Market with its header) is read once, in fixed-size pieces, into
Parquet parts in a staging directory, so no process ever holds more than one piece.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sporadik_dask.format.errors import SporadikError

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


def is_parquet(path: str | Path) -> bool:
    """Whether ``path`` names a Parquet file or directory of files by its suffix."""
    return str(path).lower().rstrip("/").endswith((".parquet", ".pq"))


def read_table(
    path: str | Path,
    columns: Sequence[str],
    values: str | None,
    staging: Path,
    storage_options: dict[str, Any] | None = None,
) -> Any:
    """The coordinate and value columns of a Parquet or CSV table, as a dask DataFrame.

    Columns the table does not have are refused here, naming those it has, rather than by the
    parser once the workers read it.
    """
    dd = _dataframe()
    wanted = [*columns, *([values] if values else [])]
    name = str(path).lower()
    options = {"storage_options": storage_options} if storage_options else {}
    with _reading(path):
        if name.endswith((".parquet", ".pq")):
            frame = dd.read_parquet(path, **options)
            _check_columns(path, wanted, list(frame.columns))
            frame = frame[wanted]
            if frame.head(1, npartitions=1).empty and frame.head(1, npartitions=-1).empty:
                _no_rows(path)
            return frame
        import pandas as pd

        sep = "\t" if ".tsv" in name else ","
        first = pd.read_csv(path, sep=sep, nrows=1, **options)
        _check_columns(path, wanted, list(first.columns))
        if first.empty:
            _no_rows(path)
        if name.endswith(".gz"):
            pieces = pd.read_csv(path, sep=sep, usecols=wanted, chunksize=STAGE_ROWS, **options)
            return _staged(pieces, staging)
        _check_line_end(path, storage_options)
        # pyarrow's parser: pandas' own, given usecols, drops a row's extra fields and fills a
        # short row with NaN, so a malformed line would convert silently
        return dd.read_csv(
            path, sep=sep, usecols=wanted, blocksize=CSV_BLOCKSIZE, engine="pyarrow", **options
        )


def _check_line_end(path: str | Path, storage_options: dict[str, Any] | None) -> None:
    """Refuse a plain text table whose last line has no line end.

    Every writer of CSV (pandas, R, spreadsheets) ends the last row with one; a file cut by a copy
    that did not finish ends mid-row, and a row cut inside its last field (a count of ``1`` where
    ``17`` was written) parses cleanly, so the parser alone would convert a wrong value silently.
    """
    import fsspec

    with fsspec.open(str(path), "rb", **(storage_options or {})) as stream:
        stream.seek(0, io.SEEK_END)
        if stream.tell() == 0:
            return
        stream.seek(-1, io.SEEK_END)
        last = stream.read(1)
    if last not in (b"\n", b"\r"):
        raise SporadikError(
            f"{path} does not end with a line end: its last row may have been cut (a copy that "
            "did not finish), and a row cut inside a number still parses, as a smaller number. "
            "Copy it again; if the file is whole, add the line end (echo >> FILE) and convert."
        )


def _no_rows(path: str | Path) -> None:
    raise SporadikError(
        f"{path} has a header and no rows: there is nothing to write, and a store of no values "
        "would hide that the table came out empty."
    )


def _check_columns(path: str | Path, wanted: Sequence[str], present: Sequence[str]) -> None:
    missing = [column for column in wanted if column not in present]
    if missing:
        raise SporadikError(
            f"{path} has no column {', '.join(map(repr, missing))}; it has "
            f"{', '.join(map(repr, present))}. Check --columns and --values."
        )


@contextlib.contextmanager
def _reading(path: str | Path) -> Iterator[None]:
    """Name ``path`` in what goes wrong reading it: a cut gzip stream, undecodable text, a line
    the parser cannot split; the library's own message alone does not say which file."""
    import pandas as pd

    try:
        yield
    except SporadikError:
        raise
    except (EOFError, zlib.error, gzip.BadGzipFile) as cut:
        raise SporadikError(
            f"{path} ends before its gzip stream does ({cut}): the file is truncated, so its "
            "last values are missing. Copy or download it again."
        ) from cut
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as bad:
        raise SporadikError(f"{path} cannot be read as a table: {bad}") from bad


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


@dataclass(frozen=True, slots=True)
class _Header:
    """The size line and field of a Matrix Market coordinate file."""

    rows: int
    columns: int
    entries: int
    field: str
    #: Lines before the first entry (banner, comments, size line), to name an entry's line.
    lines: int


def _header(stream: io.TextIOBase, path: Path) -> _Header:
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
    line, lines = stream.readline(), 2
    while line.startswith("%"):
        line, lines = stream.readline(), lines + 1
    try:
        rows, columns, entries = (int(n) for n in line.split())
    except ValueError:
        raise SporadikError(
            f"{path}: line {lines} should give rows, columns and entries, and holds {line!r}."
        ) from None
    return _Header(rows, columns, entries, field, lines)


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
    with _reading(matrix), _text(matrix) as stream:
        header = _header(stream, matrix)
        n_features, n_barcodes = header.rows, header.columns
        if (n_features, n_barcodes) != (len(features), len(barcodes)):
            raise SporadikError(
                f"{matrix} is {n_features} features x {n_barcodes} barcodes, but the directory "
                f"lists {len(features)} features and {len(barcodes)} barcodes; the names would "
                "land on the wrong rows."
            )
        names = ["var", "obs"] if header.field == "pattern" else ["var", "obs", "value"]
        pieces = pd.read_csv(  # as floats, so a line cut short is a NaN at a known line
            stream, sep=r"\s+", header=None, names=names, dtype=np.float64, chunksize=STAGE_ROWS
        )
        read = _Entries(matrix, header)
        frame = _staged(read.one_based(pieces), staging) if header.entries else None
        read.check_count()
    if frame is None:
        raise SporadikError(f"{matrix} holds no entries; there is nothing to write.")
    return TenX(
        frame=frame,
        shape=(n_barcodes, n_features),
        barcodes=barcodes.to_numpy(dtype=str),
        features=features.to_numpy(dtype=str),
        feature_columns=feature_columns,
    )


class _Entries:
    """Matrix Market entries made 0-based as they stream past, checked against the header.

    A file cut short (a copy that did not finish) parses cleanly up to its last whole line, so the
    count the header declares is the only sign that values are missing.
    """

    def __init__(self, path: Path, header: _Header) -> None:
        self.path, self.header, self.read = path, header, 0

    def one_based(self, pieces: Iterator[Any]) -> Iterator[Any]:
        """Each piece with 1-based positions made 0-based and a value of 1 for a pattern file."""
        import pandas as pd

        while True:
            try:
                piece = next(pieces)
            except StopIteration:
                return
            except ValueError as bad:  # pandas: a field that is not a number
                raise SporadikError(
                    f"{self.path}: an entry after line {self._line(self.read)} cannot be read "
                    f"({bad}); a line is cut short or holds something other than numbers."
                ) from bad
            cut = np.flatnonzero(piece.isna().any(axis=1).to_numpy())
            if len(cut):
                raise SporadikError(
                    f"{self.path}, line {self._line(self.read + int(cut[0]))}: the entry has "
                    f"fewer than {len(piece.columns)} numbers, or a NaN; the line was cut short "
                    "(a copy that did not finish?) or names no value, so none can be stored."
                )
            self._check_positions(piece["var"].to_numpy(), self.header.rows, "row")
            self._check_positions(piece["obs"].to_numpy(), self.header.columns, "column")
            value_dtype = np.float64 if self.header.field == "real" else np.int32
            if "value" in piece and value_dtype == np.int32:
                self._check_integers(piece["value"].to_numpy())
            self.read += len(piece)
            yield pd.DataFrame(
                {
                    "obs": piece["obs"].to_numpy(np.int64) - 1,
                    "var": piece["var"].to_numpy(np.int64) - 1,
                    "value": piece["value"].to_numpy(value_dtype) if "value" in piece else 1,
                }
            ).astype({"value": value_dtype})

    def _line(self, entry: int) -> int:
        return self.header.lines + entry + 1

    def _check_positions(self, positions: np.ndarray[Any, Any], size: int, what: str) -> None:
        wrong = np.flatnonzero((positions < 1) | (positions > size) | (positions % 1 != 0))
        if len(wrong):
            first = int(wrong[0])
            raise SporadikError(
                f"{self.path}, line {self._line(self.read + first)}: {what} "
                f"{positions[first]:g} is not a whole number in 1..{size}; Matrix Market counts "
                "from 1 up to the size its header declares, so this entry would land on the "
                "wrong cell."
            )

    def _check_integers(self, values: np.ndarray[Any, Any]) -> None:
        limit = np.iinfo(np.int32)
        wrong = np.flatnonzero((values < limit.min) | (values > limit.max) | (values % 1 != 0))
        if len(wrong):
            first = int(wrong[0])
            raise SporadikError(
                f"{self.path}, line {self._line(self.read + first)}: value {values[first]:g} is "
                "not a 32-bit integer, as the header's 'integer' field promises; it would be "
                "stored wrapped or rounded. Declare the field 'real' if that is what it holds."
            )

    def check_count(self) -> None:
        """Refuse a file holding fewer (or more) entries than its header declares."""
        if self.read != self.header.entries:
            raise SporadikError(
                f"{self.path} declares {self.header.entries:,} entries in its header and holds "
                f"{self.read:,}: the file is truncated or was edited, and converting it would "
                "silently drop values. Copy or download it again."
            )
