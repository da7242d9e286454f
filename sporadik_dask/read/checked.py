"""Reads that return only what the store held when their reader opened it.

A writer takes the block off first and writes it back last, with its own token, so a root
unchanged after a read's waves means every chunk they fetched was of the state opened (a rewrite
would otherwise give its values at the old positions, or zeros where its chunks are missing). A
read made of other reads (its waves) checks the store once, after its last wave, and only if it
fetched anything: an empty selection needs no check.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

__all__ = ["Checked", "as_opened", "fetching"]


class Checked(Protocol):
    """What :func:`as_opened` checks: a reader, which knows the state it opened."""

    def _check_as_opened(self, failed: Exception | None) -> None:
        """Raise :class:`~sporadik_dask.format.errors.StoreReplacedError` (from ``failed``) unless
        the store is still the one opened."""


P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=Checked)

#: Whether the calling thread is inside a read checked by :func:`as_opened` (``read``), so a
#: read made of others (its waves) checks the store once, after its last wave; and whether that
#: read fetched anything from the store (``fetched``: an empty selection needs no check).
_inside = threading.local()


def fetching() -> None:
    """Note that the calling thread's read fetches from the store, so it is checked after."""
    _inside.fetched = True


def as_opened(method: Callable[Concatenate[C, P], R]) -> Callable[Concatenate[C, P], R]:
    """``method``, a read, returning only what the store held when the reader opened it, else
    raising :class:`~sporadik_dask.format.errors.StoreReplacedError`.

    The store's root is read once after the read's last wave
    (:func:`~sporadik_dask.store.as_opened.check_as_opened_async`). A read failing a check is
    checked the same way, so a store replaced is not called damaged.
    """

    @functools.wraps(method)
    def checked(reader: C, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if getattr(_inside, "read", False):
            return method(reader, *args, **kwargs)
        _inside.read, _inside.fetched = True, False
        try:
            result = method(reader, *args, **kwargs)
        except Exception as failed:  # a node gone, say, from a store replaced meanwhile
            if _inside.fetched:
                reader._check_as_opened(failed)
            raise
        finally:
            _inside.read = False
        if _inside.fetched:
            reader._check_as_opened(None)
        return result

    return checked
