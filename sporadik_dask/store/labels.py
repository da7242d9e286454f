"""An xarray DataArray's labels on disk: its name, dims and attrs, and its coordinates.

The one place that knows how labels are stored, so that the writer and the xarray backend agree
by construction: a root attribute ``xarray`` (name, dims, attrs, the names of the coordinates)
and a group ``coords/`` beside ``layouts/`` holding one node per coordinate. The format itself
ignores both, so other readers (the reference, anndata, zarrita) read the store unchanged.

A coordinate is scalar or lies along one dim; the zarr array's ``dimension_names`` say which (a
store written before non-dimension coordinates were kept has none, and holds dimension
coordinates only). Numbers and booleans are stored as they are, strings as UTF-8, datetimes and
timedeltas as int64 with their numpy dtype in the array's attributes, and pandas categoricals as
anndata spells them (a group of ``codes`` and ``categories``), so ``anndata.io.read_elem`` reads
them too. A coordinate's own attrs are its node's ``attrs`` attribute.

A coordinate of evenly spaced values (xarray's ``RangeIndex``, a pandas ``RangeIndex``, an int64
``arange`` along its own dim) is stored as its formula in the root attribute, under ``ranges``,
and has no node: along a genome's positions it would be 8 bytes a position, written and read
whole. It comes back as the index it was (an ``arange`` as a pandas ``RangeIndex``) without an
array of its values. A reader that knows no ``ranges`` opens the store without that coordinate.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sporadik_dask.format.errors import LayoutError, SporadikError

if TYPE_CHECKING:
    import zarr

    from sporadik_dask.store.zarr_adapter import AsyncGroup

__all__ = [
    "COORDS_GROUP",
    "LABELS_KEY",
    "Coordinate",
    "Labels",
    "Range",
    "frame_coords",
    "labels_attributes",
    "labels_of",
    "read_labels",
    "write_coords",
]

#: Root attribute holding an xarray DataArray's name, dims and attrs; other readers ignore it.
LABELS_KEY = "xarray"
#: Group holding one node per coordinate, beside ``layouts/``.
COORDS_GROUP = "coords"
#: A coordinate node's attribute holding the coordinate's own attrs.
ATTRS_KEY = "attrs"
#: An int64 coordinate array's attribute naming the datetime or timedelta dtype it holds.
TIME_DTYPE_KEY = "numpy_dtype"
#: The labels document's key holding the coordinates stored as their formula, not as nodes.
RANGES_KEY = "ranges"
#: How anndata marks a group of ``codes`` and ``categories``; its ``read_elem`` reads ours.
CATEGORICAL = {"encoding-type": "categorical", "encoding-version": "0.2.0"}


@dataclass(frozen=True, slots=True)
class Range:
    """Evenly spaced values, ``start + step * i`` for ``i < size``, held as that formula.

    ``index`` says which index they came with and go back to: ``"pandas"`` (a
    ``pandas.RangeIndex``: integers, exact selection by label) or ``"xarray"`` (xarray's
    ``RangeIndex``: floats, or the dtype it was given).
    """

    start: int | float
    step: int | float
    size: int
    #: The values' numpy dtype, as ``numpy.dtype.str``.
    dtype: str
    index: str
    #: One axis, as an array of it would have (``np.ndim`` asks this first).
    ndim = 1

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        """The values themselves, for a reader that asks for them (a label of a minibatch)."""
        values = self.start + self.step * np.arange(self.size)
        return values.astype(dtype or self.dtype)

    def document(self) -> dict[str, Any]:
        """The formula as JSON."""
        return {k: getattr(self, k) for k in ("start", "step", "size", "dtype", "index")}

    def pandas_index(self, name: str) -> Any:
        """The values as a ``pandas.RangeIndex`` named ``name``."""
        import pandas as pd

        start, step = int(self.start), int(self.step)
        return pd.RangeIndex(start, start + step * self.size, step, name=name)

    def xarray_index(self, name: str, dim: str) -> Any:
        """The values as xarray's ``RangeIndex`` of coordinate ``name`` along ``dim``."""
        from xarray.indexes import RangeIndex

        # half a step short of the end: arange's ceil then gives size whatever the rounding
        stop = self.start + (self.size - 0.5) * self.step
        index = RangeIndex.arange(
            self.start, stop, self.step, coord_name=name, dim=dim, dtype=np.dtype(self.dtype)
        )
        if index.size != self.size:
            raise SporadikError(
                f"Coordinate {name!r}: the range from {self.start!r} by {self.step!r} makes "
                f"{index.size} values, not the {self.size} stored, so its labels would be "
                "shifted. Rewrite the store."
            )
        return index


