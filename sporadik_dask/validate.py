"""Every check a reader can make, including the ones that read data.

:func:`describe` makes the checks that need only metadata; this adds those that need the arrays
(``indptr`` starts at 0, never decreases and ends at nnz; every index lies inside the raveled
extent), reading ``indices`` one zarr chunk at a time so memory stays at one chunk whatever the
store's size.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import zarr

from sporadik_dask.describe import LayoutDescription, StoreDescription, describe_group_async
from sporadik_dask.spec import check_indices, check_indptr
from sporadik_dask.storage import StoreLike, location_of, open_group_async, run

__all__ = ["validate", "validate_layout"]


def validate_layout(group: zarr.Group, layout: LayoutDescription, where: str) -> None:
    """Run the data checks over one described layout's arrays."""
    label = f"Layout {layout.path!r} in {where}"
    indptr, indices = group["indptr"], group["indices"]
    assert isinstance(indptr, zarr.Array) and isinstance(indices, zarr.Array)  # described already
    check_indptr(np.asarray(indptr[:]), layout.nnz, label)
    step = layout.chunks["indices"]
    for start in range(0, layout.nnz, step):
        check_indices(np.asarray(indices[start : start + step]), layout.extent, label)


def validate(
    store: StoreLike, *, storage_options: dict[str, Any] | None = None
) -> StoreDescription:
    """Describe ``store`` and run every check that reads data; raise on the first failure."""
    where = location_of(store)
    root = run(open_group_async(store, mode="r", storage_options=storage_options))
    description = run(describe_group_async(root, where))
    group = zarr.Group(root)
    for layout in description.layouts.values():
        child = group[layout.path]
        assert isinstance(child, zarr.Group)  # described already
        validate_layout(child, layout, where)
    return description
