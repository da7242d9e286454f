"""sporadik-dask: the Dask and xarray backend for the sporadik sparse-array format.

An independent implementation of spec 1: out-of-core writes planned as a dask shuffle, and lazy,
sparse reads through dask and xarray.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from sporadik_dask.describe import LayoutDescription, StoreDescription, describe
from sporadik_dask.errors import (
    AbsentChunkError,
    AbsentChunkWarning,
    FetchError,
    IncompleteError,
    LayoutError,
    ScanWarning,
    SpecError,
    SporadikError,
    StoreExistsError,
    StoreNotFoundError,
)
from sporadik_dask.read import StoreReader, from_sporadik
from sporadik_dask.spec import SPEC_VERSION
from sporadik_dask.validate import validate
from sporadik_dask.write import StoreWrite, add_axis, to_sporadik

try:
    __version__ = version("sporadik-dask")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0.0.0"

del PackageNotFoundError, version

__all__ = [
    "SPEC_VERSION",
    "AbsentChunkError",
    "AbsentChunkWarning",
    "FetchError",
    "IncompleteError",
    "LayoutDescription",
    "LayoutError",
    "ScanWarning",
    "SpecError",
    "SporadikError",
    "StoreDescription",
    "StoreExistsError",
    "StoreNotFoundError",
    "StoreReader",
    "StoreWrite",
    "__version__",
    "add_axis",
    "describe",
    "from_sporadik",
    "to_sporadik",
    "validate",
]
