"""xarray groupby reductions of sporadik variables, pushed down to :mod:`sporadik_dask.reduce`.

xarray reduces each group in turn (or hands flox the whole data): for a lazily opened store that
is one read per group, or the whole store read into one ``sparse.COO``. Here ``groupby`` over one
or several coordinates along one dim, a reduction computed by
:mod:`sporadik_dask.backend.pushdown`, lands each position's values in its group's row in the
store's one pass; every other groupby goes to xarray's own method unchanged. The wrappers are
installed by :mod:`sporadik_dask.backend.patches`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.backend.chunkmanager import plain_dask_array
from sporadik_dask.backend.ours import is_sporadik_variable
from sporadik_dask.backend.pushdown import op_of, options_of, pushed_data, where_filled

__all__ = ["dataset_grouped_pushing_down", "grouped_pushing_down"]


def grouped_pushing_down(original: Callable[..., Any], *, by_name: bool) -> Callable[..., Any]:
    """``DataArrayGroupBy.reduce`` (a function) or ``._flox_reduce`` (a name), pushed down."""

    @functools.wraps(original)
    def reduce(self: Any, *args: Any, **kwargs: Any) -> Any:
        from xarray.groupers import RESAMPLE_DIM

        per_group = _per_group(self, kwargs) if by_name else None
        if per_group is not None:
            return per_group
        pushed = _grouped(self, args, kwargs, by_name)
        if pushed is None:
            return original(self, *args, **kwargs)
        if RESAMPLE_DIM in pushed.dims:  # a resample's bins take the resampled dim's name
            pushed = pushed.rename({RESAMPLE_DIM: self._group_dim})
        return pushed

    return reduce


#: Reductions flox has no sparse kernel for (``flox.aggregate_sparse`` lacks ``nanmedian``),
#: and the arguments xarray's own path takes: answered group by group there, each group's
#: selection by the store (:mod:`~sporadik_dask.backend.order`).
_PER_GROUP = {
    "median": ("dim", "skipna", "keep_attrs"),
    "quantile": ("q", "dim", "skipna", "keep_attrs"),
}


def _per_group(groupby: Any, kwargs: dict[str, Any]) -> Any:
    """A grouped median or quantile of a sporadik variable by xarray's path without flox, or
    None for any other."""
    import xarray as xr

    func = kwargs.get("func")
    obj = groupby._original_obj
    if func not in _PER_GROUP:
        return None
    variables = obj.data_vars.values() if isinstance(obj, xr.Dataset) else [obj]
    if not any(is_sporadik_variable(v.variable) for v in variables):
        return None
    with xr.set_options(use_flox=False):
        result = getattr(groupby, func)(**{k: kwargs[k] for k in _PER_GROUP[func] if k in kwargs})
    # a Dataset's quantiles come last on flox's path, first on the other; a DataArray's, last
    return result.transpose(..., "quantile", missing_dims="ignore")


def _grouped(groupby: Any, args: tuple[Any, ...], kwargs: dict[str, Any], by_name: bool) -> Any:
    """A groupby reduction of a sporadik variable in one pass, or None for xarray's path."""
    import xarray as xr
    from xarray import DataArray

    from sporadik_dask.reduce.results import dense_result
    from sporadik_dask.reduce.target import Grouping, Target

    obj = groupby._original_obj
    if not isinstance(obj, DataArray) or not is_sporadik_variable(obj.variable):
        return None  # another's: xarray's own, its codes not even computed here
    kwargs = dict(kwargs)
    func = kwargs.pop("func") if by_name else (args[0] if args else kwargs.pop("func", None))
    if args[1 if not by_name else 0 :] or kwargs.pop("axis", None) is not None:
        return None
    dim = kwargs.pop("dim", None)
    keep_attrs = kwargs.pop("keep_attrs", None)
    kwargs.pop("shortcut", None)
    # grouped by a chunked coordinate (labels given), xarray holds the object transposed to put
    # the coordinate's dim last, and leaves it there in its result: group the object as it was
    # given, and put the groups last as xarray would
    chunked = groupby._by_chunked
    obj = groupby._original_obj if chunked else groupby._obj
    codes_dims = groupby.encoded.codes.dims
    if (
        groupby._stacked_dim is not None
        or groupby._inserted_dims
        or not isinstance(obj, DataArray)
        or (chunked and len(codes_dims) != 1)
    ):
        return None
    options = options_of(op_of(func), obj.dtype, kwargs)
    if kwargs.get("min_count") is not None:
        return None
    grouped_dim = codes_dims[0] if chunked else groupby._group_dim
    dims = [grouped_dim] if dim is None else ([dim] if isinstance(dim, str) else list(dim))
    if options is None or grouped_dim not in dims or any(d not in obj.dims for d in dims):
        return None
    # a chunked coordinate grouped by labels given: its codes are a dask array, computed here
    # (one pass over the coordinate), as xarray's own path would compute them. Several groupers
    # along one dim are one grouping by the combined code, as xarray and flox combine them
    codes = _combined_codes(groupby.groupers)
    grouping = Grouping(obj.get_axis_num(grouped_dim), codes, len(groupby.encoded.full_index))
    others = tuple(sorted(obj.get_axis_num(d) for d in dims if d != grouped_dim))
    target = Target(tuple(obj.shape), others, grouping)
    dense = dense_result(target, options[0])
    empty = grouping.members() == 0  # groups asked for by name that no position is in
    if dense is None or (empty.any() and not dense):
        return None
    data = pushed_data(obj.variable, target, *options, dense=dense)
    if data is None:
        return None
    # a count of no member is 0 for one grouper, missing for several (as xarray leaves them)
    if empty.any() and (options[0] != "count" or len(groupby.groupers) > 1):
        data = _empty_groups_missing(data, empty, target.kept.index(grouping.axis))
    (name,) = groupby.encoded.unique_coord.dims
    out_dims = tuple(name if d == grouped_dim else d for d in (obj.dims[a] for a in target.kept))
    kept_dims = set(out_dims)
    coords = {
        key: coord.variable
        for key, coord in obj.coords.items()
        if set(coord.dims) <= kept_dims and grouped_dim not in coord.dims
    }
    from xarray.core.options import _get_keep_attrs

    keep = _get_keep_attrs(default=True) if keep_attrs is None else keep_attrs
    result = DataArray(plain_dask_array(data), dims=out_dims, coords=coords, name=obj.name)
    if keep:
        result.attrs.update(obj.attrs)
    encoded = groupby.encoded
    if len(groupby.groupers) > 1:
        result = _unstacked(groupby, result, name, in_place=by_name)
    elif encoded.unique_coord.size == encoded.full_index.size:
        result = result.assign_coords(encoded.coords)
    else:  # a group of no member (a resample's empty bin): labelled by the full index
        from xarray.core.indexes import PandasIndex

        index = PandasIndex(encoded.full_index, name)
        result = result.assign_coords(xr.Coordinates.from_xindex(index))
    return result.transpose(..., name) if chunked else result


