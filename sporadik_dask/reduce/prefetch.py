"""Threads that overlap reading with adding: the next batch of runs fetched while this one is
added, a batch laid down while the next is added up.

Each is one thread of its own, living as long as its pass, not a share of the decode pool
(:mod:`~sporadik_dask.store.parallel`): its one-behind order is what bounds memory to two
batches, and a fetch on a decode thread would decode its chunks inline, on one core."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from sporadik_dask.planning.budgets import BATCH_BYTES

__all__ = [
    "Fetch",
    "OneBehind",
    "ahead",
    "batch_bounds",
]


_T = TypeVar("_T")


@dataclass(frozen=True)
class Fetch:
    """The indices (None if not ``runs_only``) and values of batch ``a:b`` of runs ``lo:hi``."""

    reader: Any
    layout: Any
    lo: npt.NDArray[np.int64]
    hi: npt.NDArray[np.int64]
    runs_only: bool = False
    #: Indices in their stored dtype, unchecked, for :func:`kernels.add_runs` (which checks).
    as_stored: bool = False

    def __call__(self, a: int, b: int) -> tuple[Any, Any]:
        lo, hi = self.lo[a:b], self.hi[a:b]
        if self.runs_only:
            return None, self.reader.run_values(self.layout, lo, hi)
        indices, values = self.reader.runs(self.layout, lo, hi, as_stored=self.as_stored)
        return indices, values


def batch_bounds(
    lo: npt.NDArray[np.int64], hi: npt.NDArray[np.int64], value_bytes: int
) -> list[tuple[int, int]]:
    """Batches of consecutive positions (offsets into ``lo``/``hi``) of about ``BATCH_BYTES``
    each, where each value read costs ``value_bytes`` (its own, and its index's if read)."""
    per_batch = max(BATCH_BYTES // max(value_bytes, 1), 1)
    ends = np.cumsum(hi - lo)
    cuts = np.searchsorted(ends, np.arange(per_batch, int(ends[-1]) if ends.size else 0, per_batch))
    bounds = np.unique(np.concatenate([[0], cuts, [lo.size]])).tolist()
    return list(itertools.pairwise(bounds))


def ahead(
    fetch: Callable[[int, int], _T], batches: Sequence[tuple[int, int]]
) -> Iterator[tuple[int, int, _T]]:
    """``fetch`` of each batch in turn, the next one read while the caller works on this one:
    decoding releases the GIL, so reading and adding overlap (two batches in memory at most)."""
    if len(batches) < 2:
        yield from ((a, b, fetch(a, b)) for a, b in batches)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(fetch, *batches[0])
        for at, (a, b) in enumerate(batches):
            fetched = pending.result()
            if at + 1 < len(batches):
                pending = pool.submit(fetch, *batches[at + 1])
            yield a, b, fetched


class OneBehind:
    """Calls run in order on a thread of their own, one behind the caller: the compiled
    kernels release the GIL, so laying one batch down overlaps adding up the next (two batches'
    cells in memory at most). An error of a call is raised at the next :meth:`then` or on
    leaving."""

    def __enter__(self) -> OneBehind:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(1)
        self._pending: Any = None
        return self

    def then(self, call: Callable[[], None]) -> None:
        if self._pending is not None:
            self._pending.result()
        self._pending = self._pool.submit(call)

    def __exit__(self, *exc: object) -> None:
        try:
            if self._pending is not None and exc[0] is None:
                self._pending.result()
        finally:
            self._pool.shutdown(wait=True)
