"""A planned write: its graph, computed on any scheduler, and its block committed by the client.

A :class:`StoreWrite` is a dask collection: ``compute``, ``persist``, ``dask.compute`` with other
collections, or futures on a ``distributed.Client``. Whatever runs it, the chunk writes finish
before the client writes the block, and a write that fails or is interrupted commits nothing.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Hashable, Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from dataclasses import replace
from typing import Any

import dask
from dask.base import DaskMethodsMixin
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from dask.typing import Key

from sporadik_dask.format.errors import IncompleteError, StoreExistsError
from sporadik_dask.format.spec import Block
from sporadik_dask.store.describe import StoreDescription, describe
from sporadik_dask.write import persisted, spill
from sporadik_dask.write.piece_graphs import current_client
from sporadik_dask.write.skeleton import commit_block, discard, is_committed

__all__ = ["LAY_OUT", "StoreWrite"]

#: The name of a write's first task, which lays out its store, before the write's token.
LAY_OUT = "sporadik-skeleton-"


class StoreWrite(DaskMethodsMixin):
    """A pending write: computing it writes every chunk, then commits the block.

    ``.compute()`` runs the chunk writes on the active scheduler (threads, or a cluster's
    workers) and, once every one has returned, writes the block from the calling process, so a
    failure anywhere leaves no block. As a collection handed to ``dask.compute`` with others,
    the block is written by dask's finalize step, which on ``distributed`` runs on a worker:
    still only after every chunk write has returned.

    The pieces the count pass kept for the write (files, or pieces persisted on a cluster's
    workers) go when the block is committed and stay after a compute that failed, for a retry to
    take; a write never computed lets them go when it is dropped. Computed by ``dask.compute``,
    whose commit may run on a worker, a write removes its files then, and releases its persisted
    pieces when it is dropped.
    """

    __slots__ = (
        "_block",
        "_done",
        "_graph",
        "_kept",
        "_keys",
        "_location",
        "_name",
        "_persisted",
        "_spill",
        "_store",
        "_token",
    )

    def __init__(
        self,
        graph: HighLevelGraph,
        keys: list[Key],
        store: Any,
        block: Block,
        location: str,
        spill_to: spill.SpillTo | None = None,
        token: str | None = None,
        kept: Sequence[str] = (),
        persisted: Sequence[Any] = (),
    ) -> None:
        self._graph, self._keys, self._store = graph, keys, store
        self._block, self._location, self._token = block, location, token
        self._spill = () if spill_to is None else spill_to.directories
        # the pieces the count pass kept outlive a failed compute, which a retry reads again
        self._kept, self._persisted = tuple(kept), tuple(persisted)
        self._name: str = list(graph.layers)[-1]
        self._done = False  # every chunk write seen to return, by compute or wait
        if self._spill or self._kept:  # a write computed by dask.compute, or never, leaves none
            weakref.finalize(self, spill.remove, self._spill + self._kept)

    def __dask_graph__(self) -> HighLevelGraph:
        return self._graph

    def __dask_keys__(self) -> list[Key]:
        return self._keys

    def __dask_layers__(self) -> tuple[str, ...]:
        return (self._name,)

    def __dask_tokenize__(self) -> Hashable:
        return (type(self).__name__, self._name)

    def __dask_postcompute__(self) -> tuple[Any, tuple[Any, ...]]:
        files = self._spill + self._kept
        return _commit, (self._store, self._block, self._location, files, self._token)

    def __dask_postpersist__(self) -> tuple[Any, tuple[Any, ...]]:
        raise NotImplementedError("A store write is computed, not persisted.")

    __dask_scheduler__ = staticmethod(dask.threaded.get)

    @staticmethod
    def __dask_optimize__(graph: Any, keys: Any, **kwargs: Any) -> Any:
        """The graph as it is, once no two of the writes computed together lay out one
        location: each would delete what the other wrote, in whatever order they ran."""
        _refuse_two_writes_to_one_location(graph)
        return graph

    def written(self) -> Delayed:
        """One task that finishes when every chunk write has returned, for a scheduler that
        tracks its own futures (``client.compute``); :meth:`commit` comes after it.
        :meth:`futures` orders the write better on a cluster."""
        barrier = f"{self._name}-written"
        layer: dict[Any, Any] = {barrier: (_written, list(self._keys))}
        graph = HighLevelGraph(
            {**self._graph.layers, barrier: layer},
            {**self._graph.dependencies, barrier: {self._name}},
        )
        return Delayed(barrier, graph)

    def commit(self, written: int | None = None) -> StoreDescription:
        """Write the block, once :meth:`wait` (or :meth:`compute`) saw every chunk write return,
        or given ``written``, the result of :meth:`written`'s future.

        Refused otherwise: a block over chunks never written marks the store finished, and every
        missing chunk would read as zeros.
        """
        if not self._done and written != len(self._keys):
            raise IncompleteError(
                f"No write of {self._location} is known to have finished"
                + ("" if written is None else f" ({written} of {len(self._keys)} returned)")
                + ": committing now would mark a store finished whose chunks may not exist, and "
                "they would read as zeros. Call w.wait(client, w.futures(client)) or "
                "w.compute() first, or pass the result of w.written(): "
                "w.commit(client.compute(w.written()).result())."
            )
        files = self._spill + self._kept
        persisted.release(self._persisted)
        return _commit(None, self._store, self._block, self._location, files, self._token)

    def committed(self) -> bool:
        """Whether the store's root holds this write's block, as :meth:`commit` writes it.

        An interrupt (Ctrl-C) can land after the commit went through: the store is then
        complete, and whoever reports the interrupt should say so rather than that nothing was
        written.
        """
        return is_committed(self._store, self._block)

    def discard(self) -> bool:
        """Delete the store this write laid out, if it did and never committed; whether it did.

        For a write that failed or was interrupted where nothing was before: its first task
        may have laid the store out, which then refuses to open (no block) and is refused as a
        target without ``overwrite=True``. A store another write has laid out since, or one
        committed, is left alone.
        """
        if self._token is None:  # a layout added to a finished store: never ours to delete
            return False
        return discard(self._store, self._token)

    def futures(self, client: Any) -> list[Any]:
        """Submit every chunk write to a ``distributed.Client``: one future per write, for
        ``progress`` and ``wait``; :meth:`commit` once all have finished without error.

        Unlike :meth:`written`, no task joins the writes, so the scheduler orders the write as
        dask orders a graph of many outputs: a layout that streams (the CSR layout of row
        blocks) sorts each partition as soon as its pieces are split. Given one task joining
        every write, dask's order splits every piece before the first such sort, and every
        part waits in memory (docs/benchmarks.md, "How the budgets were chosen").
        """
        futures: list[Any] = client.get(self._graph, list(self._keys), sync=False)
        return futures

    def wait(self, client: Any, futures: list[Any]) -> None:
        """Wait for the writes :meth:`futures` submitted; on the first failure, cancel the rest
        (a write still queued would otherwise go on writing into a store being retried or
        overwritten), remove the write's spilled parts, and raise it."""
        if len(futures) != len(self._keys):
            raise ValueError(
                f"wait got {len(futures)} futures for {len(self._keys)} chunk writes; pass "
                "what futures(client) returned, whole."
            )
        try:
            client.gather(futures)
        except BaseException:
            # a closed client cannot cancel: the failure it would hide is the one to see
            with contextlib.suppress(Exception):
                client.cancel(futures)
                _settle_on_workers(client, self._graph)
            spill.remove(self._spill)  # parts of a write that will not finish
            raise
        self._done = True

    def compute(self, **kwargs: Any) -> StoreDescription:
        """Write every chunk on the active scheduler, then commit the block from this process.

        The writes are run as the graph's outputs, with no task joining them (see
        :meth:`futures`); ``scheduler=`` and the local schedulers' options are dask's.
        """
        from dask.base import get_scheduler

        options = dict(kwargs)
        get = get_scheduler(scheduler=options.pop("scheduler", None)) or dask.threaded.get
        client = current_client(get)
        try:
            if client is not None:
                self.wait(client, self.futures(client))
            else:
                with _tracking_dask_pool(get, options):
                    get(self._graph, list(self._keys), **options)
                self._done = True
        finally:
            spill.remove(self._spill)
        return self.commit()

    def __repr__(self) -> str:
        return f"StoreWrite({self._location!r}, {len(self._keys)} chunk writes, then the block)"


