"""Decoding spread over the cores: the chunks of one read decoded by several threads at once
(zstd releases the GIL), on one bounded pool per process.

A read runs inside dask's own threads, several at once; a pool per read would start and stop a
``cpu_count`` of threads each time and put ``cpu_count`` of them per dask thread on the cores.
One pool, made on first use and sized by ``sporadik.decode-threads`` (the cores, when None),
bounds the decoding threads of the whole process. A child made by ``fork`` makes its own (the
parent's threads are not in it), and a call from one of the pool's own threads runs inline, as
waiting on the pool from inside it could wait for ever.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import dask

__all__ = ["PARALLEL_DECODE", "decode_pool", "decode_threads", "map_jobs"]

#: Chunks a read decodes before it spreads decoding over threads (zstd releases the GIL).
PARALLEL_DECODE = 16

_made: dict[int, ThreadPoolExecutor] = {}  # at most one: the pool, by its size
_lock = threading.Lock()
_in_pool = threading.local()


def decode_threads() -> int:
    """Threads of the decode pool: ``sporadik.decode-threads``, or the cores when None."""
    chosen = dask.config.get("sporadik.decode-threads", None)
    return max(1, int(chosen)) if chosen is not None else os.cpu_count() or 1


def _mark_pool_thread() -> None:
    _in_pool.member = True


def decode_pool() -> ThreadPoolExecutor:
    """The process's decode pool, made on first use; made again when ``sporadik.decode-threads``
    has changed since (the old one is let go, not shut down: a read that holds it still submits
    to it, and its threads end once no read does)."""
    return _pool_of(decode_threads())


def _pool_of(workers: int) -> ThreadPoolExecutor:
    with _lock:
        if workers not in _made:
            _made.clear()
            _made[workers] = ThreadPoolExecutor(
                workers, thread_name_prefix="sporadik-decode", initializer=_mark_pool_thread
            )
        return _made[workers]


def _forget_after_fork() -> None:
    """In a child made by ``fork``: the parent's pool has no threads here; make a new one."""
    global _lock
    _made.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def map_jobs(function: Callable[[Any], Any], jobs: list[Any]) -> list[Any]:
    """``function`` over ``jobs`` on the decode pool when there are many, in order.

    Jobs go to the threads in four parts a thread: a future per part, not per chunk, so a read
    of thousands of chunks makes few objects for the garbage collector and few hand-offs between
    threads. A call from one of the pool's threads runs inline.
    """
    if len(jobs) < PARALLEL_DECODE or getattr(_in_pool, "member", False):
        return [function(job) for job in jobs]
    workers = decode_threads()
    pool = _pool_of(workers)
    step = -(-len(jobs) // (4 * workers))
    parts = [jobs[at : at + step] for at in range(0, len(jobs), step)]
    done = [pool.submit(lambda part: [function(job) for job in part], part) for part in parts]
    wait(done)  # every part finished, as a failed one's error is raised: none still writing
    return [found for future in done for found in future.result()]