def _combined_codes(groupers: Sequence[Any]) -> npt.NDArray[np.int64]:
    """Each position's group: one grouper's code, or several groupers' codes raveled into one
    (-1 where any is -1), as xarray's ``ComposedGrouper`` and flox combine them."""
    codes = [np.asarray(g.codes.values, dtype=np.int64) for g in groupers]
    if len(codes) == 1:
        return codes[0]
    missing = np.logical_or.reduce([c < 0 for c in codes])
    shape = tuple(len(g.full_index) for g in groupers)
    combined = np.ravel_multi_index(tuple(np.where(missing, 0, c) for c in codes), shape)
    return np.where(missing, -1, combined)


def _unstacked(groupby: Any, result: Any, name: Hashable, *, in_place: bool) -> Any:
    """A result grouped by several groupers' combined code (``name``, every combination in the
    full product's order), with one dim per grouper labelled as xarray labels it, a combination
    of no member missing (NaN, a count's too): in place of the combined dim on flox's path; on
    xarray's own, by its own unstacking of the combinations some position is in."""
    import xarray as xr
    from xarray.core.variable import IndexVariable

    groupers = groupby.groupers
    if not in_place:
        codes = np.asarray(groupby.encoded.codes.values)
        seen = np.unique(codes[codes >= 0])
        result = result.isel({name: seen}).assign_coords(groupby.encoded.coords)
        return groupby._maybe_reindex(groupby._maybe_unstack(result))
    at = result.dims.index(name)
    shape = result.shape[:at] + tuple(len(g.full_index) for g in groupers) + result.shape[at + 1 :]
    dims = result.dims[:at] + tuple(g.name for g in groupers) + result.dims[at + 1 :]
    coords = {k: c.variable for k, c in result.coords.items() if name not in c.dims}
    unstacked = xr.DataArray(
        result.data.reshape(shape), dims=dims, coords=coords, name=result.name, attrs=result.attrs
    )
    for g in groupers:
        label = IndexVariable(g.name, g.full_index, attrs=g.codes.attrs)
        unstacked = unstacked.assign_coords(xr.Coordinates({g.name: label}))
    return unstacked


