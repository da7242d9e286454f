"""The dask blocks a sporadik variable gets from ``chunks={}`` and ``chunks="auto"``.

xarray cuts a variable by the backend's ``encoding["preferred_chunks"]`` under ``chunks={}``, and
by dask's ``"auto"`` under ``chunks="auto"``, which counts dense bytes: for a 0.4 %-dense float32
matrix it cuts both axes into blocks holding a few MB of values each (5 x 5 blocks of a 3.6 M-value
store). So the preferred chunks are sized by sparse bytes (:mod:`sporadik_dask.planning.budgets`)
along the first layout's axis, whole along the others, and carry a marker type; the dask manager's
``normalize_chunks`` is wrapped (:mod:`sporadik_dask.backend.patches`) to give every ``"auto"``
dimension of a variable with such preferred chunks exactly those. Every other variable is
chunked by dask's rule unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from sporadik_dask.planning.budgets import positions_per_block
from sporadik_dask.store.describe import StoreDescription

__all__ = ["SparseBlockSize", "auto_as_preferred", "preferred_chunks"]


class SparseBlockSize(int):
    """A preferred block length sized by sparse bytes: what ``"auto"`` means for this dim."""

    __slots__ = ()


def preferred_chunks(description: StoreDescription, dims: tuple[str, ...]) -> dict[str, int]:
    """Blocks along the first layout's axis of
    :func:`~sporadik_dask.planning.budgets.positions_per_block` positions (from the description
    alone), whole along the other axes."""
    axis = min(description.layouts)
    along = positions_per_block(description.layouts[axis])
    return {
        dim: SparseBlockSize(along if a == axis else max(size, 1))
        for a, (dim, size) in enumerate(zip(dims, description.shape, strict=True))
    }


def auto_as_preferred(normalize_chunks: Callable[..., Any]) -> Callable[..., Any]:
    """``DaskManager.normalize_chunks``, with ``"auto"`` along a dim of a sporadik variable's
    preferred chunks (:class:`SparseBlockSize`) taken as those; any other call unchanged."""

    @functools.wraps(normalize_chunks)
    def sparse_auto(self: Any, chunks: Any, *args: Any, **kwargs: Any) -> Any:
        previous = kwargs.get("previous_chunks")
        if (
            isinstance(chunks, tuple)
            and isinstance(previous, tuple)
            and len(previous) == len(chunks)
            and any(isinstance(size, SparseBlockSize) for size in previous)
        ):
            chunks = tuple(
                int(size) if wanted == "auto" and isinstance(size, SparseBlockSize) else wanted
                for wanted, size in zip(chunks, previous, strict=True)
            )
        return normalize_chunks(self, chunks, *args, **kwargs)

    return sparse_auto
