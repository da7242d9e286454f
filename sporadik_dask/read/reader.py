"""``StoreReader``: a store's description and arrays behind one small, immutable front.

Each job lives in its own module: :mod:`~sporadik_dask.read.selection` resolves a key,
:mod:`~sporadik_dask.read.routing` picks a layout, :mod:`~sporadik_dask.read.fetch` makes the two
read waves, :mod:`~sporadik_dask.read.assembly` builds the result and
:mod:`~sporadik_dask.read.statistics` answers per-position questions. The reader holds what they
share (where the store is, its description, the arrays opened once) and pickles as a location;
:mod:`~sporadik_dask.read.checked` makes each read return only the state it opened.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import zarr

import sporadik_dask.read.statistics as statistics
from sporadik_dask.format.errors import LayoutError, ScanWarning, SporadikError, StoreReplacedError
from sporadik_dask.format.spec import MAXIMA, magnitudes
from sporadik_dask.marks import mark_read
from sporadik_dask.read.assembly import assemble, assemble_points
from sporadik_dask.read.checked import as_opened, fetching
from sporadik_dask.read.fetch import (
    fetch_offsets,
    fetch_runs,
    fetch_runs_in_place,
    fetch_values,
)
from sporadik_dask.read.routing import Brackets, Route, Runs, Stretch, candidates, route
from sporadik_dask.read.selection import (
    Axis,
    Positions,
    Selection,
    as_array,
    distinct,
    normalize_points,
)
from sporadik_dask.store.as_opened import check_as_opened_async, check_store_as_opened_async
from sporadik_dask.store.describe import (
    LayoutDescription,
    OpenedStore,
    StoreDescription,
    open_store,
    reopen_store_async,
)
from sporadik_dask.store.storage import StoreLike, location_of, run

__all__ = ["StoreReader"]

Format = Literal["coo", "gcxs"]


class StoreReader:
    """A store's description and lazily opened arrays; pickles as a location, never a handle.

    What a reader reads from (``store``, ``storage_options``, ``description``) and how ``[]``
    answers (``axis``, ``format``) are fixed at construction; only the cache of opened arrays
    fills in later.
    """

    __slots__ = (
        "__weakref__",
        "_axis",
        "_description",
        "_format",
        "_opened",
        "_storage_options",
        "_store",
    )

    def __init__(
        self,
        store: StoreLike,
        *,
        storage_options: dict[str, Any] | None = None,
        description: StoreDescription | None = None,
        axis: int | None = None,
        format: Format = "coo",
    ) -> None:
        if format not in ("coo", "gcxs"):
            raise SporadikError(f"format={format!r}; choose 'coo' or 'gcxs'.")
        if isinstance(store, os.PathLike):
            store = os.fspath(store)
        self._store = store
        self._storage_options = storage_options
        self._opened: OpenedStore | None = None
        if description is None:
            self._opened = open_store(store, storage_options=storage_options)
            description = self._opened.description
        self._description = description
        if axis is not None and axis not in description.layouts:
            raise LayoutError(
                f"{self.location} has no layout making axis {axis} contiguous (it has "
                f"{sorted(description.layouts)}); reading along it would scan another. Pass one "
                f"of those, or write it with sporadik_dask.add_axis(store, {axis})."
            )
        if format == "gcxs" and description.dtype == np.float16:
            raise SporadikError(
                f"{self.location} holds float16 values, which sparse.GCXS cannot hold: it checks "
                "its arrays with numba, which has no float16 arrays, so every block would fail "
                "when computed. Read with format='coo' (sparse.COO holds float16), or cast "
                "the COO blocks to float32 before asformat('gcxs')."
            )
        self._axis = axis
        self._format: Format = format

    @classmethod
    def from_opened(
        cls, opened: OpenedStore, *, axis: int | None = None, format: Format = "coo"
    ) -> StoreReader:
        """A reader over a store :func:`~sporadik_dask.store.describe.open_store` opened already:
        its arrays are used as they are, so no metadata document is fetched again."""
        reader = cls(
            opened.store,
            storage_options=opened.storage_options,
            description=opened.description,
            axis=axis,
            format=format,
        )
        reader._opened = opened
        return reader

    @property
    def store(self) -> StoreLike:
        """The store: a local path, a URL, or a zarr store object."""
        return self._store

    @property
    def storage_options(self) -> dict[str, Any] | None:
        """Options for opening a URL (fsspec's)."""
        return self._storage_options

    @property
    def description(self) -> StoreDescription:
        """What the store says about itself, read from metadata documents only."""
        return self._description

    @property
    def axis(self) -> int | None:
        """The layout ``[]`` reads through; ``None`` routes each selection to the cheapest."""
        return self._axis

    @property
    def format(self) -> Format:
        """What ``[]`` returns: ``sparse.COO``, or ``sparse.GCXS`` compressed along ``axis``."""
        return self._format

    def __getstate__(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "storage_options": self.storage_options,
            "description": self.description,
            "axis": self.axis,
            "format": self.format,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["store"],
            storage_options=state["storage_options"],
            description=state["description"],
            axis=state["axis"],
            format=state["format"],
        )

    def __dask_tokenize__(self) -> Any:
        return (type(self).__name__, self.location, repr(self.description), self.axis, self.format)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The values' dtype."""
        return self.description.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape."""
        return self.description.shape

    @property
    def ndim(self) -> int:
        """The array's rank."""
        return len(self.shape)

    @property
    def location(self) -> str:
        """Where the store is, for messages."""
        return location_of(self.store)

    def __repr__(self) -> str:
        axes = "+".join(f"axis{a}" for a in self.description.indexed_axes)
        return f"StoreReader({self.location!r}, shape={self.shape}, {axes})"

    def __getitem__(self, key: Any) -> Any:
        """``key`` in :attr:`format`, so dask's own getter can read blocks (and fuse slices);
        marked as read (:func:`~sporadik_dask.marks.mark_read`)."""
        if self.format == "gcxs" and self.axis is not None:
            return self.read_compressed(key, axis=self.axis)
        return mark_read(self.read(key, axis=self.axis))

    def _check_as_opened(self, failed: Exception | None) -> None:
        """Raise :class:`~sporadik_dask.format.errors.StoreReplacedError` (from ``failed``, what the
        read raised, if anything) unless the store is still the one this reader opened."""
        if isinstance(failed, StoreReplacedError):
            return
        try:
            if self._opened is not None:
                run(check_as_opened_async(self._opened.root.store_path, self.description))
            else:  # it could not be opened again: the read failed there
                run(check_store_as_opened_async(self.store, self.storage_options, self.description))
        except StoreReplacedError as replaced:
            raise replaced from failed
        except Exception:
            if failed is None:
                raise  # the root could not be read: what was read cannot be vouched for

    @as_opened
    def read(self, key: Any, *, axis: int | None = None) -> Any:
        """``key`` of the array as a ``sparse.COO``: two read waves whatever the selection, then
        one request checking the store is still the one opened
        (:func:`~sporadik_dask.read.checked.as_opened`).

        ``key`` takes, per axis, an integer, a slice of any step, an integer array (unsorted,
        repeated, negative) or a boolean mask, as numpy's outer indexing does; ``axis`` forces a
        layout rather than the cheapest.

        1. Bracket the selection's sorted distinct positions in every candidate layout (wave
           one), and route to the layout whose runs touch the fewest zarr chunks.
        2. Read those runs (wave two).
        3. Assemble them into the caller's order and C order (no sparse indexing afterwards).
        """
        import sparse

        selection = Selection.from_key(key, self.shape)
        shape = selection.result_shape
        if selection.empty:
            nothing = np.zeros(0, dtype=self.dtype)
            return sparse.COO(np.zeros((len(shape), 0), dtype=np.int64), nothing, shape=shape)
        chosen = self._route(selection, axis)
        indices, data = self._stored_runs(chosen.layout, chosen.runs)
        coords, values = assemble(selection, chosen.layout, chosen.runs, indices, data)
        if not shape:  # one cell: a scalar, as sparse and numpy give
            return values[0] if values.size else np.zeros((), dtype=self.dtype)[()]
        return sparse.COO(coords, values, shape=shape, has_duplicates=False, sorted=True)

    @as_opened
    def read_points(self, key: Any) -> Any:
        """Pointwise (vectorized) indexing: ``key`` holds one integer array per axis, broadcast
        together, and names the cells ``(key[0][i], key[1][i], ...)``, as numpy's
        ``x[[0, 2], [1, 1]]``. A ``sparse.COO`` of the broadcast shape; two read waves.

        The layout is routed as for the outer selection of each axis's distinct positions; the
        runs of the points' positions along it are read once and joined with the points.
        """
        import sparse

        points, shape = normalize_points(key, self.shape)
        if points[0].size == 0:
            nothing = np.zeros((len(shape), 0), dtype=np.int64)
            return sparse.COO(nothing, np.zeros(0, dtype=self.dtype), shape=shape)
        chosen = self._route(Selection.from_key(tuple(map(distinct, points)), self.shape), None)
        lo, hi = chosen.brackets
        indices, data = self.runs(chosen.layout, lo, hi)
        unique = distinct(points[chosen.layout.indexed_axis])
        hits, values = assemble_points(points, unique, chosen.layout, hi - lo, indices, data)
        if not shape:  # one point named by integers: a scalar, as numpy gives
            return values[0] if values.size else np.zeros((), dtype=self.dtype)[()]
        coords = np.stack(np.unravel_index(hits, shape))
        return sparse.COO(coords, values, shape=shape, has_duplicates=False, sorted=True)

    @property
    def vindex(self) -> _Points:
        """``reader.vindex[rows, cols]``: :meth:`read_points`, spelled as dask spells it."""
        return _Points(self)

    @as_opened
    def route(self, key: Any) -> Route:
        """The layout :meth:`read` would read ``key`` through, and what its runs cost.

        Reads the first wave (``indptr`` brackets) only.
        """
        return self._route(Selection.from_key(key, self.shape), None).widened()

    def _route(self, selection: Selection, axis: int | None) -> Route:
        layouts = self.description.layouts
        if axis is not None and axis not in layouts:
            raise LayoutError(
                f"{self.location} has no layout making axis {axis} contiguous (it has "
                f"{sorted(layouts)}). Read without axis=, or write it with "
                f"sporadik_dask.add_axis(store, {axis})."
            )
        axes = (axis,) if axis is not None else candidates(self.description, selection)
        found = self._offsets([(layouts[a], _bracketed(selection.unique[a])) for a in axes])
        chosen = route(self.description, dict(zip(axes, found, strict=True)))
        if axis is None:
            self._warn_if_scan(selection, chosen.layout.indexed_axis)
        return chosen

    def _warn_if_scan(self, selection: Selection, chosen: int) -> None:
        if selection.narrow(chosen):
            return
        narrow = [
            axis
            for axis in range(self.ndim)
            if selection.narrow(axis) and axis not in self.description.layouts
        ]
        if narrow:
            warnings.warn(
                f"Selecting along axis {narrow[0]} of {self.location} scans every value of layout "
                f"'layouts/axis{chosen}', since the store has no layout making axis {narrow[0]} "
                f"contiguous. sporadik_dask.add_axis(store, {narrow[0]}) writes it once, and then "
                "such selections read only their runs.",
                ScanWarning,
                stacklevel=5,
            )

    @as_opened
    def read_compressed(self, key: Any, *, axis: int) -> Any:
        """``key`` as a ``sparse.GCXS`` compressed along ``axis``.

        A contiguous range of positions along ``axis``, whole along every other axis of a layout
        raveled in ascending order, is the layout's own arrays (``indptr`` rebased): no
        coordinate is built and nothing is sorted, so reductions along the runs are cheap.
        Anything else is read as ``sparse.COO`` and converted.
        """
        import sparse

        layout = self.description.layouts[axis]
        selection = Selection.from_key(key, self.shape)
        positions = selection.positions[axis]
        ranged = isinstance(positions, range) and len(positions) > 0 and positions.step == 1
        if (
            not ranged
            and isinstance(positions, np.ndarray)
            and positions.size > 0
            and bool(np.all(np.diff(positions) == 1))
        ):
            positions, ranged = range(int(positions[0]), int(positions[-1]) + 1), True
        if (
            ranged
            and not selection.dropped
            and all(selection.whole(a) for a in layout.index_order)
            and list(layout.index_order) == sorted(layout.index_order)
        ):
            ((lo, hi),) = self.brackets([(layout, as_array(positions))])
            indices, data = self.runs(layout, lo, hi)
            indptr = np.concatenate(([0], np.cumsum(hi - lo)))
            return sparse.GCXS(
                (data, indices, indptr), shape=selection.out_shape, compressed_axes=(axis,)
            )
        result = self.read(key, axis=axis)
        if result.ndim == 0:
            return result
        return result.asformat("gcxs", compressed_axes=(min(axis, result.ndim - 1),))

    def _opened_store(self) -> OpenedStore:
        """The store's root and arrays, opened once (metadata documents only), kept until
        pickled."""
        if self._opened is None:
            self._opened = run(
                reopen_store_async(self.store, self.storage_options, self.description)
            )
        return self._opened

    def _arrays(self, layout: LayoutDescription) -> dict[str, zarr.Array[Any]]:
        """The layout's arrays, opened once (metadata documents only) and kept until pickled;
        what every fetch from the store goes through."""
        fetching()
        return self._opened_store().layout_arrays(layout)

    @as_opened
    def brackets(self, requests: list[tuple[LayoutDescription, Axis]]) -> list[Brackets]:
        """Wave one: where each position's run starts and stops, for one or more layouts at once.

        Only the ``indptr`` chunks holding the positions (sorted) are read, in one batch; on a
        sharded store, with the shard indexes of ``data`` and ``indices`` a first read needs.
        Brackets are int64, whatever dtype ``indptr`` stores.
        """
        return [
            runs.brackets if isinstance(runs, Stretch) else runs for runs in self._offsets(requests)
        ]

    def _offsets(self, requests: list[tuple[LayoutDescription, Axis]]) -> list[Runs]:
        """:meth:`brackets`, a stretch's offsets as stored (int32, say), for a read's own use."""
        arrays = [self._arrays(layout) for layout, _ in requests]
        return fetch_offsets(
            [
                (layout, found["indptr"], positions)
                for (layout, positions), found in zip(requests, arrays, strict=True)
            ],
            self.location,
            next_arrays=[found[name] for found in arrays for name in ("data", "indices")],
        )

    @as_opened
    def runs(
        self, layout: LayoutDescription, lo: Positions, hi: Positions, *, as_stored: bool = False
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """Wave two: the indices and values of every run, concatenated in the order asked.

        Every zarr chunk the runs touch is fetched once, both arrays in one batch. Indices are
        int64 and checked against the layout's extent, or ``as_stored`` (their stored dtype,
        unchecked) for a caller that checks each index as it uses it.
        """
        if as_stored:
            return self._stored_runs(layout, (lo, hi), check=False)
        indices, data = self._stored_runs(layout, (lo, hi))
        return indices.astype(np.int64, copy=False), data

    def _stored_runs(
        self, layout: LayoutDescription, runs: Runs, *, check: bool = True
    ) -> tuple[npt.NDArray[np.integer[Any]], npt.NDArray[Any]]:
        """:meth:`runs` with the indices as stored (int32, say): what assembly reads, without a
        widened copy of them beside the result."""
        arrays = self._arrays(layout)
        fetch = (arrays["indices"], arrays["data"])
        return fetch_runs(layout, fetch, runs, self.location, check=check)

    @as_opened
    def read_runs(
        self, positions: Positions, *, axis: int
    ) -> tuple[Positions, npt.NDArray[Any], npt.NDArray[Any]]:
        """The runs of ``positions`` (any order, repeats allowed) in the layout along ``axis``,
        one after another as CSR arrays: ``indptr`` (int64), ``indices`` (raveled over the
        layout's other axes, as stored: int32, say) and ``data``. Two read waves.

        What a minibatch of cells is: unlike :meth:`read`, nothing is sorted into C order or
        given coordinates, and each zarr chunk's pieces go straight into place
        (:func:`~sporadik_dask.read.fetch.fetch_runs_in_place`), so a batch of scattered
        positions holds its own values, not the chunks they sit in.
        """
        layout = self._layout_for(axis)
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= layout.positions):
            raise SporadikError(
                f"Positions from {positions.min()} to {positions.max()} along axis {axis} of "
                f"{self.location}, which has {layout.positions}; there is nothing to read "
                "outside it. Pass positions in that range."
            )
        unique = distinct(positions)
        ((lo, hi),) = self.brackets([(layout, unique)]) if unique.size else ((unique, unique),)
        if unique is not positions:
            at = np.searchsorted(unique, positions)
            lo, hi = lo[at], hi[at]
        arrays = self._arrays(layout)
        fetch = (arrays["indices"], arrays["data"])
        indices, data = fetch_runs_in_place(layout, fetch, (lo, hi), self.location)
        indptr = np.zeros(positions.size + 1, dtype=np.int64)
        np.cumsum(hi - lo, out=indptr[1:])
        return indptr, indices, data

    @as_opened
    def run_values(self, layout: LayoutDescription, lo: Positions, hi: Positions) -> Any:
        """:meth:`runs` without the indices: the values alone, half the chunks."""
        return fetch_values(layout, self._arrays(layout)["data"], (lo, hi))

    def _all_brackets(self, axis: int) -> tuple[LayoutDescription, Brackets]:
        """The layout along ``axis`` and the brackets of its every position (all of ``indptr``)."""
        layout = self._layout_for(axis)
        layout.check_whole_read(self.location)
        ((lo, hi),) = self.brackets([(layout, np.arange(layout.positions))])
        return layout, (lo, hi)

    @as_opened
    def counts(self, axis: int) -> Positions:
        """Values per position along ``axis``: ``diff(indptr)``, no value read."""
        _, brackets = self._all_brackets(axis)
        return statistics.counts(brackets)

    @as_opened
    def totals(self, axis: int) -> npt.NDArray[Any]:
        """Sum of the values at each position along ``axis``, over every other axis.

        Read from the layout making ``axis`` contiguous: its ``data`` and ``indptr`` alone (no
        index is read, nothing is sorted), a bounded batch of chunks at a time. Sums accumulate
        in 64 bits (float64, int64 or uint64).
        """
        layout, brackets = self._all_brackets(axis)
        return statistics.totals(layout, brackets, self._arrays(layout)["data"])

    @as_opened
    def maxima(self, axis: int) -> npt.NDArray[Any]:
        """Largest absolute value per position along ``axis``, as stored at write time.

        In :func:`~sporadik_dask.format.spec.maxima_dtype` (unsigned for signed integer values),
        also from a store that keeps them in the values' dtype, as the reference does.
        """
        layout = self._layout_for(axis)
        layout.check_whole_read(self.location)
        if not layout.has_maxima:
            raise LayoutError(
                f"Layout {layout.path!r} in {self.location} carries no maxima (an older writer); "
                "reducing over every value would be needed. Rewrite the layout to add them."
            )
        return magnitudes(self._arrays(layout)[MAXIMA][:])

    def _layout_for(self, axis: int) -> LayoutDescription:
        if axis not in self.description.layouts:
            raise LayoutError(
                f"{self.location} has no layout making axis {axis} contiguous, so its per-position "
                f"statistics are not stored. sporadik_dask.add_axis(store, {axis}) writes it."
            )
        return self.description.layouts[axis]


class _Points:
    """``StoreReader.vindex``: square brackets for :meth:`StoreReader.read_points`."""

    __slots__ = ("_reader",)

    def __init__(self, reader: StoreReader) -> None:
        self._reader = reader

    def __getitem__(self, key: Any) -> Any:
        return mark_read(self._reader.read_points(key))


def _bracketed(positions: Axis) -> Axis:
    """Positions as wave one takes them: a ``range`` of step 1 as it is (its stretch of
    ``indptr``, sliced), anything else as an array."""
    if isinstance(positions, range) and positions.step == 1:
        return positions
    return as_array(positions)
