"""Where compiled kernels are cached: a user cache directory, never beside the sources.

numba's ``cache=True`` writes beside a function's source file when that ``__pycache__`` is
writable, so a shared or read-only install either collects every user's object files or caches
nothing. Registering one more cache locator, ahead of numba's in-tree one, puts the kernels of
this package (and of ``sparse``, below) under ``$SPORADIK_DASK_CACHE_DIR``, or the platform's user
cache directory as ``platformdirs`` finds it (``~/.cache/sporadik-dask/numba`` on Linux,
``~/Library/Caches/sporadik-dask/numba`` on macOS, under ``%LOCALAPPDATA%`` on Windows).
``NUMBA_CACHE_DIR``, when set, still wins, as numba documents.

``sparse`` compiles its numba functions without a cache, so every new process (each dask worker too)
compiles those a read's blocks meet again, seconds before a first sum's result (docs/benchmarks.md,
"Numbers behind the code's choices"). :func:`cache_sparse_kernels` turns numba's own disk cache on
for ``sparse``'s module-level functions when the reading stack is loaded: the same compiled code,
loaded rather than compiled. It changes nothing but where compiled code comes from; ``dask.config``
``sporadik.cache-sparse-kernels: False`` (read when the reading stack is first imported, e.g.
``DASK_SPORADIK__CACHE_SPARSE_KERNELS=False``) leaves ``sparse`` as it is.

The locator list is numba's private ``CacheImpl._locator_classes`` and a dispatcher's ``_cache``
its private cache: both are reached here only, and ``tests/kernels/test_numba_cache.py`` checks
them, so a numba release that moves one fails there by name.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import platformdirs

try:  # numba 0.61 and later
    from numba.core.caching import CacheImpl, UserWideCacheLocator
except ImportError:  # earlier releases spell both with a leading underscore
    from numba.core.caching import _CacheImpl as CacheImpl  # type: ignore[attr-defined,no-redef]
    from numba.core.caching import (  # type: ignore[attr-defined,no-redef]
        _UserWideCacheLocator as UserWideCacheLocator,
    )

__all__ = ["PackageCacheLocator", "cache_dir", "cache_sparse_kernels", "install"]

_PACKAGE = Path(__file__).resolve().parents[1]
#: Source trees whose functions :class:`PackageCacheLocator` places: this package's, and
#: ``sparse``'s once :func:`cache_sparse_kernels` has run.
_TREES: list[Path] = [_PACKAGE]


def cache_dir() -> Path:
    """``$SPORADIK_DASK_CACHE_DIR``, else ``numba`` in this package's user cache directory."""
    chosen = os.environ.get("SPORADIK_DASK_CACHE_DIR")
    if chosen:
        return Path(chosen)
    return Path(platformdirs.user_cache_dir("sporadik-dask", appauthor=False)) / "numba"


class PackageCacheLocator(UserWideCacheLocator):
    """numba's user-wide locator, in :func:`cache_dir`, for the source files of this package
    (and of ``sparse``, once :func:`cache_sparse_kernels` has run) only."""

    def __init__(self, py_func: Any, py_file: str) -> None:
        super().__init__(py_func, py_file)  # type: ignore[no-untyped-call]
        subpath = self.get_suitable_cache_subpath(py_file)  # type: ignore[no-untyped-call]
        self._cache_path = str(cache_dir() / subpath)

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> Any:
        if not any(Path(py_file).resolve().is_relative_to(tree) for tree in _TREES):
            return None
        return super().from_function(py_func, py_file)  # type: ignore[no-untyped-call]


def install() -> None:
    """Put :class:`PackageCacheLocator` after the user-provided locator; idempotent."""
    classes: list[Any] = CacheImpl._locator_classes
    if PackageCacheLocator not in classes:
        classes.insert(1, PackageCacheLocator)


def cache_sparse_kernels() -> int:
    """Turn numba's disk cache on for ``sparse``'s module-level compiled functions, in
    :func:`cache_dir`; idempotent. Returns how many it turned on (0 when switched off)."""
    import sys

    import dask
    import sparse
    from numba.core.caching import NullCache
    from numba.core.registry import CPUDispatcher

    if not dask.config.get("sporadik.cache-sparse-kernels", True):
        return 0
    install()
    tree = Path(sparse.__file__).resolve().parent
    if tree not in _TREES:
        _TREES.append(tree)
    turned = 0
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "sparse" or name.startswith("sparse.")):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, CPUDispatcher) and isinstance(
                getattr(value, "_cache", None), NullCache
            ):
                value.enable_caching()
                turned += 1
    return turned
