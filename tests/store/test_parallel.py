"""A read's chunks are decoded on one bounded pool per process: shared by every call, sized by
``sporadik.decode-threads``, made again in a forked child, and run inline from its own threads."""

from __future__ import annotations

import multiprocessing
import os
import threading

import dask
import pytest

from sporadik_dask.store import parallel
from sporadik_dask.store.parallel import PARALLEL_DECODE, map_jobs


def _thread_name(_: object) -> str:
    return threading.current_thread().name


def test_calls_share_one_pool_of_as_many_threads_as_configured() -> None:
    jobs = list(range(4 * PARALLEL_DECODE))
    with dask.config.set({"sporadik.decode-threads": 1}):
        first = set(map_jobs(_thread_name, jobs))
        second = set(map_jobs(_thread_name, jobs))
        assert parallel.decode_pool() is parallel.decode_pool()
    assert first == second and len(first) == 1, (first, second)
    assert next(iter(first)).startswith("sporadik-decode")
    with dask.config.set({"sporadik.decode-threads": 2}):
        assert len(set(map_jobs(_thread_name, jobs * 8))) <= 2
    assert parallel.decode_threads() == (os.cpu_count() or 1)


def test_a_call_from_a_decoding_thread_runs_inline_rather_than_wait_on_its_own_pool() -> None:
    """With one thread, a nested call that waited on the pool would wait for ever."""

    def nested(_: object) -> tuple[str, set[str]]:
        return _thread_name(None), set(map_jobs(_thread_name, list(range(2 * PARALLEL_DECODE))))

    with dask.config.set({"sporadik.decode-threads": 1}):
        found = map_jobs(nested, list(range(PARALLEL_DECODE)))
    assert all(inner == {outer} for outer, inner in found), found


def test_results_come_back_in_order_and_an_error_is_raised() -> None:
    jobs = list(range(10 * PARALLEL_DECODE + 3))
    assert map_jobs(lambda k: k * k, jobs) == [k * k for k in jobs]

    def broken(k: int) -> int:
        if k == 77:
            raise ValueError("job 77")
        return k

    with pytest.raises(ValueError, match="job 77"):
        map_jobs(broken, jobs)


def _in_child(_: object) -> list[str]:
    return sorted(set(map_jobs(_thread_name, list(range(4 * PARALLEL_DECODE)))))


@pytest.mark.skipif(not hasattr(os, "register_at_fork"), reason="no fork on this platform")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_decodes_on_a_pool_of_its_own() -> None:
    """The parent's pool threads are not in a forked child: submitting to its copy would wait
    for ever."""
    map_jobs(_thread_name, list(range(4 * PARALLEL_DECODE)))  # the parent's pool is made
    with multiprocessing.get_context("fork").Pool(1) as pool:
        names = pool.apply(_in_child, (None,))
    assert names and all(name.startswith("sporadik-decode") for name in names)