@dataclass(frozen=True, slots=True)
class Coordinate:
    """One coordinate as stored: its dims (none, or one of the array's), values and attrs."""

    dims: tuple[str, ...]
    #: A numpy array of numbers, booleans, ``str`` or datetimes, a ``pandas.Categorical``, or a
    #: :class:`Range`.
    values: Any
    attrs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Labels:
    """An xarray DataArray's own metadata, stored beside the array for xarray to read back.

    ``coords`` takes xarray's spellings (values alone along the dim of the same name, or
    ``(dims, values[, attrs])``) and holds them checked, as :class:`Coordinate`: whatever cannot
    be stored is refused here, before a write starts.
    """

    name: Hashable | None
    dims: tuple[str, ...]
    attrs: Mapping[str, Any]
    coords: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checked = {
            str(name): _coordinate(str(name), spelled, self.dims)
            for name, spelled in self.coords.items()
        }
        if self.name is not None and str(self.name) in checked:
            raise LayoutError(
                f"Coordinate {str(self.name)!r} has the array's own name, and a Dataset cannot "
                "hold both, so the store would not open. Rename the array or the coordinate."
            )
        object.__setattr__(self, "coords", checked)

    def nodes(self) -> dict[str, Coordinate]:
        """The coordinates stored as nodes under ``coords/``: all but ranges."""
        return {k: c for k, c in self.coords.items() if not isinstance(c.values, Range)}


def labels_of(array: Any) -> Labels:
    """The labels of an xarray DataArray: name, dims, attrs and every coordinate, checked."""
    import pandas as pd

    coords = {}
    for name, coord in array.coords.items():
        values: Any = _range_of(name, coord, array.xindexes.get(name))
        if values is None:
            values = coord.data  # pandas' own array where xarray keeps one (.values converts)
        if not isinstance(values, (Range, pd.api.extensions.ExtensionArray)):
            values = np.asarray(coord.values)
        if _is_arange(name, coord.dims, values):
            values = Range(int(values[0]), int(values[1] - values[0]), values.size, "<i8", "pandas")
        coords[str(name)] = (tuple(str(d) for d in coord.dims), values, dict(coord.attrs))
    return Labels(
        name=array.name,
        dims=tuple(str(dim) for dim in array.dims),
        attrs=dict(array.attrs),
        coords=coords,
    )


def _range_of(name: Hashable, coord: Any, index: Any) -> Range | None:
    """The coordinate's values as a :class:`Range`, read off its index (xarray's ``RangeIndex``
    or a pandas ``RangeIndex``) without making them; None for any other."""
    import pandas as pd
    from xarray.indexes import PandasIndex, RangeIndex

    if isinstance(index, RangeIndex) and index.coord_name == name:
        dtype = np.dtype(index.transform.dtype).str
        return Range(_number(index.start), _number(index.step), index.size, dtype, "xarray")
    if isinstance(index, PandasIndex) and isinstance(index.index, pd.RangeIndex):
        held = index.index
        if coord.dtype == np.int64:
            return Range(int(held.start), int(held.step), len(held), "<i8", "pandas")
    return None


def _number(x: Any) -> Any:
    """``x`` as a Python number, which JSON takes (numpy's scalars it refuses)."""
    return x.item() if isinstance(x, np.generic) else x


def _is_arange(name: Hashable, dims: tuple[Hashable, ...], values: Any) -> bool:
    """Whether ``values`` are int64 and evenly spaced along their own dim (at least two)."""
    if dims != (name,) or not isinstance(values, np.ndarray) or values.dtype != np.int64:
        return False
    if values.size < 2 or values[1] == values[0]:
        return False
    step = values[1] - values[0]
    return bool(np.all(np.diff(values) == step))


