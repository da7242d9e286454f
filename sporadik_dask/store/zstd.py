"""Zstd compression and decompression of whole chunks on contexts each thread keeps, in
numcodecs' own library.

numcodecs makes and frees a zstd context for every chunk it encodes or decodes; under the fixed
mmap threshold a distributed nanny sets, each compression context faults its tables in afresh, and
even ``Zstd.decode(buf, out=...)`` into place spends more CPU per chunk than a kept context
(measured: "Chunk codecs under distributed's trim threshold" in docs/benchmarks.md, made by
``benchmarks/encode.py``). The same library's functions on a context kept per thread write the
same bytes and read the same values (``tests/store/test_zstd.py``). Where the functions cannot be
found, or a sample does not come out byte for byte as numcodecs writes it, numcodecs is used.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["decoder", "encoder"]

#: zstd's ``ZSTD_c_compressionLevel`` and ``ZSTD_c_checksumFlag`` parameters (zstd.h, stable API).
_LEVEL, _CHECKSUM = 100, 201

Encode = Callable[[Any], bytes]


class _Library:
    """The zstd functions numcodecs' extension was linked with, typed for ctypes."""

    def __init__(self, library: ctypes.CDLL) -> None:
        size, pointer = ctypes.c_size_t, ctypes.c_void_p
        self.create = _typed(library.ZSTD_createCCtx, pointer)
        self.free = _typed(library.ZSTD_freeCCtx, size, pointer)
        self.set = _typed(library.ZSTD_CCtx_setParameter, size, pointer, ctypes.c_int, ctypes.c_int)
        self.compress = _typed(library.ZSTD_compress2, size, pointer, pointer, size, pointer, size)
        self.bound = _typed(library.ZSTD_compressBound, size, size)
        self.is_error = _typed(library.ZSTD_isError, ctypes.c_uint, size)
        self.create_d = _typed(library.ZSTD_createDCtx, pointer)
        self.free_d = _typed(library.ZSTD_freeDCtx, size, pointer)
        self.decompress = _typed(
            library.ZSTD_decompressDCtx, size, pointer, pointer, size, pointer, size
        )


def _typed(function: Any, result: Any, *arguments: Any) -> Any:
    function.restype, function.argtypes = result, list(arguments)
    return function


class _Context:
    """One thread's compression context for one (level, checksum), and its output buffer."""

    def __init__(self, library: _Library, level: int, checksum: bool) -> None:
        self.library = library
        self.pointer = library.create()
        if not self.pointer:
            raise MemoryError("zstd could not allocate a compression context")
        for parameter, value in ((_LEVEL, level), (_CHECKSUM, int(checksum))):
            if library.is_error(library.set(self.pointer, parameter, value)):
                raise ValueError(f"zstd refused parameter {parameter} = {value}")
        self.out = np.empty(0, dtype=np.uint8)

    def encode(self, buffer: Any) -> bytes:
        source = np.ascontiguousarray(buffer).view(np.uint8).reshape(-1)
        bound = int(self.library.bound(source.nbytes))
        if self.out.nbytes < bound:
            self.out = np.empty(bound, dtype=np.uint8)
        # ctypes drops the GIL around the call, so threads compress in parallel
        written = int(
            self.library.compress(
                self.pointer, self.out.ctypes.data, bound, source.ctypes.data, source.nbytes
            )
        )
        if self.library.is_error(written):
            raise RuntimeError(f"zstd could not compress a chunk (error code {written})")
        return self.out[:written].tobytes()

    def __del__(self) -> None:
        if getattr(self, "pointer", None):
            self.library.free(self.pointer)


class _Decompression:
    """One thread's decompression context."""

    def __init__(self, library: _Library) -> None:
        self.library = library
        self.pointer = library.create_d()
        if not self.pointer:
            raise MemoryError("zstd could not allocate a decompression context")

    def into(self, source: bytes, out: np.ndarray) -> int:
        """Decompress ``source`` into ``out`` (C-contiguous); the bytes written, or -1 when
        the object is not a zstd frame, is cut, or holds more than ``out``."""
        written = int(
            self.library.decompress(self.pointer, out.ctypes.data, out.nbytes, source, len(source))
        )
        return -1 if self.library.is_error(written) else written

    def __del__(self) -> None:
        if getattr(self, "pointer", None):
            self.library.free_d(self.pointer)


@functools.cache
def _library() -> _Library | None:
    """numcodecs' zstd, if its extension exports the functions (dlsym also searches what it is
    linked with, so a build against a shared libzstd is found the same way)."""
    try:
        import numcodecs.zstd

        return _Library(ctypes.CDLL(numcodecs.zstd.__file__))
    except (ImportError, OSError, AttributeError):
        return None


_threads = threading.local()


def _context(library: _Library, level: int, checksum: bool) -> _Context:
    contexts: dict[tuple[int, bool], _Context] = _threads.__dict__.setdefault("contexts", {})
    context = contexts.get((level, checksum))
    if context is None:
        context = contexts[level, checksum] = _Context(library, level, checksum)
    return context


@functools.cache
def _matches(level: int, checksum: bool) -> bool:
    """Whether a kept context writes what numcodecs writes at these settings, on a sample."""
    import numcodecs

    library = _library()
    if library is None:
        return False
    sample = np.repeat(np.arange(4096, dtype=np.int32), 8) * 7
    try:
        ours = _Context(library, level, checksum).encode(sample)
    except (MemoryError, ValueError, RuntimeError):
        return False
    theirs: bytes = numcodecs.Zstd(level=level, checksum=checksum).encode(sample)
    return ours == theirs


def encoder(codec: Any) -> Encode:
    """How to encode a chunk with numcodecs ``Zstd`` codec ``codec``: on a kept context when it
    writes the same bytes, else with ``codec.encode``."""
    level, checksum = int(codec.level), bool(getattr(codec, "checksum", False))
    library = _library()
    if library is None or not _matches(level, checksum):
        return codec.encode  # type: ignore[no-any-return]

    def encode(buffer: Any) -> bytes:
        return _context(library, level, checksum).encode(buffer)

    return encode


Decode = Callable[[bytes, np.ndarray], int]


@functools.cache
def decoder() -> Decode | None:
    """How to decompress a zstd chunk object into a C-contiguous array in place: returns the
    bytes written, -1 for an object that is no whole zstd frame or holds more than the array;
    None when numcodecs' library functions cannot be found (decode with numcodecs then)."""
    library = _library()
    if library is None:
        return None

    def decode(source: bytes, out: np.ndarray) -> int:
        context: _Decompression | None = getattr(_threads, "decompression", None)
        if context is None:
            context = _threads.decompression = _Decompression(library)
        return context.into(source, out)

    return decode
