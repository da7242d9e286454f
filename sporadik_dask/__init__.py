"""sporadik-dask: the Dask and xarray backend for the sporadik sparse-array format.

An independent implementation of spec 1: out-of-core writes planned as a dask shuffle, and lazy,
sparse reads through dask and xarray.

Public names load on first use (PEP 562): xarray imports every installed backend's entry point on
its first ``open_dataset`` of any file, and that import runs this module, so importing it must not
pull in dask, zarr, sparse or numba. Importing it does register the ``.sporadik`` accessor,
so it exists in every process that holds a sporadik variable (a dask worker imports this package
when it unpickles one).
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from sporadik_dask.backend import accessor as _accessor  # registers ``.sporadik``
from sporadik_dask.format.errors import (
    AbsentChunkError,
    AbsentChunkWarning,
    FetchError,
    IncompleteError,
    LayoutError,
    ScanWarning,
    SpecError,
    SporadikError,
    StoreAccessError,
    StoreExistsError,
    StoreNotFoundError,
    StoreReplacedError,
)

if TYPE_CHECKING:
    from sporadik_dask.analysis.genes import highly_variable_genes
    from sporadik_dask.analysis.pca import pca
    from sporadik_dask.format.spec import SPEC_VERSION
    from sporadik_dask.read import StoreReader, from_sporadik
    from sporadik_dask.read.batches import Batch, Minibatches
    from sporadik_dask.read.torch_dataset import MinibatchDataset
    from sporadik_dask.read.validate import validate
    from sporadik_dask.store.describe import LayoutDescription, StoreDescription, describe
    from sporadik_dask.write.store_write import StoreWrite
    from sporadik_dask.write.writer import add_axis, to_sporadik

    __version__: str

#: Where each lazily loaded public name is defined.
_LAZY = {
    "SPEC_VERSION": "sporadik_dask.format.spec",
    "LayoutDescription": "sporadik_dask.store.describe",
    "StoreDescription": "sporadik_dask.store.describe",
    "describe": "sporadik_dask.store.describe",
    "Batch": "sporadik_dask.read.batches",
    "Minibatches": "sporadik_dask.read.batches",
    "MinibatchDataset": "sporadik_dask.read.torch_dataset",
    "StoreReader": "sporadik_dask.read",
    "from_sporadik": "sporadik_dask.read",
    "validate": "sporadik_dask.read.validate",
    "StoreWrite": "sporadik_dask.write.store_write",
    "add_axis": "sporadik_dask.write.writer",
    "to_sporadik": "sporadik_dask.write.writer",
    "highly_variable_genes": "sporadik_dask.analysis.genes",
    "pca": "sporadik_dask.analysis.pca",
}

#: Submodules a user reaches as attributes (``sd.synthetic.counts_matrix``), loaded on first use.
_SUBMODULES = frozenset({"synthetic"})

__all__ = [
    "SPEC_VERSION",
    "AbsentChunkError",
    "AbsentChunkWarning",
    "Batch",
    "FetchError",
    "IncompleteError",
    "LayoutDescription",
    "LayoutError",
    "MinibatchDataset",
    "Minibatches",
    "ScanWarning",
    "SpecError",
    "SporadikError",
    "StoreAccessError",
    "StoreDescription",
    "StoreExistsError",
    "StoreNotFoundError",
    "StoreReader",
    "StoreReplacedError",
    "StoreWrite",
    "__version__",
    "add_axis",
    "describe",
    "from_sporadik",
    "highly_variable_genes",
    "pca",
    "to_sporadik",
    "validate",
]


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use, and keep it here."""
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value: Any = version("sporadik-dask")
        except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
            value = "0.0.0"
    elif name in _SUBMODULES:
        value = importlib.import_module(f"sporadik_dask.{name}")
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if "dask" in sys.modules:  # dask is loaded already: its config learns our keys' defaults now
    importlib.import_module("sporadik_dask.config")  # (else the first open or write does)

del _accessor, sys