def frame_coords(
    frame: Any, dim: str, dims: tuple[str, ...], taken: set[str]
) -> dict[str, tuple[tuple[str, ...], Any]]:
    """A pandas DataFrame's columns as coordinates along ``dim`` (categoricals kept), in
    xarray's spelling ``(dims, values)``, so they suit a DataArray and :class:`Labels` alike.

    A column whose name is in ``taken`` (a dim, the array's name, another table's column) is
    stored as
    ``{dim}_{column}``, and ``taken`` grows by each name used. A column that cannot be stored is
    left out with a warning naming it, so one odd column of an annotation table does not stop
    the matrix from being written.
    """
    coords = {}
    for column in frame.columns:
        name = str(column)
        name = f"{dim}_{name}" if name in taken else name
        try:
            if name in taken:
                raise LayoutError(
                    f"both {str(column)!r} and {name!r} are taken, and one coordinate would "
                    "replace the other; rename the column."
                )
            coordinate = _coordinate(name, (dim, frame[column].array), dims)
        except LayoutError as refused:
            warnings.warn(f"column {column!r} left out: {refused}", UserWarning, stacklevel=2)
            continue
        coords[name] = (coordinate.dims, coordinate.values)
        taken.add(name)
    return coords


def _coordinate(name: str, spelled: Any, dims: tuple[str, ...]) -> Coordinate:
    """``spelled`` as a :class:`Coordinate`, refusing what the store cannot hold faithfully."""
    if isinstance(spelled, Coordinate):
        spelled = (spelled.dims, spelled.values, spelled.attrs)
    if not isinstance(spelled, tuple):
        spelled = ((name,), spelled)
    where, values, *rest = spelled
    where = (where,) if isinstance(where, str) else tuple(str(d) for d in where)
    attrs = dict(rest[0]) if rest else {}
    if "/" in name or name in ("", ".", "..") or name.startswith("__"):
        raise LayoutError(
            f"Coordinate {name!r} cannot name a zarr node (no '/', not '.', '..' or empty, no "
            "leading '__'), so it would land elsewhere in the store. Rename it first."
        )
    if len(where) > 1 or any(d not in dims for d in where) or (name in dims and where != (name,)):
        raise LayoutError(
            f"Coordinate {name!r} lies along {where} of an array with dims {dims}; a store keeps "
            "scalar coordinates and coordinates along one of its dims only. Drop it "
            f"(.drop_vars({name!r})) and store it beside the array, e.g. with to_zarr."
        )
    if not isinstance(values, Range):
        values = _storable(name, values)
    if np.ndim(values) != len(where):
        raise LayoutError(
            f"Coordinate {name!r} has {np.ndim(values)} axes but lies along {where}; pass "
            "(dims, values) with one dim per axis."
        )
    _check_json(f"Coordinate {name!r}'s attrs", attrs)
    return Coordinate(where, values, attrs)


def _storable(name: str, values: Any) -> Any:
    """``values`` as numpy (or a ``pandas.Categorical`` of storable categories), or refused.

    pandas' other extension arrays become numpy where numpy holds their values as they are:
    nullable integers, booleans and strings without missing values, nullable floats with them
    (as NaN). Missing values anywhere else are refused, with what to do.
    """
    import pandas as pd

    if isinstance(values, (pd.Series, pd.Index)):
        values = values.array
    if isinstance(values, pd.Categorical):
        _storable(f"{name}'s categories", np.asarray(values.categories))
        return values
    masked = getattr(getattr(values, "dtype", None), "numpy_dtype", None)
    if masked is not None and masked.kind != "f" and values.isna().any():
        raise LayoutError(
            f"Coordinate {name!r} holds missing values in pandas dtype {values.dtype}; numpy "
            "would turn them into NaN or objects and the dtype would change. Fill them, cast to "
            "float (missing as NaN), or make it a pandas Categorical (missing kept as code -1)."
        )
    values = np.asarray(values)
    kind = values.dtype.kind
    if kind in "biufcUTMm":
        return values
    inferred = pd.api.types.infer_dtype(values.ravel(), skipna=False) if kind == "O" else ""
    if inferred in ("string", "empty"):
        return values.astype(str)
    if kind == "O" and pd.isna(values).any():
        raise LayoutError(
            f"Coordinate {name!r} holds missing values among {inferred} objects; numpy holds "
            "no missing string, so they would come back as other values. Fill them, or make it "
            "a pandas Categorical (missing kept as code -1)."
        )
    raise LayoutError(
        f"Coordinate {name!r} holds {inferred or values.dtype} values, which the store keeps "
        "only as numbers, booleans, strings, datetimes or pandas Categoricals; anything else "
        "would come back changed. Convert it first (e.g. .astype(str))."
    )


