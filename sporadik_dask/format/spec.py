"""The format, spec 1: names, the block, the rules by rank, and every check a reader makes.

Written from the format's description rather than imported from the reference package, so that
"the format is specified" stays a testable claim: this module and `sporadik.spec` must agree,
and the conformance tests check that they do. Pure: numpy and the standard library only, no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np
import numpy.typing as npt

from sporadik_dask.format.errors import IncompleteError, LayoutError, SpecError, SporadikError

__all__ = [
    "ARRAY_NAMES",
    "BLOCK_KEY",
    "ENCODING_VERSION",
    "LAYOUTS_GROUP",
    "MAXIMA",
    "MIN_RANK",
    "SPEC_VERSION",
    "SUPPORTED_SPECS",
    "TARGET_CHUNK_BYTES",
    "Block",
    "LayoutEntry",
    "LayoutGeometry",
    "anndata_encoding",
    "check_indices",
    "check_indptr",
    "chunk_for",
    "declared_shape",
    "index_dtype",
    "layout_path",
    "magnitudes",
    "maxima_dtype",
    "parse_block",
]

#: The spec version written here.
SPEC_VERSION = "1"
#: The versions read here; an unknown one is refused, since it selects how every byte is read.
SUPPORTED_SPECS = frozenset({"1"})
#: Key of the block in the root group's attributes, namespaced because attributes are shared ground.
BLOCK_KEY = "sporadik"
#: The group the layouts hang under.
LAYOUTS_GROUP = "layouts"
#: A compressed axis needs at least one other axis to hold the positions; there is no highest rank.
MIN_RANK = 2
#: anndata's sparse-group version, written in every layout's attributes.
ENCODING_VERSION = "0.1.0"
#: The three arrays every layout holds, in anndata's spelling.
ARRAY_NAMES = ("data", "indices", "indptr")
#: The optional, unannounced per-slice largest absolute value.
MAXIMA = "maxima"
#: Bytes per zarr chunk: 32,768 four-byte elements, about one object-store request (the reference
#: measured 0.95 ms a slice at this size, 3.00 ms at 512 elements, 23.55 ms at 4 Mi).
TARGET_CHUNK_BYTES = 131_072

_PATH = re.compile(rf"^{LAYOUTS_GROUP}/axis(0|[1-9][0-9]*)$")


def layout_path(indexed_axis: int) -> str:
    """Where the layout making ``indexed_axis`` contiguous lives inside the prefix."""
    return f"{LAYOUTS_GROUP}/axis{int(indexed_axis)}"


def anndata_encoding(rank: int, indexed_axis: int) -> str:
    """The ``encoding-type`` a layout declares: anndata's at rank 2, a raveled CSR above it."""
    if rank == MIN_RANK and indexed_axis == 1:
        return "csc_matrix"
    return "csr_matrix"


def declared_shape(
    shape: Sequence[int], indexed_axis: int, index_order: Sequence[int]
) -> tuple[int, ...]:
    """The shape a layout's group declares: the array's at rank 2, the raveled pair above it."""
    if len(shape) == MIN_RANK:
        return tuple(int(size) for size in shape)
    return (int(shape[indexed_axis]), math.prod(int(shape[axis]) for axis in index_order))


def index_dtype(extent: int, nnz: int) -> np.dtype[Any]:
    """The width of ``indices`` and ``indptr``: int32 until an index or an offset would not fit.

    The reference and scipy choose the same way, which is what keeps rank-2 bytes identical.
    """
    return np.dtype(np.int32 if max(int(extent), int(nnz)) < 2**31 else np.int64)


