"""Parquet coordinate tables read by pyarrow, row group by row group, names kept as codes.

A transcript table names each cell and gene by a string, millions of times over. Read through
pandas, every row becomes a Python-visible string, found once to list the names and once more to
look each up; here pyarrow reads a string column as dictionary codes (Parquet stores it that way),
so names are looked up once per split's dictionary, never once per row. The work runs in three
passes, each a dask computation over splits of whole row groups:

1. Read each split; stage its codes (``int32``) and values in ``staging``; return the names its
   dictionaries use. The client unites them: each labelled axis is its sorted distinct names.
2. Map each split's codes to positions among those names, counting-sort its rows by which
   block of positions along the first axis they fall in, and stage them again, so a block reads
   one contiguous slice of each split.
3. A dask array of ``sparse.COO`` blocks: each block adds up repeated cells of its rows (a
   bincount over the block's cells), so the pieces the writer counts and writes hold each cell
   once, and the table is read from Parquet only once, whatever the passes after it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import numpy.typing as npt

from sporadik_dask.format.errors import LayoutError, SporadikError
from sporadik_dask.read.dask_model import from_delayed
from sporadik_dask.write.tables import _check_columns

__all__ = ["Split", "parquet_source", "splits_of"]

#: Rows a split reads at least (whole row groups): ~1 M rows of two codes is 8 MB staged, and a
#: few hundred MB of Arrow strings while pyarrow decodes it, per thread.
SPLIT_ROWS = 2**20
#: Cells one block counts densely at most: an int64 bincount of 64 MB.
BLOCK_CELLS = 2**23
#: Rows one block adds up at most, so a block's staged slices stay a few tens of MB.
BLOCK_ROWS = 2**22


@dataclass(frozen=True, slots=True)
class Split:
    """Whole row groups of one Parquet file, read by one task."""

    #: The file's URL (``file://`` for a local path), opened with fsspec inside the task.
    url: str
    row_groups: tuple[int, ...]
    rows: int


def _filesystem(url: str, options: dict[str, Any] | None) -> tuple[Any, str]:
    import fsspec

    fs, path = fsspec.core.url_to_fs(str(url), **(options or {}))
    return fs, path


def splits_of(path: str | Path, options: dict[str, Any] | None) -> tuple[list[Split], Any]:
    """The splits of a Parquet file or directory of files, and its Arrow schema."""
    import pyarrow.parquet as pq

    fs, root = _filesystem(str(path), options)
    if fs.isdir(root):
        files = sorted(
            found
            for found in fs.find(root)
            if found.lower().endswith((".parquet", ".pq"))
            and not any(part.startswith(("_", ".")) for part in found[len(root) :].split("/"))
        )
    else:
        files = [root]
    if not files:
        raise SporadikError(f"{path} holds no .parquet files; there is nothing to read.")
    splits, schema = [], None
    for file in files:
        with fs.open(file, "rb") as handle:
            metadata = pq.ParquetFile(handle).metadata
        schema = schema or metadata.schema.to_arrow_schema()
        groups: list[int] = []
        rows = 0
        url = fs.unstrip_protocol(file)
        for group in range(metadata.num_row_groups):
            groups.append(group)
            rows += metadata.row_group(group).num_rows
            if rows >= SPLIT_ROWS:
                splits.append(Split(url, tuple(groups), rows))
                groups, rows = [], 0
        if groups:
            splits.append(Split(url, tuple(groups), rows))
    return splits, schema


def _labelled(schema: Any, columns: Sequence[str], values: str | None) -> list[str]:
    """Which coordinate columns hold names; refuses coordinates that are neither names nor
    integers, and values that are not numbers."""
    import pyarrow as pa

    from sporadik_dask.write.sources import check_dtype

    labelled = []
    for axis, name in enumerate(columns):
        kind = schema.field(name).type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            labelled.append(name)
        elif not pa.types.is_integer(kind):
            raise LayoutError(
                f"Column {name!r} (axis {axis}) has type {kind}; coordinates are integers or "
                "names, and rounding would silently move values to other cells."
            )
    if values is not None:
        check_dtype(schema.field(values).type.to_pandas_dtype())
    return labelled


def stage_split(
    index: int,
    split: Split,
    options: dict[str, Any] | None,
    columns: Sequence[str],
    values: str | None,
    labelled: Sequence[str],
    staging: str,
) -> dict[str, Any]:
    """Pass 1: stage one split's codes and values; return the names each labelled column uses.

    A dictionary may hold names no row of the split uses (a writer's fallback pages); those are
    dropped, so an axis holds exactly the names the table uses.
    """
    import pyarrow.parquet as pq

    fs, path = _filesystem(split.url, options)
    wanted = [*columns, *([values] if values else [])]
    with fs.open(path, "rb") as handle:
        file = pq.ParquetFile(handle, read_dictionary=list(labelled))
        table = file.read_row_groups(list(split.row_groups), columns=wanted)
    table = table.unify_dictionaries()
    names = {}
    for column in wanted:
        array = table[column].combine_chunks()
        if array.null_count:
            raise LayoutError(
                f"Column {column!r} holds a missing or unknown label; it names no position. "
                f"Drop those rows first (frame.dropna(subset=[{column!r}]))."
            )
        if column in labelled:
            codes = array.indices.to_numpy()
            used = np.bincount(codes, minlength=len(array.dictionary)) > 0
            kept = np.cumsum(used, dtype=np.int32) - 1
            np.save(_staged(staging, "codes", index, column), kept[codes])
            names[column] = array.dictionary.filter(used)
            _save_names(_staged_names(staging, "names", index, column), names[column])
        else:
            np.save(_staged(staging, "codes", index, column), array.to_numpy())
    return names


def _staged(staging: str, kind: str, index: int, column: str | None = None) -> Path:
    return Path(staging) / f"{kind}-{index:06d}{f'-{column}' if column else ''}.npy"


def _staged_names(staging: str, kind: str, index: int | None, column: str) -> Path:
    """Where names are staged: a split's own (``index``), or an axis's united (None)."""
    return Path(staging) / f"{kind}-{'all' if index is None else f'{index:06d}'}-{column}.arrow"


def _save_names(path: Path, names: Any) -> None:
    """Stage a pyarrow array of names as an Arrow IPC file, read back without a copy."""
    import pyarrow as pa

    table = pa.table({"name": names})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _load_names(path: Path) -> Any:
    import pyarrow as pa

    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all()["name"].combine_chunks()


def bucket_split(
    index: int,
    columns: Sequence[str],
    values: str | None,
    labelled: Sequence[str],
    shape: Sequence[int],
    starts: npt.NDArray[np.int64],
    staging: str,
) -> npt.NDArray[np.int64]:
    """Pass 2: one split's rows as positions, sorted by block, staged; returns where each block's
    rows start in it (and the row count last).

    A split's names are looked up among the axis's united names here, both read from staging:
    handed in by the client, the lookup tables of every split would sit in the graph, which then
    grew with splits x names (190 MiB at 40 M rows and 1 M cells) where it now stays a few KiB.
    Integer coordinates are positions already, and are checked against the shape here, since a
    position past its axis would be counted where it does not exist.
    """
    from sporadik_dask.kernels.sort import sort_by_key

    coords = []
    for axis, column in enumerate(columns):
        codes = np.load(_staged(staging, "codes", index, column))
        if column in labelled:
            own = _staged_names(staging, "names", index, column)
            found = _positions(
                _load_names(_staged_names(staging, "labels", None, column)), _load_names(own)
            )
            own.unlink()
            coords.append(found[codes])
            continue
        size = int(shape[axis])
        if codes.size and (int(codes.min()) < 0 or int(codes.max()) >= size):
            bad = int(codes.min()) if int(codes.min()) < 0 else int(codes.max())
            raise LayoutError(
                f"A coordinate along axis {axis} is {bad}, outside an axis of length {size}; it "
                "would be counted at a position that does not exist and shift every run after "
                "it. Fix the coordinates, or pass the shape they were made for."
            )
        coords.append(codes.astype(np.int64))
    stacked = np.stack(coords)
    data = np.load(_staged(staging, "codes", index, values)) if values else np.empty(0)
    lengths = np.diff(np.append(starts, int(shape[0])))
    block = np.repeat(np.arange(len(starts)), lengths)[stacked[0]]
    counts = np.bincount(block, minlength=len(starts))
    if values:
        stacked, data = sort_by_key(block, counts, stacked, data)
        np.save(_staged(staging, "values", index), data)
    else:
        stacked, _ = sort_by_key(block, counts, stacked, np.empty(block.shape[0], dtype=np.int8))
    np.save(_staged(staging, "rows", index), stacked)
    for column in columns:
        _staged(staging, "codes", index, column).unlink()
    return np.concatenate(([0], np.cumsum(counts)))


def block_of(
    staging: str,
    edges: npt.NDArray[np.int64],
    block: int,
    start: int,
    shape: Sequence[int],
    dtype: npt.DTypeLike,
    with_values: bool,
) -> Any:
    """Pass 3: block ``block``'s rows from every split, each cell once, as a ``sparse.COO``.

    1. Read the block's slice of every split's staged rows (``edges[split]`` says where).
    2. Ravel each row's cell within the block and add up rows naming one cell: a bincount
       when counting rows of a block of at most :data:`BLOCK_CELLS` cells, else a sort.
    3. The cells come out in C order, which the writer's sort then finds already ordered.
    """
    import sparse

    shape = tuple(int(s) for s in shape)
    keys, data = [], []
    for split, bounds in enumerate(edges):
        lo, hi = int(bounds[block]), int(bounds[block + 1])
        if hi == lo:
            continue
        rows = np.load(_staged(staging, "rows", split), mmap_mode="r")[:, lo:hi]
        rows = np.array(rows)
        rows[0] -= start
        keys.append(np.ravel_multi_index(tuple(rows), shape))
        if with_values:
            data.append(np.load(_staged(staging, "values", split), mmap_mode="r")[lo:hi])
    key = np.concatenate(keys) if keys else np.empty(0, dtype=np.int64)
    cells = math.prod(shape)
    if not with_values and cells <= BLOCK_CELLS:
        tally = np.bincount(key, minlength=cells)
        found = np.flatnonzero(tally)
        summed = tally[found].astype(dtype)
    else:
        values = np.concatenate(data) if with_values and data else np.ones(key.shape[0], dtype)
        order = np.argsort(key, kind="stable")
        key, values = key[order], values[order]
        fresh = np.ones(key.shape[0], dtype=bool)
        fresh[1:] = key[1:] != key[:-1]
        first = np.flatnonzero(fresh)
        found = key[first]
        summed = np.add.reduceat(values, first).astype(dtype) if key.size else values[:0]
    coords = np.array(np.unravel_index(found, shape), dtype=np.int64).reshape(len(shape), -1)
    return sparse.COO(coords, summed, shape=shape, has_duplicates=False, sorted=True)


def _block_starts(rows: int, shape: Sequence[int], with_values: bool) -> npt.NDArray[np.int64]:
    """Where each block of positions along the first axis starts: blocks of at most
    :data:`BLOCK_CELLS` cells when counting densely, and about :data:`BLOCK_ROWS` rows."""
    first, rest = int(shape[0]), math.prod(int(s) for s in shape[1:])
    blocks = max(1, -(-rows // BLOCK_ROWS))
    if not with_values and rest:
        blocks = max(blocks, -(-first * rest // BLOCK_CELLS))
    blocks = max(1, min(blocks, first))
    return np.unique(np.linspace(0, first, blocks + 1).astype(np.int64))[:-1]


def parquet_source(
    path: str | Path,
    columns: Sequence[str],
    values: str | None,
    shape: Sequence[int | None] | None,
    staging: Path,
    storage_options: dict[str, Any] | None = None,
) -> Any:
    """A :class:`~sporadik_dask.write.sources.Source` of a Parquet table's coordinate and value
    columns: counts per cell (repeats summed) without ``values``, sums of ``values`` with it.

    Passes 1 and 2 run here, on the active scheduler; the returned source reads what they
    staged in ``staging``, which must outlive the write (and be visible to every worker).
    """
    from sporadik_dask.store.labels import Labels
    from sporadik_dask.write import frame_pieces, sources

    splits, schema = splits_of(path, storage_options)
    _check_columns(path, [*columns, *([values] if values else [])], schema.names)
    rows = sum(split.rows for split in splits)
    if not rows:
        raise SporadikError(
            f"{path} has a header and no rows: there is nothing to write, and a store of no "
            "values would hide that the table came out empty."
        )
    labelled = _labelled(schema, columns, values)
    sources.refuse_positions_without_lengths(shape, tuple(columns), labelled)
    staging.mkdir(parents=True, exist_ok=True)
    where = str(staging)
    stage = dask.delayed(stage_split, pure=True)
    found = dask.compute(
        *[
            stage(i, split, storage_options, tuple(columns), values, tuple(labelled), where)
            for i, split in enumerate(splits)
        ]
    )
    united = {
        name: frame_pieces.unite_names_of([names[name] for names in found]) for name in labelled
    }
    for name, names in united.items():
        _save_names(_staged_names(where, "labels", None, name), names)
    labels = {
        name: np.asarray(u.to_numpy(zero_copy_only=False), dtype=str) for name, u in united.items()
    }
    sizes = sources.frame_shape(shape, tuple(columns), labels)
    dtype = (
        frame_pieces.COUNT_DTYPE
        if values is None
        else sources.check_dtype(schema.field(values).type.to_pandas_dtype())
    )
    starts = _block_starts(rows, sizes, values is not None)
    bucket = dask.delayed(bucket_split, pure=True)
    edges = np.stack(
        dask.compute(
            *[
                bucket(i, tuple(columns), values, tuple(labelled), sizes, starts, where)
                for i in range(len(found))
            ]
        )
    )
    stops = [*starts[1:].tolist(), sizes[0]]
    block = dask.delayed(block_of, pure=True)
    pieces = [
        from_delayed(
            block(where, edges, b, start, (stop - start, *sizes[1:]), dtype, values is not None),
            (stop - start, *sizes[1:]),
            _empty(len(sizes), dtype),
        )
        for b, (start, stop) in enumerate(zip(starts.tolist(), stops, strict=True))
    ]
    array = pieces[0] if len(pieces) == 1 else da.concatenate(pieces, axis=0)
    source = sources.source_of(array)
    names = Labels(name=values or "count", dims=tuple(columns), attrs={}, coords=labels)
    from dataclasses import replace

    return replace(source, labels=names)


def _positions(labels: Any, names: Any) -> npt.NDArray[np.int64]:
    """Each of a split's names' position among an axis's sorted names, hashed by pyarrow."""
    import pyarrow.compute as pc

    found: npt.NDArray[np.int64] = (
        pc.index_in(names.cast(labels.type), value_set=labels).to_numpy().astype(np.int64)
    )
    return found


def _empty(rank: int, dtype: npt.DTypeLike) -> Any:
    import sparse

    return sparse.COO(np.empty((rank, 0), dtype=np.int64), np.empty(0, dtype), shape=(0,) * rank)
