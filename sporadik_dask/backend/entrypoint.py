"""``SporadikBackendEntrypoint``: what ``xr.open_dataset(store, engine="sporadik")`` calls.

xarray imports every installed backend's entry point on its first ``open_dataset`` of any file,
sporadik or not, so this module imports xarray and the standard library only; the reading stack
(zarr, dask, sparse, numba) loads when a store is opened, as in xarray's own backends.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import xarray as xr
from xarray.backends import BackendEntrypoint

__all__ = ["SporadikBackendEntrypoint"]


class SporadikBackendEntrypoint(BackendEntrypoint):
    """Opens sporadik stores: ``xr.open_dataset(path, engine="sporadik")``."""

    description = "Open sporadik sparse-array stores lazily, as sparse-backed variables"
    url = "https://pypi.org/project/sporadik-dask/"
    open_dataset_parameters = ("filename_or_obj", "drop_variables", "storage_options")

    def open_dataset(
        self,
        filename_or_obj: Any,
        *,
        drop_variables: Iterable[str] | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> xr.Dataset:
        from sporadik_dask.backend.dataset import open_store_dataset

        return open_store_dataset(
            filename_or_obj, storage_options=storage_options, drop_variables=drop_variables
        )

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        """Yes only for a local store whose root document carries the block; never raises."""
        from sporadik_dask.format.spec import BLOCK_KEY

        try:
            document = Path(os.fspath(filename_or_obj)) / "zarr.json"
            attributes = json.loads(document.read_text()).get("attributes", {})
            return isinstance(attributes, dict) and BLOCK_KEY in attributes
        except Exception:
            return False