def chunk_for(dtype: npt.DTypeLike, length: int) -> int:
    """Elements per zarr chunk: :data:`TARGET_CHUNK_BYTES` worth, never more than the array."""
    chunk = max(TARGET_CHUNK_BYTES // max(np.dtype(dtype).itemsize, 1), 1)
    return min(chunk, int(length)) if length else chunk


class LayoutGeometry:
    """What a layout's shape, indexed axis and index order imply, wherever a layout is held."""

    __slots__ = ()
    shape: tuple[int, ...]
    indexed_axis: int
    index_order: tuple[int, ...]

    @property
    def positions(self) -> int:
        """How many runs the layout holds: the length of the indexed axis."""
        return self.shape[self.indexed_axis]

    @property
    def index_shape(self) -> tuple[int, ...]:
        """The shape ``indices`` are raveled over, in ``index_order``."""
        return tuple(self.shape[axis] for axis in self.index_order)

    @property
    def extent(self) -> int:
        """How many cells one run can address: every index lies in ``[0, extent)``."""
        return math.prod(self.index_shape)


@dataclass(frozen=True, slots=True)
class LayoutEntry:
    """One layout as the block names it."""

    #: Where the child group is, relative to the prefix: always ``layouts/axis{indexed_axis}``.
    path: str
    #: The axis this layout makes contiguous.
    indexed_axis: int
    #: The other axes, in the order ``indices`` was raveled over them.
    index_order: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        """The entry as written in the block."""
        return {
            "path": self.path,
            "indexed_axis": self.indexed_axis,
            "index_order": list(self.index_order),
        }


@dataclass(frozen=True, slots=True)
class Block:
    """The completion block: written last, it says which layouts the writer finished."""

    #: The array's own shape, at its own rank.
    shape: tuple[int, ...]
    #: The finished layouts, by indexed axis.
    layouts: tuple[LayoutEntry, ...]
    spec: str = SPEC_VERSION
    complete: bool = True

    @classmethod
    def over(cls, shape: Sequence[int], index_orders: Mapping[int, Sequence[int]]) -> Block:
        """The block for ``shape`` holding one layout per key of ``index_orders``."""
        return cls(
            shape=tuple(int(size) for size in shape),
            layouts=tuple(
                LayoutEntry(layout_path(axis), int(axis), tuple(int(a) for a in index_orders[axis]))
                for axis in sorted(index_orders)
            ),
        )

    def to_json(self) -> dict[str, Any]:
        """The block as written under :data:`BLOCK_KEY`."""
        return {
            "spec": self.spec,
            "complete": self.complete,
            "shape": list(self.shape),
            "layouts": [entry.to_json() for entry in self.layouts],
        }


def _integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_block(attributes: Mapping[str, Any], where: str) -> Block:
    """The block in a root group's attributes, refusing one a reader cannot trust.

    Checks, in the order the reference makes them so the same store fails with the same class:

    1. a block is present and is an object (else the upload did not finish);
    2. its spec is one read here;
    3. it says ``complete``;
    4. its shape has at least two non-negative integer sizes;
    5. it names at least one layout, and no more than the rank;
    6. every entry names an integer axis of the shape, a path that stays inside the prefix, and an
       ``index_order`` that is a permutation of the other axes;
    7. no axis is named twice.

    The path is checked against ``layouts/axis{indexed_axis}`` by the caller after the child is
    looked up, as the reference does: a name with nothing behind it is an unfinished upload.
    """
    block = attributes.get(BLOCK_KEY)
    if not isinstance(block, Mapping):
        found = "" if block is None else f" (found a {type(block).__name__})"
        raise IncompleteError(
            f"{where} carries no {BLOCK_KEY!r} block{found}, so it is not a finished sparse "
            "store (a write still running, or one that never ended): the block is written last, "
            "and without it missing chunks would read as zeros. Write the store again, or check "
            "this is the prefix you meant."
        )
    spec = block.get("spec")
    if not isinstance(spec, str) or spec not in SUPPORTED_SPECS:
        raise SpecError(
            f"{where} declares spec {spec!r}, and this reads {sorted(SUPPORTED_SPECS)}. A spec "
            "selects how every byte is read, so guessing would return wrong values; upgrade "
            "sporadik-dask."
        )
    if block.get("complete") is not True:
        raise IncompleteError(
            f"{where} declares complete={block.get('complete')!r}: its writer did not finish, so "
            "its chunks may be missing and would read as zeros. Write it again."
        )
    raw_shape = block.get("shape")
    if (
        not isinstance(raw_shape, list)
        or len(raw_shape) < MIN_RANK
        or not all(_integer(size) and size >= 0 for size in raw_shape)
    ):
        raise SporadikError(
            f"{where} declares shape {raw_shape!r}; a sparse array has at least {MIN_RANK} axes, "
            "each a non-negative integer size. Every check of the layouts is against this shape."
        )
    shape = tuple(int(size) for size in raw_shape)
    named = block.get("layouts")
    if not isinstance(named, list) or not named:
        raise SporadikError(f"{where} names no layouts ({named!r}), so it holds no array.")
    if len(named) > len(shape):
        raise SporadikError(
            f"{where} names {len(named)} layouts over a rank-{len(shape)} array; there is at most "
            "one per axis, so the block was not written by a conforming writer."
        )
    entries: list[LayoutEntry] = []
    for entry in named:
        if not isinstance(entry, Mapping):
            raise SporadikError(
                f"{where} names layout {entry!r}, which is not an object with path, indexed_axis "
                "and index_order."
            )
        entries.append(_parse_entry(entry, shape, where))
    axes = [entry.indexed_axis for entry in entries]
    if len(set(axes)) != len(axes):
        raise LayoutError(
            f"{where} names two layouts making one axis contiguous ({axes}); a reader could not "
            "tell which to trust. Rewrite the store with one layout per axis."
        )
    return Block(shape=shape, layouts=tuple(entries), spec=spec)


def _parse_entry(entry: Mapping[str, Any], shape: tuple[int, ...], where: str) -> LayoutEntry:
    path = entry.get("path")
    if not isinstance(path, str) or _leaves_prefix(path):
        raise LayoutError(
            f"{where} names a layout at {path!r}, which is not a path inside the prefix; "
            f"following it could read another store's bytes. A layout lives at "
            f"'{LAYOUTS_GROUP}/axis{{k}}'."
        )
    axis = entry.get("indexed_axis")
    if not _integer(axis) or not 0 <= axis < len(shape):
        raise LayoutError(
            f"Layout {path!r} in {where} declares indexed_axis {axis!r}, which is not an axis of "
            f"{shape}."
        )
    others = tuple(a for a in range(len(shape)) if a != axis)
    order = entry.get("index_order")
    if (
        not isinstance(order, list)
        or not all(_integer(a) for a in order)
        or sorted(order) != list(others)
    ):
        raise LayoutError(
            f"Layout {path!r} in {where} declares index_order {order!r}, not a permutation of the "
            f"axes it did not compress {list(others)}. That order is how indices were raveled; a "
            "wrong one would put every value in a different cell."
        )
    return LayoutEntry(path=path, indexed_axis=int(axis), index_order=tuple(order))


def _leaves_prefix(path: str) -> bool:
    """Whether ``path`` could name something outside the prefix (absolute, ``..``, empty parts)."""
    if _PATH.match(path):
        return False
    parts = path.replace("\\", "/").split("/")
    return path.startswith(("/", "\\")) or any(part in ("", ".", "..") for part in parts)


def maxima_dtype(dtype: npt.DTypeLike) -> np.dtype[Any]:
    """dtype of a layout's ``maxima`` for values of ``dtype``: what ``np.abs`` returns, made
    unsigned for signed integers.

    The format asks for "the largest absolute value" of each slice and names no dtype. A signed
    integer's minimum has none in its own dtype (``np.abs`` of int8 ``-128`` is ``-128``), and
    the unsigned integer of the same width holds every magnitude exactly (128 as uint8).
    """
    found = np.abs(np.zeros(0, dtype=dtype)).dtype
    return np.dtype(f"u{found.itemsize}") if found.kind == "i" else found


def magnitudes(absolute: npt.ArrayLike) -> npt.NDArray[Any]:
    """Absolute values as ``np.abs`` returns them, or a ``maxima`` array as stored, in
    :func:`maxima_dtype`.

    Signed integers are read as the unsigned integers of their width: the one negative value
    ``np.abs`` leaves, the minimum, wrapped to itself, has the bits of its magnitude there, and
    every other value is unchanged. So ``maxima`` the reference writes in the values' own dtype
    (``-128`` for int8) read as the magnitudes this package writes (``128`` as uint8).
    """
    found = np.asarray(absolute)
    if found.dtype.kind != "i":
        return found
    return found.view(maxima_dtype(found.dtype))


def check_indptr(indptr: npt.NDArray[Any], nnz: int, where: str) -> None:
    """Refuse an ``indptr`` whose runs would slice outside ``data`` or overlap.

    Not checked by the reference: a decreasing or overshooting ``indptr`` reads as empty runs, or as
    runs from a neighbouring position, and raises nothing.
    """
    if indptr.size == 0:
        raise LayoutError(
            f"{where}: indptr is empty; it holds one entry per position plus the end."
        )
    if int(indptr[0]) != 0:
        raise LayoutError(
            f"{where}: indptr starts at {int(indptr[0])}, not 0, so the first run would skip or "
            "invent values. The layout is corrupt; rewrite it."
        )
    if indptr.size > 1 and bool(np.any(indptr[1:] < indptr[:-1])):
        where_down = int(np.flatnonzero(indptr[1:] < indptr[:-1])[0])
        raise LayoutError(
            f"{where}: indptr decreases after position {where_down} "
            f"({int(indptr[where_down])} -> {int(indptr[where_down + 1])}), so that run would read "
            "as empty or overlap its neighbour. The layout is corrupt; rewrite it."
        )
    if int(indptr[-1]) != int(nnz):
        raise LayoutError(
            f"{where}: indptr ends at {int(indptr[-1])} but data holds {nnz} values, so runs would "
            "miss values or read past the end. The layout is corrupt or torn; rewrite it."
        )


def check_indices(indices: npt.NDArray[Any], extent: int, where: str) -> None:
    """Refuse indices outside the raveled extent, which would unravel to cells of no array."""
    if indices.size == 0:
        return
    low, high = int(indices.min()), int(indices.max())
    if low < 0 or high >= extent:
        bad = low if low < 0 else high
        raise LayoutError(
            f"{where}: holds index {bad}, outside the raveled extent {extent}; it names no cell of "
            "the array and would unravel to a wrong one. The layout is corrupt; rewrite it."
        )
