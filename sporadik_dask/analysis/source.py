"""A DataArray of a store's values as the passes here read it: the store's dask read and the
elementwise steps recorded on it (:mod:`sporadik_dask.backend.elementwise`)."""

from __future__ import annotations

from typing import Any

from sporadik_dask.backend.elementwise import Recorded, steps_of
from sporadik_dask.format.errors import SporadikError

__all__ = ["as_dask", "cells_axis", "recorded_read", "vector_arrays"]


def as_dask(array: Any) -> Any:
    """``array`` (an xarray DataArray) held as a dask array: a lazily opened store's variable
    becomes its dask read in the blocks it prefers, as its arithmetic would make it."""
    if hasattr(array.variable._data, "dask"):
        return array
    return array.chunk("auto")


def recorded_read(array: Any) -> Recorded | None:
    """The read of a whole store beneath ``array`` and the steps that give ``array`` from it,
    or None when ``array`` is anything else (a selection of one, another's data)."""
    return steps_of(as_dask(array).variable._data)


def vector_arrays(found: Recorded) -> list[Any]:
    """The steps' vector operands as dask arrays (a per-cell total is one already)."""
    import dask.array as da

    return [v if hasattr(v, "dask") else da.from_array(v, chunks=-1) for v in found.vectors]


def cells_axis(array: Any, dim: str | None) -> int:
    """The axis of the observations (cells), ``dim`` or the first, of a 2-D ``array``."""
    if array.ndim != 2:
        raise SporadikError(
            f"This DataArray has dims {array.dims!r}; highly variable genes and PCA take one "
            "of two dims, observations (cells) by variables (genes). Select or stack to two."
        )
    if dim is None:
        return 0
    if dim not in array.dims:
        raise SporadikError(
            f"dim={dim!r} is not one of the DataArray's dims {array.dims!r}; name the dim of "
            "the observations (cells)."
        )
    return int(array.get_axis_num(dim))
