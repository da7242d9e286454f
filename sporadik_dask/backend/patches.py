"""Every patch of xarray and dask, in one place: what it replaces, why, and how to switch it off.

xarray and dask have public plug-in points for a backend (its entry point, a chunk manager, an
accessor, dispatch registrations), but none through which a backend may reduce, multiply, select
or chunk its own variables: each of those runs xarray's or dask's code on the data. The pushdowns
therefore replace the names listed in :data:`PATCHES`, each

1. acting only on a store's data (:mod:`~sporadik_dask.backend.ours` is asked first) and handing
   anything else to the original, unchanged: opening a store changes nothing for other arrays
   (``tests/backend/test_other_arrays.py``);
2. switched off, every one at once, by ``dask.config`` ``sporadik.patches: False``: each name
   then calls the original as given (sporadik variables then behave as any backend's:
   xarray's reductions, dense dask chunks); ``sporadik.pushdown: False`` switches off the
   reductions, products and in-memory selections alone;
3. pinned by ``tests/backend/test_patches.py``, which names each upstream symbol, so a release that
   moves one fails there by name.

:func:`install` runs when a store is opened (:mod:`~sporadik_dask.backend.dataset`); it is
idempotent. ``docs/architecture.md`` lists each patch and the upstream change that would let it go.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dask

__all__ = [
    "PATCHES",
    "SWITCH",
    "Patch",
    "install",
    "install_one",
    "installed",
    "join_sparse_blocks_in_order",
    "original",
    "upstream",
]

#: The ``dask.config`` key that switches every patch off (``False``).
SWITCH = "sporadik.patches"


@dataclass(frozen=True, slots=True)
class Patch:
    """One replaced attribute of an xarray or dask class or module."""

    #: The module holding the owner, e.g. ``"xarray.core.variable"``.
    module: str
    #: The owner within the module (a class, or "" for the module itself).
    owner: str
    #: The attribute replaced.
    name: str
    #: ``wrap(original)``: the replacement, made from the original function.
    wrap: Callable[[Callable[..., Any]], Callable[..., Any]]

    @property
    def symbol(self) -> str:
        """The upstream name replaced, as a user would spell it."""
        return ".".join(part for part in (self.module, self.owner, self.name) if part)


def _pushdown(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The wrapper factory ``name`` of a backend module, imported when installed (the modules
    load the reading stack)."""
    module, _, attribute = name.rpartition(".")

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        factory = getattr(importlib.import_module(f"sporadik_dask.backend.{module}"), attribute)
        wrapped: Callable[..., Any] = factory(original)
        return wrapped

    return wrap