def dataset_grouped_pushing_down(
    original: Callable[..., Any], *, by_name: bool
) -> Callable[..., Any]:
    """``DatasetGroupBy.reduce`` or ``._flox_reduce``: each sporadik variable along the grouped
    dim pushed down as a DataArray's is, every other variable by xarray's own path.

    xarray reduces a Dataset's groups one at a time (a read and a reduction per group) or hands
    every variable to flox, which densifies a sparse one (docs/benchmarks.md, "Numbers behind the
    code's choices")."""

    @functools.wraps(original)
    def reduce(self: Any, *args: Any, **kwargs: Any) -> Any:
        per_group = _per_group(self, kwargs) if by_name else None
        if per_group is not None:
            return per_group
        pushed = _dataset_grouped(self, original, args, kwargs, by_name)
        return original(self, *args, **kwargs) if pushed is None else pushed

    return reduce


def _dataset_grouped(
    groupby: Any,
    original: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    by_name: bool,
) -> Any:
    from xarray import Dataset
    from xarray.core.groupby import DataArrayGroupBy
    from xarray.core.resample import DataArrayResample, DatasetResample
    from xarray.groupers import RESAMPLE_DIM

    obj = groupby._original_obj
    codes_dims = groupby.encoded.codes.dims
    if len(codes_dims) != 1 or not isinstance(obj, Dataset):
        return None
    ours = [
        name
        for name, array in obj.data_vars.items()
        if codes_dims[0] in array.dims and is_sporadik_variable(array.variable)
    ]
    if not ours:
        return None
    # a resample's bins are grouped under a proxy dim, named back to the resampled dim after
    resampled = isinstance(groupby, DatasetResample)
    extra = {"dim": groupby._dim, "resample_dim": RESAMPLE_DIM} if resampled else {}
    per_array = DataArrayResample if resampled else DataArrayGroupBy
    pushed = {}
    for name in ours:
        one = per_array(obj[name], groupby.groupers, groupby._restore_coord_dims, **extra)
        result = _grouped(one, args, kwargs, by_name)
        if result is None:
            return None
        if RESAMPLE_DIM in result.dims:
            result = result.rename({RESAMPLE_DIM: groupby._dim})
        # a Dataset's groups of several groupers come last on both of xarray's paths
        names = [g.name for g in groupby.groupers] if len(groupby.groupers) > 1 else []
        pushed[name] = result.transpose(..., *names)
    rest = obj.drop_vars(ours)
    if rest.data_vars:
        others = type(groupby)(rest, groupby.groupers, groupby._restore_coord_dims, **extra)
        out = original(others, *args, **kwargs)
    else:
        out = Dataset()
    out = out.assign_coords(Dataset(pushed).coords).assign(pushed)
    from xarray.core.options import _get_keep_attrs

    keep_attrs = kwargs.get("keep_attrs")
    keep = _get_keep_attrs(default=True) if keep_attrs is None else keep_attrs
    out.attrs = dict(obj.attrs) if keep else {}
    return out[[name for name in obj.data_vars if name in out.data_vars]]


def _empty_groups_missing(data: Any, empty: npt.NDArray[np.bool_], at: int) -> Any:
    """``data`` with every cell of an empty group missing (NaN), as xarray's flox path leaves
    them; integers are promoted to float64 to hold it, as xarray promotes a reindexed integer
    array (flox writes the integer's minimum there, a value nobody stored)."""
    spot = [1] * data.ndim
    spot[at] = empty.size
    if data.dtype.kind not in "fc":
        data = data.astype(np.float64)
    return where_filled(empty.reshape(spot), np.asarray(np.nan, dtype=data.dtype), data)