def _check_json(what: str, document: Any) -> None:
    try:
        json.dumps(document)
    except (TypeError, ValueError) as unsupported:
        raise LayoutError(
            f"{what} cannot be stored as JSON ({unsupported}); they would be lost on reading. "
            "Convert them to strings, numbers or lists first."
        ) from unsupported


def labels_attributes(labels: Labels | None) -> dict[str, Any]:
    """The root attributes holding ``labels`` (none without labels), refusing what JSON loses.

    Returned rather than written so the writer can create the root group with them in one
    document write.
    """
    if labels is None:
        return {}
    ranges = {
        name: {"dims": list(c.dims), **c.values.document(), ATTRS_KEY: dict(c.attrs)}
        for name, c in labels.coords.items()
        if isinstance(c.values, Range)
    }
    document = {
        "name": labels.name,
        "dims": list(labels.dims),
        "attrs": dict(labels.attrs),
        "coords": sorted(set(labels.coords) - set(ranges)),
        **({RANGES_KEY: ranges} if ranges else {}),
    }
    _check_json("The DataArray's name or attrs", document)
    return {LABELS_KEY: document}


def write_coords(root: zarr.Group, labels: Labels | None) -> None:
    """Each of ``labels``' coordinates as a node under ``coords/``, but ranges (stored as their
    formula by :func:`labels_attributes`)."""
    nodes = {} if labels is None else labels.nodes()
    if not nodes:
        return
    import pandas as pd

    group = root.create_group(COORDS_GROUP)
    for name, coordinate in nodes.items():
        attributes = {ATTRS_KEY: dict(coordinate.attrs)} if coordinate.attrs else {}
        values = coordinate.values
        if isinstance(values, pd.Categorical):
            categorical = group.create_group(
                name, attributes={**CATEGORICAL, "ordered": bool(values.ordered), **attributes}
            )
            categories = np.asarray(values.categories)
            _write_array(
                categorical, "codes", values.codes, coordinate.dims, _anndata(values.codes)
            )
            _write_array(categorical, "categories", categories, None, _anndata(categories))
        else:
            _write_array(group, name, values, coordinate.dims, attributes)


def _anndata(values: np.ndarray[Any, Any]) -> dict[str, str]:
    """anndata's encoding attributes for a plain array, so its reader does not warn."""
    kind = "string-array" if values.dtype.kind in "UOT" else "array"
    return {"encoding-type": kind, "encoding-version": "0.2.0"}


def _write_array(
    group: zarr.Group,
    name: str,
    values: np.ndarray[Any, Any],
    dims: tuple[str, ...] | None,
    attributes: dict[str, Any],
) -> None:
    kind = values.dtype.kind
    if kind in "Mm":  # zarr's datetime dtypes are extensions other readers may refuse
        attributes = {**attributes, TIME_DTYPE_KEY: values.dtype.str}
        values = values.view(np.int64)
    import zarr

    # every chunk has an object, zeros included, so validation can tell a lost one
    with zarr.config.set({"array.write_empty_chunks": True}):
        if kind in "UOT":  # variable-length UTF-8: the string dtype with a spec
            array = group.create_array(
                name, shape=values.shape, dtype=str, dimension_names=dims, attributes=attributes
            )
            array[...] = values.astype(str)
        else:
            group.create_array(name, data=values, dimension_names=dims, attributes=attributes)


def read_labels(
    root: AsyncGroup, shape: tuple[int, ...], location: str, skip: Collection[str] = ()
) -> Labels:
    """The labels stored at ``root`` (of an array of ``shape``), or unnamed ``dim_k`` dims where
    none are stored.

    Reads the coordinates' nodes only, all at once (one round of requests on an object store),
    but those named in ``skip``: a coordinate along a genome's positions is 8 bytes a position.
    """
    from sporadik_dask.store.storage import run

    rank = len(shape)
    stored: dict[str, Any] = dict(root.attrs).get(LABELS_KEY) or {}
    dims = tuple(stored.get("dims") or (f"dim_{axis}" for axis in range(rank)))
    if len(dims) != rank:
        raise SporadikError(
            f"{location} stores dims {list(dims)} for a rank-{rank} array; the labels "
            "and the block disagree, so the dims cannot be trusted. Rewrite the store."
        )
    names = [str(name) for name in stored.get("coords", []) if str(name) not in skip]
    # none stored: no trip to zarr's event loop (0.3 ms of a region's read)
    coordinates = run(_read_coordinates(root, names, dims, location)) if names else []
    coords = dict(zip(names, coordinates, strict=True))
    for name, formula in (stored.get(RANGES_KEY) or {}).items():
        if name not in skip:
            coords[name] = _read_range(name, formula, dict(zip(dims, shape, strict=True)), location)
    return Labels(stored.get("name"), dims, stored.get("attrs", {}), coords)


