"""What every kernel module shares: numba's cache placed before the first kernel is defined,
one decorator, and the errors that say numba cannot compile a dtype (float16), on which each
kernel's caller takes its NumPy route instead."""

from __future__ import annotations

import numba

from sporadik_dask.kernels import numba_cache

numba_cache.install()  # before the first kernel is defined: cached in the user's cache directory

#: Compiled once per signature, cached on disk, run without the GIL (dask's threads overlap).
kernel = numba.njit(cache=True, nogil=True)

#: What numba raises for a dtype it lacks (float16): the caller falls back, or returns None.
LACKS_DTYPE = (numba.core.errors.TypingError, NotImplementedError)

__all__ = ["LACKS_DTYPE", "kernel"]
