"""Where this package's compiled kernels are cached: a user cache directory, never its sources.

numba's ``cache=True`` writes beside a function's source file when that ``__pycache__`` is
writable, so a shared or read-only install either collects every user's object files or caches
nothing. Registering one more cache locator, ahead of numba's in-tree one, puts the kernels of
this package (and only these) under ``$SPORADIK_DASK_CACHE_DIR``, or the platform's user cache
directory (``~/.cache/sporadik-dask/numba`` on Linux). ``NUMBA_CACHE_DIR``, when set, still wins,
as numba documents. The locator list is numba's private ``CacheImpl._locator_classes``: it is
reached here only, and ``tests/test_26_numba_cache.py`` checks it, so a numba release that
moves it fails there by name.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

try:  # numba 0.61 and later
    from numba.core.caching import CacheImpl, UserWideCacheLocator
except ImportError:  # earlier releases spell both with a leading underscore
    from numba.core.caching import _CacheImpl as CacheImpl  # type: ignore[attr-defined,no-redef]
    from numba.core.caching import (  # type: ignore[attr-defined,no-redef]
        _UserWideCacheLocator as UserWideCacheLocator,
    )

__all__ = ["PackageCacheLocator", "cache_dir", "install"]

_PACKAGE = Path(__file__).resolve().parent


def cache_dir() -> Path:
    """``$SPORADIK_DASK_CACHE_DIR``, else the user cache directory numba's own default uses."""
    chosen = os.environ.get("SPORADIK_DASK_CACHE_DIR")
    if chosen:
        return Path(chosen)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "sporadik-dask" / "numba"


class PackageCacheLocator(UserWideCacheLocator):
    """numba's user-wide locator, for this package's source files only, in :func:`cache_dir`."""

    def __init__(self, py_func: Any, py_file: str) -> None:
        super().__init__(py_func, py_file)  # type: ignore[no-untyped-call]
        subpath = self.get_suitable_cache_subpath(py_file)  # type: ignore[no-untyped-call]
        self._cache_path = str(cache_dir() / subpath)

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> Any:
        if not Path(py_file).resolve().is_relative_to(_PACKAGE):
            return None
        return super().from_function(py_func, py_file)  # type: ignore[no-untyped-call]


def install() -> None:
    """Put :class:`PackageCacheLocator` after the user-provided locator; idempotent."""
    classes: list[Any] = CacheImpl._locator_classes
    if PackageCacheLocator not in classes:
        classes.insert(1, PackageCacheLocator)
