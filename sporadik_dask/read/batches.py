"""Minibatches of one axis of a store, for training: ``Minibatches``, an iterator of ``Batch``.

Batches are planned by :mod:`~sporadik_dask.planning.minibatches` (pure: positions, shuffle,
shards) and read a window of batches at a time through
:meth:`~sporadik_dask.read.reader.StoreReader.read_runs`: two read waves per window, each zarr
chunk the window touches fetched and decoded once for all its batches, and the runs copied straight
into place, so a window holds its own values and not the chunks they sit in; its batches are
views of them, not copies. Windows are read ahead on threads while the consumer works, at most
``prefetch`` of them: memory is bounded by about ``prefetch + 1`` windows (the one consumed and
those read ahead), and a batch kept longer keeps its window. An epoch's first window is read
alone, on every core (each window's chunks are decoded by every core), so its first batch is not
kept waiting by the windows after. The ``prefetch`` threads are the iteration's own, not the
process's decode pool: their number is the bound on windows held, they live as long as an
epoch's iteration, and each window's chunks are decoded on the decode pool
(:mod:`~sporadik_dask.store.parallel`), which a read on one of its own threads could not use.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from sporadik_dask.format.errors import LayoutError, SporadikError
from sporadik_dask.planning.budgets import batches_per_window
from sporadik_dask.planning.minibatches import Epoch, Shuffle, plan_epoch, selected_positions
from sporadik_dask.read.reader import StoreReader
from sporadik_dask.store.describe import open_store
from sporadik_dask.store.labels import read_labels
from sporadik_dask.store.storage import StoreLike

__all__ = ["Batch", "Minibatches", "Output"]

Output = Literal["csr", "dense", "torch", "torch-dense"]
OUTPUTS = ("csr", "dense", "torch", "torch-dense")


class Batch(NamedTuple):
    """One minibatch: which positions, their values (a row each), and their labels."""

    #: The batch's positions along the axis, in the order of its rows.
    positions: npt.NDArray[np.int64]
    #: A scipy ``csr_matrix`` (``output="csr"``), a numpy array (``"dense"``), or a torch
    #: sparse CSR (``"torch"``) or dense (``"torch-dense"``) tensor: one row per position.
    values: Any
    #: Each label asked for, one entry per row: a coordinate's values, or a categorical's codes
    #: (:attr:`Minibatches.categories` names them).
    labels: dict[str, npt.NDArray[Any]]


class Minibatches:
    """Minibatches of ``batch_size`` positions along ``axis`` of a rank-2 store, an epoch per
    iteration.

    Parameters
    ----------
    store
        A store's path, URL or zarr store, with a layout along ``axis``.
    axis
        The axis batched (``0`` or its dim name, ``"cell"``).
    batch_size
        Positions per batch.
    shuffle
        ``"uniform"``: an exactly uniform random permutation each epoch. ``"spans"``: spans of
        ``span`` neighbouring positions in random order, mixed within each window of batches
        (cheaper reads, a less uniform batch). ``None``: in the order given.
    seed
        Seeds the epochs' permutations (with the epoch's number); None draws one now. Pass the
        same seed to every process that shares an epoch (distributed ranks).
    epoch
        The first epoch's number; each iteration runs one epoch and moves on to the next.
    drop_last
        Leave out a last, short batch (and, across shards, what would leave them unequal).
    subset
        The positions to batch: a boolean mask or integer positions (a training split); all by
        default. A position given twice is read twice an epoch.
    labels
        Coordinates along ``axis`` (obs columns) to return with each batch.
    output
        ``"csr"`` (scipy, int32 indices where they fit), ``"dense"`` (numpy), ``"torch"``
        (sparse CSR tensor) or ``"torch-dense"``; torch is imported only for those.
    prefetch
        Windows read ahead on threads while batches are consumed; 0 reads each when needed.
        One keeps decoding going while a window is consumed (each read decodes on every core):
        more only holds more memory.
    window
        Batches read together, at most (an epoch is cut into windows of even size); by default
        as many as hold about :data:`~sporadik_dask.planning.budgets.WINDOW_VALUES` values.
    span
        Neighbouring positions per span, for ``shuffle="spans"``.
    shard, shards
        This iterator's part of every epoch: shard ``shard`` of ``shards`` (workers times ranks).
    storage_options
        Options for opening a URL (fsspec's).
    """

    def __init__(
        self,
        store: StoreLike,
        axis: int | str = 0,
        *,
        batch_size: int = 256,
        shuffle: Shuffle = "uniform",
        seed: int | None = None,
        epoch: int = 0,
        drop_last: bool = False,
        subset: Any = None,
        labels: Sequence[str] = (),
        output: Output = "csr",
        prefetch: int = 1,
        window: int | None = None,
        span: int = 64,
        shard: int = 0,
        shards: int = 1,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        if output not in OUTPUTS:
            raise SporadikError(f"output={output!r}; choose one of {', '.join(OUTPUTS)}.")
        if prefetch < 0:
            raise SporadikError(f"prefetch={prefetch}; windows read ahead cannot be negative.")
        opened = open_store(store, storage_options=storage_options)
        self.reader = StoreReader.from_opened(opened)
        found = read_labels(opened.root, self.reader.shape, self.reader.location)
        self.axis = _axis_number(axis, found.dims, self.reader)
        layout = self.reader.description.layouts[self.axis]
        self.positions = selected_positions(subset, layout.positions)
        self.batch_size = batch_size
        self.shuffle: Shuffle = shuffle
        self.seed = secrets.randbits(63) if seed is None else int(seed)
        self.epoch = epoch
        self.drop_last = drop_last
        self.output: Output = output
        self.prefetch = prefetch
        self.window = window or batches_per_window(batch_size, layout.nnz, layout.positions)
        self.span = span
        self.shard, self.shards = shard, shards
        (other,) = layout.index_order
        self.width = self.reader.shape[other]
        self.labels, self.categories = _labels(found, labels, found.dims[self.axis])
        self.plan(self.epoch)  # refuse a bad batch size, shard or shuffle now, not at first use

    def plan(self, epoch: int) -> Epoch:
        """This shard's part of epoch ``epoch``: its positions, batch by batch."""
        return plan_epoch(
            self.positions,
            batch_size=self.batch_size,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=epoch,
            drop_last=self.drop_last,
            shard=self.shard,
            shards=self.shards,
            span=self.span,
            window=self.window,
        )

    def __len__(self) -> int:
        """Batches an epoch yields (on this shard)."""
        return len(self.plan(self.epoch))

    def __iter__(self) -> Iterator[Batch]:
        """The batches of epoch :attr:`epoch`; the next iteration is of the next epoch."""
        planned = self.plan(self.epoch)
        self.epoch += 1
        return self._batches(planned)

    def _batches(self, planned: Epoch) -> Iterator[Batch]:
        windows = planned.windows()
        if self.prefetch == 0:
            for batches in windows:
                yield from self._read_window(batches)
            return
        pool = ThreadPoolExecutor(self.prefetch, thread_name_prefix="sporadik-minibatches")
        pending: deque[Future[list[Batch]]] = deque()
        try:
            for count, batches in enumerate(windows):
                if count == 1:  # the first window alone, on every core: its first batch soonest
                    wait(pending)
                pending.append(pool.submit(self._read_window, batches))
                if len(pending) > self.prefetch:
                    yield from pending.popleft().result()
            while pending:
                yield from pending.popleft().result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _read_window(self, batches: list[npt.NDArray[np.int64]]) -> list[Batch]:
        """One read for every batch of a window, cut into its batches."""
        positions = np.concatenate(batches)
        indptr, indices, data = self.reader.read_runs(positions, axis=self.axis)
        if indices.dtype != np.int32 and self.width < 2**31:
            indices = indices.astype(np.int32)
        found, at = [], 0
        for part in batches:
            rows = indptr[at : at + part.size + 1]
            start, stop = int(rows[0]), int(rows[-1])
            values = self._values(rows - start, indices[start:stop], data[start:stop], part.size)
            labels = {name: column[part] for name, column in self.labels.items()}
            found.append(Batch(part, values, labels))
            at += part.size
        return found

    def _values(
        self,
        indptr: npt.NDArray[np.int64],
        indices: npt.NDArray[Any],
        data: npt.NDArray[Any],
        rows: int,
    ) -> Any:
        shape = (rows, self.width)
        if indptr[-1] < 2**31 and indices.dtype == np.int32:
            indptr = indptr.astype(np.int32)
        if self.output in ("dense", "torch-dense"):
            dense = np.zeros(shape, dtype=data.dtype)
            dense[np.repeat(np.arange(rows), np.diff(indptr)), indices] = data
            if self.output == "dense":
                return dense
            import torch

            return torch.from_numpy(dense)
        if self.output == "torch":
            import torch

            return torch.sparse_csr_tensor(
                torch.from_numpy(indptr),
                torch.from_numpy(indices),
                torch.from_numpy(data),
                size=shape,
            )
        return _csr_view(indptr, indices, data, shape)

    def __repr__(self) -> str:
        return (
            f"Minibatches({self.reader.location!r}, axis={self.axis}, "
            f"batch_size={self.batch_size}, shuffle={self.shuffle!r}, "
            f"{self.positions.size} positions, shard {self.shard} of {self.shards})"
        )


def _csr_view(
    indptr: npt.NDArray[Any], indices: npt.NDArray[Any], data: npt.NDArray[Any], shape: Any
) -> Any:
    """A scipy ``csr_matrix`` over these arrays, as they are.

    ``csr_matrix((data, indices, indptr), copy=False)`` copies ``indices`` and ``data`` when
    they are views of less than half an array (scipy's ``prune``), as every batch of a window
    is: a copy of every value of the epoch, and a whole window held twice while it is cut.
    The arrays are well formed (each run's indices checked as read), so they are set on an
    empty matrix instead; a batch kept holds its window's arrays.
    """
    import scipy.sparse

    if indices.dtype != indptr.dtype:  # scipy's kernels take one index dtype for both
        indices = indices.astype(indptr.dtype)
    matrix = scipy.sparse.csr_matrix(shape, dtype=data.dtype)
    matrix.indptr, matrix.indices, matrix.data = indptr, indices, data
    return matrix


def _axis_number(axis: int | str, dims: tuple[str, ...], reader: StoreReader) -> int:
    """``axis`` as a number, checked: a rank-2 store with a layout along it."""
    if isinstance(axis, str):
        if axis not in dims:
            raise SporadikError(
                f"{reader.location} has dims {list(dims)}, not {axis!r}; name one of those "
                "(or pass the axis number)."
            )
        axis = dims.index(axis)
    if reader.ndim != 2:
        raise SporadikError(
            f"{reader.location} is of rank {reader.ndim}; minibatches are rows of a rank-2 "
            "store (cells by genes). Select a rank-2 part of it first."
        )
    if axis not in reader.description.layouts:
        raise LayoutError(
            f"{reader.location} has no layout making axis {axis} contiguous (it has "
            f"{sorted(reader.description.layouts)}); every batch would scan another. Write it "
            f"with sporadik_dask.add_axis(store, {axis})."
        )
    return int(axis)


def _labels(
    found: Any, names: Sequence[str], dim: str
) -> tuple[dict[str, npt.NDArray[Any]], dict[str, npt.NDArray[Any]]]:
    """Each named coordinate along ``dim`` as an array, categoricals as their codes; and each
    categorical's categories."""
    columns, categories = {}, {}
    for name in names:
        coordinate = found.coords.get(name)
        if coordinate is None or coordinate.dims != (dim,):
            along = sorted(n for n, c in found.coords.items() if c.dims == (dim,))
            raise SporadikError(
                f"The store has no coordinate {name!r} along {dim!r}; the ones along it are "
                f"{along}. Pass one of those as a label."
            )
        values = coordinate.values
        if hasattr(values, "codes") and hasattr(values, "categories"):
            categories[name] = np.asarray(values.categories)
            values = values.codes
        columns[name] = np.asarray(values)
    return columns, categories