def _grouped(factory: str, *, by_name: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        from sporadik_dask.backend import grouped

        wrapped: Callable[..., Any] = getattr(grouped, factory)(original, by_name=by_name)
        return wrapped

    return wrap


_GROUPBY = "xarray.core.groupby"
_INDEXING = "xarray.core.indexing"
_VARIABLE = "xarray.core.variable"
_MANAGER = "xarray.namedarray.daskmanager"

#: Every patch, in the order installed.
PATCHES: tuple[Patch, ...] = (
    Patch(_VARIABLE, "Variable", "reduce", _pushdown("pushdown.pushing_down")),
    Patch(_VARIABLE, "Variable", "quantile", _pushdown("order.quantile_pushing_down")),
    Patch(_GROUPBY, "DataArrayGroupBy", "reduce", _grouped("grouped_pushing_down", by_name=False)),
    Patch(
        _GROUPBY, "DataArrayGroupBy", "_flox_reduce", _grouped("grouped_pushing_down", by_name=True)
    ),
    Patch(
        "xarray.core.resample",
        "DataArrayResample",
        "reduce",
        _grouped("grouped_pushing_down", by_name=False),
    ),
    Patch(
        "xarray.core.resample",
        "DataArrayResample",
        "_flox_reduce",
        _grouped("grouped_pushing_down", by_name=True),
    ),
    Patch(
        _GROUPBY,
        "DatasetGroupBy",
        "reduce",
        _grouped("dataset_grouped_pushing_down", by_name=False),
    ),
    Patch(
        _GROUPBY,
        "DatasetGroupBy",
        "_flox_reduce",
        _grouped("dataset_grouped_pushing_down", by_name=True),
    ),
    Patch(
        "xarray.core.resample",
        "DatasetResample",
        "reduce",
        _grouped("dataset_grouped_pushing_down", by_name=False),
    ),
    Patch(
        "xarray.core.resample",
        "DatasetResample",
        "_flox_reduce",
        _grouped("dataset_grouped_pushing_down", by_name=True),
    ),
    Patch("xarray.core.duck_array_ops", "", "einsum", _pushdown("dot.contracting")),
    Patch(_INDEXING, "DaskIndexingAdapter", "_oindex_get", _pushdown("dask_selection.rereading")),
    Patch(_INDEXING, "DaskIndexingAdapter", "__getitem__", _pushdown("dask_selection.rereading")),
    Patch(
        _INDEXING, "DaskIndexingAdapter", "_vindex_get", _pushdown("dask_selection.reading_points")
    ),
    Patch(_INDEXING, "ArrayApiIndexingAdapter", "_oindex_get", _pushdown("loaded.selecting")),
    Patch(
        _INDEXING, "ArrayApiIndexingAdapter", "_vindex_get", _pushdown("loaded.selecting_points")
    ),
    Patch(_INDEXING, "ArrayApiIndexingAdapter", "__getitem__", _pushdown("loaded.slicing")),
    Patch(_VARIABLE, "Variable", "concat", _pushdown("concatenation.reading_first")),
    Patch(_VARIABLE, "Variable", "_getitem_with_mask", _pushdown("concatenation.reading_on_index")),
    Patch(_VARIABLE, "Variable", "set_dims", _pushdown("broadcasting.reading_first")),
    Patch(_MANAGER, "DaskManager", "from_array", _pushdown("chunkmanager.keeping_sparse")),
    Patch(_MANAGER, "DaskManager", "compute", _pushdown("chunkmanager.computing_fresh")),
    Patch(_MANAGER, "DaskManager", "normalize_chunks", _pushdown("blocks.auto_as_preferred")),
    Patch("xarray.core.formatting", "", "dataset_repr", _pushdown("summary.summarizing_stored")),
    Patch("dask.array.core", "", "elemwise", _pushdown("elementwise.recording")),
    Patch("dask.array.routines", "", "elemwise", _pushdown("elementwise.recording")),
    Patch("dask.array.core", "Array", "astype", _pushdown("elementwise.recording_cast")),
    Patch(_VARIABLE, "", "_broadcast_compat_data", _pushdown("elementwise.chunking_first")),
    Patch(
        "xarray.computation.apply_ufunc",
        "",
        "broadcast_compat_data",
        _pushdown("elementwise.chunking_in_order"),
    ),
    Patch(
        "xarray.core.dataarray", "DataArray", "_unary_op", _pushdown("elementwise.chunking_unary")
    ),
    Patch(
        "xarray.computation.computation",
        "",
        "_calc_idxminmax",
        _pushdown("elementwise.chunking_labels"),
    ),
)

#: The attribute a replacement carries: the patch it installs and the original it replaced.
_MARK = "__sporadik_patch__"


def _owner(patch: Patch) -> Any:
    owner: Any = importlib.import_module(patch.module)
    for part in filter(None, patch.owner.split(".")):
        owner = getattr(owner, part)
    return owner


def upstream(patch: Patch) -> Any:
    """The upstream attribute ``patch`` replaces, as its owner holds it (a classmethod as such),
    looked up through the owner's bases; the original where the patch is installed."""
    found = inspect.getattr_static(_owner(patch), patch.name)
    marked = getattr(_function(found), _MARK, None)
    return found if marked is None else marked[1]


def installed(patch: Patch) -> bool:
    """Whether the owner holds ``patch``'s replacement now."""
    found = inspect.getattr_static(_owner(patch), patch.name)
    marked = getattr(_function(found), _MARK, None)
    return marked is not None and marked[0] == patch


def original(patch: Patch) -> Callable[..., Any]:
    """The function ``patch`` replaces (under a classmethod, its function)."""
    function: Callable[..., Any] = _function(upstream(patch))
    return function


def _function(attribute: Any) -> Any:
    return attribute.__func__ if isinstance(attribute, (classmethod, staticmethod)) else attribute


def _switched(patch: Patch, function: Callable[..., Any]) -> Callable[..., Any]:
    """``patch``'s replacement of ``function``, which calls ``function`` as given while
    :data:`SWITCH` is false."""
    replacement = patch.wrap(function)

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        if dask.config.get(SWITCH, True):
            return replacement(*args, **kwargs)
        return function(*args, **kwargs)

    setattr(call, _MARK, (patch, function))
    return call


def install() -> None:
    """Install every patch not installed yet, and have dask join ``sparse.COO`` blocks with
    :func:`~sporadik_dask.backend.concatenation.concatenate_in_order`; idempotent."""
    for patch in PATCHES:
        install_one(patch)
    join_sparse_blocks_in_order()


def install_one(patch: Patch) -> None:
    """Replace ``patch``'s attribute by its switched replacement, unless it is there already."""
    if installed(patch):
        return
    found = upstream(patch)
    replacement: Any = _switched(patch, _function(found))
    if isinstance(found, classmethod):
        replacement = classmethod(replacement)
    setattr(_owner(patch), patch.name, replacement)


def join_sparse_blocks_in_order() -> None:
    """Make dask join ``sparse.COO`` blocks with
    :func:`~sporadik_dask.backend.concatenation.concatenate_in_order`; idempotent.

    A dispatch registration, dask's own plug-in point; but it replaces ``sparse``'s join for
    every dask array of ``sparse.COO`` blocks in the process, not only ours. dask registers
    sparse's functions the first time it meets a sparse type, replacing whatever was registered
    for ``sparse.COO``; so that registration is made to happen first.
    """
    import sparse
    from dask.array.dispatch import concatenate_lookup

    from sporadik_dask.backend.concatenation import concatenate_in_order

    if concatenate_lookup.dispatch(sparse.COO) is not concatenate_in_order:
        concatenate_lookup.register(sparse.COO, concatenate_in_order)
