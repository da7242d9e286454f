"""Decoding spread over the cores: the chunks of one read decoded by several threads at once
(zstd releases the GIL)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

__all__ = ["PARALLEL_DECODE", "map_jobs"]

#: Chunks a read decodes before it spreads decoding over threads (zstd releases the GIL).
PARALLEL_DECODE = 16


def map_jobs(function: Callable[[Any], Any], jobs: list[Any]) -> list[Any]:
    """``function`` over ``jobs`` on every core when there are many, in order.

    Jobs go to the threads in four parts a core (a thread pool's ``map`` ignores its
    ``chunksize``): a future per part, not per chunk, so a read of thousands of chunks makes
    few objects for the garbage collector and few hand-offs between threads.
    """
    if len(jobs) < PARALLEL_DECODE:
        return [function(job) for job in jobs]
    from concurrent.futures import ThreadPoolExecutor

    workers = os.cpu_count() or 1
    step = -(-len(jobs) // (4 * workers))
    parts = [jobs[at : at + step] for at in range(0, len(jobs), step)]
    with ThreadPoolExecutor(workers) as pool:
        done = pool.map(lambda part: [function(job) for job in part], parts)
        return [found for part in done for found in part]
