"""An epoch of minibatches, planned: which positions each batch holds, on which shard. Pure.

An epoch is planned from the positions selected along one axis (a subset, in any order, repeats
kept), a batch size, a seed and the epoch's number alone, so every DataLoader worker and every
distributed rank plans the same epoch and takes its own part of it: no position is read twice
and none is left out (but what ``drop_last`` drops).

Two shuffles, as random as the read allows:

- ``"uniform"``: an exactly uniform random permutation of the positions.
- ``"spans"``: the positions sorted and cut into spans of ``span`` neighbours, the spans
  permuted, and the positions of each window of batches permuted among themselves (annbatch's
  block shuffle): a batch mixes ``window * batch_size / span`` spans, and each read of the store
  is of whole runs of neighbouring positions, not one position per zarr chunk.

``None`` keeps the positions in the order given.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from sporadik_dask.format.errors import SporadikError

__all__ = ["Epoch", "Shuffle", "balanced_window", "plan_epoch", "selected_positions"]

Positions = npt.NDArray[np.int64]
Shuffle = Literal["uniform", "spans"] | None


def selected_positions(subset: Any, size: int) -> Positions:
    """The positions ``subset`` selects along an axis of ``size``: all (None), a boolean mask of
    that length, or integer positions (any order, repeats kept, negatives from the end)."""
    if subset is None:
        return np.arange(size, dtype=np.int64)
    chosen = np.asarray(subset)
    if chosen.dtype == bool:
        if chosen.shape != (size,):
            raise SporadikError(
                f"A mask of shape {chosen.shape} selects along an axis of {size} positions; "
                "a shorter or longer mask would pick the wrong positions. Pass a mask of "
                f"shape ({size},)."
            )
        return np.flatnonzero(chosen).astype(np.int64)
    if chosen.size == 0:
        return np.zeros(0, dtype=np.int64)
    if chosen.ndim != 1 or chosen.dtype.kind not in "iu":
        raise SporadikError(
            f"subset holds {chosen.dtype} values of shape {chosen.shape}; it must be a boolean "
            "mask or a 1-d array of integer positions (a float would be truncated to another "
            "position). Convert it first."
        )
    positions = chosen.astype(np.int64)
    if positions.min() < -size or positions.max() >= size:
        raise SporadikError(
            f"subset names positions from {positions.min()} to {positions.max()} along an axis "
            f"of {size}; outside it there is nothing to read. Pass positions in [-{size}, {size})."
        )
    return np.where(positions < 0, positions + size, positions)


@dataclass(frozen=True, slots=True)
class Epoch:
    """One shard's part of an epoch: its positions in the order its batches hold them.

    Batches are ``order`` cut every ``batch_size`` (the last may be shorter); they are read
    ``window`` batches at a time, so one read of the store serves each window.
    """

    #: This shard's positions, batch after batch.
    order: Positions
    batch_size: int
    #: Batches read together.
    window: int

    def __len__(self) -> int:
        return -(-self.order.size // self.batch_size)

    def windows(self) -> Iterator[list[Positions]]:
        """Each window's batches, in order."""
        step = self.batch_size * self.window
        for start in range(0, self.order.size, step):
            part = self.order[start : start + step]
            yield [part[at : at + self.batch_size] for at in range(0, part.size, self.batch_size)]


def balanced_window(batches: int, window: int) -> int:
    """Batches a window of ``batches`` holds, at most ``window``, as evenly as they allow.

    As few windows as ``window`` allows, each as full as the others: a short last window of
    scattered positions decodes about as many zarr chunks as a full one (2,096 random cells of
    30,000 at 300 values a cell touch 273 of its 274 chunks of 32,768), so the windows share the
    batches evenly instead.
    """
    windows = max(1, -(-batches // window))
    return max(1, -(-batches // windows))


def plan_epoch(
    positions: Positions,
    *,
    batch_size: int,
    shuffle: Shuffle,
    seed: int,
    epoch: int,
    drop_last: bool = False,
    shard: int = 0,
    shards: int = 1,
    span: int = 64,
    window: int = 16,
) -> Epoch:
    """Shard ``shard`` of ``shards``'s batches of one epoch over ``positions``.

    1. Order the units of the epoch: each position (``"uniform"``, ``None``) or each span of
       ``span`` neighbours of the sorted positions (``"spans"``), permuted by a generator seeded
       with ``(seed, epoch)``, the same on every shard.
    2. Deal the units round-robin to the shards: unit ``k`` to shard ``k % shards``. Shards never
       share a unit, and together they hold every one.
    3. With ``drop_last``, cut every shard to the same whole number of batches (the smallest
       shard's), so distributed ranks take equal steps; without, the last batch may be short.
    4. Even the windows out (:func:`balanced_window`).
    5. ``"spans"``: permute the positions within each window of batches.
    """
    if batch_size < 1 or window < 1 or span < 1:
        raise SporadikError(
            f"batch_size={batch_size}, window={window}, span={span}: each must be at least 1."
        )
    if not 0 <= shard < shards:
        raise SporadikError(f"shard {shard} of {shards}: a shard is numbered from 0 to shards-1.")
    if shuffle not in ("uniform", "spans", None):
        raise SporadikError(f"shuffle={shuffle!r}; choose 'uniform', 'spans' or None.")
    rng = np.random.default_rng([seed, epoch])
    if shuffle == "spans":
        ordered = np.sort(positions)
        starts = np.arange(0, ordered.size, span, dtype=np.int64)
        dealt = rng.permutation(starts.size)
        sizes = [
            int(np.minimum(span, ordered.size - starts[dealt[s::shards]]).sum())
            for s in range(shards)
        ]
        mine = starts[dealt[shard::shards]]
        lengths = np.minimum(span, ordered.size - mine)
        within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(
            np.cumsum(lengths) - lengths, lengths
        )
        order = ordered[np.repeat(mine, lengths) + within]
    else:
        permuted = rng.permutation(positions) if shuffle == "uniform" else positions
        sizes = [len(range(s, positions.size, shards)) for s in range(shards)]
        order = permuted[shard::shards]
    if drop_last:
        order = order[: min(sizes) // batch_size * batch_size]
    window = balanced_window(-(-order.size // batch_size), window)
    if shuffle == "spans":
        mixer = np.random.default_rng([seed, epoch, shard + 1])
        step = batch_size * window
        order = np.concatenate(
            [mixer.permutation(order[at : at + step]) for at in range(0, order.size, step)]
            or [order]
        )
    return Epoch(np.ascontiguousarray(order, dtype=np.int64), batch_size, window)
