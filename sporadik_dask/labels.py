"""An xarray DataArray's labels on disk: its name, dims and attrs, and its 1-D coordinates.

The one place that knows how labels are stored, so that the writer and the xarray backend agree
by construction: a root attribute ``xarray`` (name, dims, attrs, which dims have coords) and a
group ``coords/`` beside ``layouts/`` holding one array per dimension. The format itself ignores
both, so other readers (the reference, anndata, zarrita) read the store unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sporadik_dask.errors import LayoutError, SporadikError

if TYPE_CHECKING:
    import zarr

__all__ = [
    "COORDS_GROUP",
    "LABELS_KEY",
    "Labels",
    "labels_attributes",
    "read_labels",
    "write_coords",
]

#: Root attribute holding an xarray DataArray's name, dims and attrs; other readers ignore it.
LABELS_KEY = "xarray"
#: Group holding 1-D coordinates by dimension name, beside ``layouts/``.
COORDS_GROUP = "coords"


@dataclass(frozen=True, slots=True)
class Labels:
    """An xarray DataArray's own metadata, stored beside the array for xarray to read back."""

    name: Hashable | None
    dims: tuple[str, ...]
    attrs: Mapping[str, Any]
    #: 1-D coordinates along each dimension that has them, as numpy arrays.
    coords: Mapping[str, Any] = field(default_factory=dict)


def labels_attributes(labels: Labels | None) -> dict[str, Any]:
    """The root attributes holding ``labels`` (none without labels), refusing what JSON loses.

    Returned rather than written so the writer can create the root group with them in one
    document write.
    """
    if labels is None:
        return {}
    document = {
        "name": labels.name,
        "dims": list(labels.dims),
        "attrs": dict(labels.attrs),
        "coords": sorted(labels.coords),
    }
    try:
        json.dumps(document)
    except TypeError as unsupported:
        raise LayoutError(
            f"The DataArray's name or attrs cannot be stored as JSON ({unsupported}); they would "
            "be lost on reading. Convert them to strings, numbers or lists first."
        ) from unsupported
    return {LABELS_KEY: document}


def write_coords(root: zarr.Group, labels: Labels | None) -> None:
    """Each of ``labels``' coordinates as an array under ``coords/``; strings as UTF-8."""
    if labels is None or not labels.coords:
        return
    coords = root.create_group(COORDS_GROUP)
    for dim, values in labels.coords.items():
        if values.dtype.kind in "USO":  # variable-length UTF-8: the string dtype with a spec
            coords.create_array(dim, shape=values.shape, dtype=str)[:] = values.astype(str)
        else:
            coords.create_array(dim, data=values)


def read_labels(root: zarr.Group, rank: int, location: str) -> Labels:
    """The labels stored at ``root``, or unnamed ``dim_k`` dims where none are stored.

    String coordinates come back as numpy ``str`` arrays: zarr returns its string dtype as
    numpy's ``StringDType``, which ``np.save``, ``.astype(str)`` and older pandas refuse.
    """
    import zarr

    stored: dict[str, Any] = dict(root.attrs).get(LABELS_KEY) or {}  # type: ignore[assignment]
    dims = tuple(stored.get("dims") or (f"dim_{axis}" for axis in range(rank)))
    if len(dims) != rank:
        raise SporadikError(
            f"{location} stores dims {list(dims)} for a rank-{rank} array; the labels "
            "and the block disagree, so the dims cannot be trusted. Rewrite the store."
        )
    coords = {}
    for dim in stored.get("coords", []):
        values = root[f"{COORDS_GROUP}/{dim}"]
        if not isinstance(values, zarr.Array):
            raise SporadikError(f"{location}: {COORDS_GROUP}/{dim} is not an array.")
        coords[dim] = _plain_strings(np.asarray(values[...]))
    return Labels(stored.get("name"), dims, stored.get("attrs", {}), coords)


def _plain_strings(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``values``, with numpy's variable-width ``StringDType`` turned into fixed-width ``str``
    as wide as the longest (numpy casts to ``str`` only with a width given)."""
    if values.dtype.kind != "T":
        return values
    width = int(np.strings.str_len(values).max(initial=1))
    return values.astype(f"U{width}")
