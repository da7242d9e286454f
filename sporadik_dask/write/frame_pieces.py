"""DataFrame partitions -> pieces: a labelled column's distinct names, gathered partition by
partition, and each row's position among an axis's sorted labels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.format.errors import LayoutError
from sporadik_dask.write.pieces import Piece, checked_columns

__all__ = [
    "frame_names",
    "frame_piece",
    "unite_names",
    "unite_names_of",
]


#: Dtype of the counts a table without a value column gets: one per row, summed per cell.
COUNT_DTYPE = np.dtype(np.int32)


def frame_names(frame: Any, columns: Sequence[str]) -> dict[str, Any]:
    """Each of ``columns``' distinct names in one partition of a DataFrame, as Arrow strings.

    Read as Arrow, a column of pandas' Arrow strings or a categorical's codes makes no Python
    string per row; missing names are left out (they name no position).
    """
    return {name: unite_names_of([_arrow_names(frame[name])]) for name in columns}


def unite_names(*found: Mapping[str, Any]) -> dict[str, Any]:
    """The sorted distinct names of several :func:`frame_names` results, column by column."""
    return {name: unite_names_of([names[name] for names in found]) for name in found[0]}


def unite_names_of(arrays: Sequence[Any]) -> Any:
    """The sorted distinct names of several Arrow arrays of names, as one Arrow array, sorted by
    UTF-8 bytes, which is numpy's order of ``str`` by code point."""
    import pyarrow as pa
    import pyarrow.compute as pc

    unique = pa.chunked_array([a.cast(pa.string()) for a in arrays], pa.string()).unique()
    unique = unique.drop_null()
    return unique.take(pc.array_sort_indices(unique))


def _arrow_names(column: Any) -> Any:
    """A column of names as Arrow strings: a categorical's used categories, else every row."""
    import pandas as pd
    import pyarrow as pa

    if isinstance(column.dtype, pd.CategoricalDtype):
        column = column.cat.remove_unused_categories().cat.categories.to_series()
    names = pa.array(column, from_pandas=True)
    return names.cast(pa.string())


def _label_positions(column: Any, labels: Any) -> npt.NDArray[np.int64]:
    """Each row's position among an axis's sorted ``labels`` (Arrow strings), -1 where its name
    is missing or not among them; hashed by Arrow, once per categorical's category."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    def look_up(names: Any) -> npt.NDArray[np.int64]:
        found = pc.index_in(pa.array(names, from_pandas=True).cast(pa.string()), labels)
        return np.asarray(found.fill_null(-1).to_numpy(), dtype=np.int64)

    if isinstance(column.dtype, pd.CategoricalDtype):
        categories = look_up(column.cat.categories.to_series())
        found: npt.NDArray[np.int64] = np.append(categories, -1)[column.cat.codes.to_numpy()]
        return found
    return look_up(column)


def frame_piece(
    frame: Any,
    shape: Sequence[int],
    columns: Sequence[str],
    values: str | None,
    labels: Mapping[str, Any],
) -> Piece:
    """A piece from one partition of a DataFrame of coordinate columns and a value column.

    A labelled column holds names, turned here into positions among its sorted ``labels``;
    without a value column each row counts one.
    """
    coords = []
    for name in columns:
        column = frame[name]
        if name in labels:
            codes = _label_positions(column, labels[name])
            if codes.size and codes.min() < 0:
                raise LayoutError(
                    f"Column {name!r} holds a missing or unknown label; it names no position. "
                    f"Drop those rows first (frame.dropna(subset=[{name!r}]))."
                )
            coords.append(codes)
        else:
            coords.append(column.to_numpy())
    data = np.ones(len(frame), dtype=COUNT_DTYPE) if values is None else frame[values].to_numpy()
    return checked_columns(shape, data, *coords)