#: Seconds between two asks of the workers whether a cancelled write's tasks still run.
_SETTLE_POLL = 0.1


def _running(names: frozenset[str], dask_worker: Any) -> int:
    """How many tasks of the graph layers ``names`` the worker still runs, cancelled or not (run
    on each worker). A task's key is its layer's name, alone or first in a tuple."""
    keys = (task.key for task in dask_worker.state.all_running_tasks)
    return sum((key[0] if isinstance(key, tuple) else key) in names for key in keys)


def _settle_on_workers(client: Any, graph: Any) -> None:
    """Wait until no worker runs a task of a cancelled write.

    Cancelling a future stops a task that has not started, not one running: that one finishes,
    writing its chunks. Had the caller then discarded the store (or a new write laid one out),
    those chunks would land in it afterwards. Waiting here (a second Ctrl-C stops the wait) means
    that whatever is reported or removed next stays so.
    """
    names = frozenset(graph.layers)  # the keys themselves are never made on the client
    while sum(client.run(_running, names).values()):
        time.sleep(_SETTLE_POLL)


class _Tracked:
    """dask's own threaded pool, seen through the tasks one write submitted to it.

    The write runs on the threads dask would use (threads new to a write bring new malloc
    arenas, so the count pass's freed memory is not reused), and only this write's tasks are
    cancelled or waited for on exit, not those of another compute sharing the pool.
    """

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._max_workers = pool._max_workers
        self._pending: set[Future[Any]] = set()
        self._lock = threading.Lock()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = self._pool.submit(fn, *args, **kwargs)
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._finished)
        return future

    def _finished(self, future: Future[Any]) -> None:
        with self._lock:
            self._pending.discard(future)

    def settle(self) -> None:
        """Cancel this write's tasks not started, and wait for those running."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.cancel()
        futures_wait(pending)


def _dask_pool(num_workers: int | None) -> Any:
    """The pool ``dask.threaded.get`` picks for this thread and thread count.

    dask has no public call that returns it: a get of nothing has dask make it as it would for
    the write (its own class, its own exit hook), and it is then read where dask keeps it. Its
    threads are the ones every compute of the process runs on, so their memory is reused.
    """
    dask.threaded.get({}, [], num_workers=num_workers)
    thread = threading.current_thread()
    with dask.threaded.pools_lock:
        if num_workers is None and thread is threading.main_thread():
            return dask.threaded.default_pool
        own: dict[Any, Any] = dask.threaded.pools[thread]
        return own[num_workers]


@contextlib.contextmanager
def _tracking_dask_pool(get: Any, options: dict[str, Any]) -> Iterator[None]:
    """Run a threaded write on dask's pool, and on any exit wait for its tasks still running.

    Interrupted (Ctrl-C) or failed, dask's threaded scheduler returns while its threads go on
    with the tasks they hold, each writing chunks: a store discarded or overwritten then would
    be written into again, and left with chunks and no documents. Tasks not started are
    cancelled; those running finish (each writes at most a partition's chunks).
    """
    if get is not dask.threaded.get or options.get("pool") or dask.config.get("pool", None):
        yield
        return
    workers = options.pop("num_workers", None) or dask.config.get("num_workers", None)
    pool = _Tracked(_dask_pool(workers))
    options["pool"] = pool
    try:
        yield
    finally:
        pool.settle()


def _written(results: list[None]) -> int:
    """How many chunk writes returned: the one small result the client waits for."""
    return len(results)


def _commit(
    results: Any,
    store: Any,
    block: Block,
    location: str,
    spill_to: Sequence[str] = (),
    token: str | None = None,
) -> StoreDescription:
    """Remove the write's spilled parts, write the block, last, and describe what it now says."""
    spill.remove(spill_to)
    commit_block(store, block, location, token)
    return replace(describe(store), location=location)


def _refuse_two_writes_to_one_location(graph: HighLevelGraph) -> None:
    """Raise when ``graph`` lays out two different stores at one location."""
    found: dict[str, str] = {}
    for name, layer in graph.layers.items():
        if not name.startswith(LAY_OUT):
            continue
        task = layer[name]
        laid_out = task.args[0] if hasattr(task, "args") else task[1]
        where = laid_out.location
        token = name[len(LAY_OUT) :]
        if found.setdefault(where, token) != token:
            raise StoreExistsError(
                f"Two different writes to {where} are computed together: each lays the store "
                "out by deleting what is there, so either could delete chunks the other wrote, "
                "and the store would read as a mix of both. Compute them one after the other, "
                "or write each to its own location."
            )
