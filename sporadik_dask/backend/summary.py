"""A sporadik variable's line in a Dataset's repr: the values and bytes a layout stores.

xarray prints a variable's ``nbytes``, which for a lazily opened or chunked variable is its
dense size (``X (obs, var) float32 24GB ...`` for 405 M stored values, 3.2 GB), and ``...`` for
its values. The line of a variable that is a whole store says what is stored instead; every
other line is xarray's own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["stored_size", "summarizing_stored"]


def stored_size(variable: Any) -> tuple[int, int] | None:
    """The values a whole store holds and their bytes with one layout's indices (what its CSR
    holds in memory), or None for a selection of it, values in memory, or anyone's variable."""
    from sporadik_dask.backend.array import backend_under
    from sporadik_dask.backend.ours import is_read_dask
    from sporadik_dask.read import StoreReader
    from sporadik_dask.read.blocks import reader_of

    held = variable._data
    reader: Any = None
    if is_read_dask(held):
        reader = reader_of(held)
    else:
        beneath = backend_under(held)
        if beneath.backend is not None and beneath.whole:
            reader = beneath.backend.reader
    if not isinstance(reader, StoreReader) or not reader.description.layouts:
        return None
    layout = next(iter(reader.description.layouts.values()))
    width = np.dtype(layout.dtype).itemsize + np.dtype(layout.index_dtypes["indices"]).itemsize
    return layout.nnz, layout.nnz * width


def summarizing_stored(original: Callable[..., Any]) -> Callable[..., Any]:
    """``xarray.core.formatting.dataset_repr``, with each whole store's line saying its stored
    bytes and values where xarray's says its dense size and ``...``, and the Dataset's size
    counting those bytes."""

    @functools.wraps(original)
    def dataset_repr(ds: Any) -> Any:
        text: str = original(ds)
        from xarray.core import formatting

        col_width = formatting._calculate_col_width(ds.variables)
        size = ds.nbytes
        for name, variable in ds.data_vars.items():
            stored = stored_size(variable.variable)
            if stored is None:
                continue
            size += stored[1] - variable.nbytes
            line = formatting.summarize_variable(name, variable, col_width)
            values, nbytes = stored
            dense = f"{variable.dtype} {formatting.render_human_readable_nbytes(variable.nbytes)} "
            at = line.find(dense)
            if at < 0 or line not in text:
                continue
            front = f"{variable.dtype} {formatting.render_human_readable_nbytes(nbytes)} stored "
            ours = f"{line[:at]}{front}[{values:,} of {variable.size:,} values stored, sparse]"
            text = text.replace(line, ours, 1)
        header = f"<xarray.{type(ds).__name__}> Size: "
        dense = f"{header}{formatting.render_human_readable_nbytes(ds.nbytes)}"
        if size != ds.nbytes and text.startswith(dense):
            text = f"{header}{formatting.render_human_readable_nbytes(size)}" + text[len(dense) :]
        return text

    return dataset_repr