def _read_range(name: str, formula: Any, sizes: dict[str, int], location: str) -> Coordinate:
    """A coordinate stored as its formula, refused if the formula is not one, or not one label
    a position of its dim."""
    try:
        (dim,) = formula["dims"]
        values = Range(*(formula[k] for k in ("start", "step", "size", "dtype", "index")))
        np.dtype(values.dtype)
        exact = values.index == "xarray" or {type(values.start), type(values.step)} == {int}
        known = values.index in ("pandas", "xarray") and exact and values.step != 0
        known = known and values.size == sizes.get(dim)
    except (KeyError, TypeError, ValueError):
        known = False
    if not known:
        raise SporadikError(
            f"{location}: the range stored for coordinate {name!r} ({formula!r}) is not a "
            "start, step, size, dtype and index giving one label a position of one of the dims "
            f"{sizes}, so its labels cannot be made. Rewrite the store."
        )
    return Coordinate((dim,), values, formula.get(ATTRS_KEY, {}))


async def _read_coordinates(
    root: AsyncGroup, names: list[str], dims: tuple[str, ...], location: str
) -> list[Coordinate]:
    if not names:
        return []
    group = await root.getitem(COORDS_GROUP)
    return list(await asyncio.gather(*(_read_coordinate(group, n, dims, location) for n in names)))


async def _read_coordinate(
    group: Any, name: str, dims: tuple[str, ...], location: str
) -> Coordinate:
    from sporadik_dask.store.zarr_adapter import AsyncArray

    node = await group.getitem(name)
    attributes = dict(node.attrs)
    if isinstance(node, AsyncArray):
        values = await _read_array(node)
        where = node.metadata.dimension_names
    elif attributes.get("encoding-type") == CATEGORICAL["encoding-type"]:
        import pandas as pd

        codes_node, categories_node = await asyncio.gather(
            node.getitem("codes"), node.getitem("categories")
        )
        codes, categories = await asyncio.gather(
            _read_array(codes_node), _read_array(categories_node)
        )
        values = pd.Categorical.from_codes(
            codes, categories, ordered=bool(attributes.get("ordered"))
        )
        where = codes_node.metadata.dimension_names
    else:
        raise SporadikError(
            f"{location}: {COORDS_GROUP}/{name} is neither an array nor a categorical group, so "
            "the coordinate cannot be read. Rewrite the store."
        )
    if where is None:  # written before coordinates named their dims: a dimension coordinate
        where = (name,) if name in dims and np.ndim(values) == 1 else ()
    if len(where) != np.ndim(values) or any(d not in dims for d in where):
        raise SporadikError(
            f"{location}: coordinate {name!r} lies along {tuple(where)} with {np.ndim(values)} "
            f"axes, not along the array's dims {dims}; it cannot be placed. Rewrite the store."
        )
    return Coordinate(tuple(str(d) for d in where), values, attributes.get(ATTRS_KEY, {}))


async def _read_array(node: Any) -> np.ndarray[Any, Any]:
    """A coordinate array's values, with datetimes restored and strings as numpy ``str``."""
    values = np.asarray(await node.getitem(...))
    stored_dtype = dict(node.attrs).get(TIME_DTYPE_KEY)
    if stored_dtype is not None:
        dtype = np.dtype(stored_dtype)
        if dtype.kind not in "Mm" or values.dtype != np.int64:
            raise SporadikError(
                f"Coordinate array {node.name!r} declares {TIME_DTYPE_KEY} {stored_dtype!r} over "
                f"{values.dtype} values; only int64 holds datetimes or timedeltas. Rewrite it."
            )
        return values.view(dtype)
    return _plain_strings(values)


def _plain_strings(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``values``, with numpy's variable-width ``StringDType`` turned into fixed-width ``str``
    as wide as the longest (numpy casts to ``str`` only with a width given).

    zarr returns its string dtype as numpy's ``StringDType``, which ``np.save``, ``.astype(str)``
    and older pandas refuse.
    """
    if values.dtype.kind != "T":
        return values
    width = int(np.strings.str_len(values).max(initial=1))
    return values.astype(f"U{width}")
