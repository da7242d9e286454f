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
    """``function`` over ``jobs`` on every core when there are many, in order."""
    if len(jobs) < PARALLEL_DECODE:
        return [function(job) for job in jobs]
    from concurrent.futures import ThreadPoolExecutor

    workers = os.cpu_count() or 1
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(function, jobs, chunksize=max(len(jobs) // (4 * workers), 1)))
