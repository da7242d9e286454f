"""The codec chains this package encodes and decodes itself, outside zarr.

zarr's own ``array[a:b] = values`` spends about 1 ms of Python per chunk holding the GIL, so two
threads write no faster than one (measured: 18 M int32 in 32,768-element chunks, 0.55 s alone and
no gain from a second thread), while encoding the same chunks with the same codec takes 0.02 s.
The arrays here carry only the codecs this package chose (``bytes``, then optionally ``zstd``), so
their chunks are encoded with those codecs' own numcodecs implementation; any other codec chain
falls back to zarr. Tests compare the objects byte for byte with zarr's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.codecs.bytes import Endian

from sporadik_dask.format.errors import LayoutError
from sporadik_dask.store import zstd
from sporadik_dask.store.objects import read_file
from sporadik_dask.store.zarr_adapter import zstd_codec

__all__ = [
    "Encoder",
    "Encoding",
    "chain_of",
    "compressors_of",
    "decode_chunk",
    "decode_chunk_into",
    "encoder_of",
]

Encoder = Callable[[npt.NDArray[Any]], bytes]


def chain_of(codecs: list[Any]) -> list[Any] | None:
    """The numcodecs compressors after a little-endian ``bytes`` codec, if that is the chain."""
    if not codecs:
        return None
    serializer = codecs.pop(0)
    if not isinstance(serializer, BytesCodec) or serializer.endian not in (None, Endian.little):
        return None
    if not all(isinstance(codec, ZstdCodec) for codec in codecs):
        return None
    return [zstd_codec(codec) for codec in codecs]


def compressors_of(array: zarr.Array[Any]) -> list[Any] | None:
    """The numcodecs compressors of an unsharded array, if its chain is one this knows."""
    return chain_of(list(array.metadata.codecs))  # type: ignore[union-attr]


def encoder_of(array: zarr.Array[Any], compressors: list[Any] | None = None) -> Encoder | None:
    """How to encode one whole chunk of ``array``, if its codecs are ones this knows exactly."""
    if compressors is None:
        compressors = compressors_of(array)
    if compressors is None:
        return None
    little = np.dtype(array.dtype).newbyteorder("<")
    steps = [zstd.encoder(compressor) for compressor in compressors]

    def encode(values: npt.NDArray[Any]) -> bytes:
        encoded: Any = np.ascontiguousarray(values.astype(little, copy=False))
        if not steps:
            raw: bytes = encoded.tobytes()
            return raw
        for step in steps:  # the first reads the array's own buffer: no copy
            encoded = step(encoded)
        return bytes(encoded)

    return encode


def decode_chunk_into(
    array: zarr.Array[Any], item: Any, compressors: list[Any] | None, out: npt.NDArray[Any]
) -> bool:
    """Decode one zstd chunk straight into ``out``, a whole chunk of the table it fills; False
    leaves it to :func:`decode_chunk` (no compressor or another chain, an absent chunk, a
    big-endian table, or no numcodecs library functions to decode with)."""
    decode = zstd.decoder()
    if decode is None or item is None or compressors is None or len(compressors) != 1:
        return False
    if out.dtype != out.dtype.newbyteorder("<"):
        return False
    written = decode(item if isinstance(item, bytes) else item.to_bytes(), out)
    if written != out.nbytes:
        found = "cannot be decoded" if written < 0 else f"decodes to {written} bytes"
        raise LayoutError(
            f"A chunk of {array.path} {found}, not the {out.nbytes} bytes of a whole chunk; the "
            "object is truncated or corrupt, and its values are unknown. Write it again."
        )
    return True


def decode_chunk(array: zarr.Array[Any], item: Any, compressors: list[Any] | None) -> Any:
    """A chunk's values from its fetched object, or from its local file (a ``Path``)."""
    if isinstance(item, Path):
        item = read_file(item)
    if compressors is None:
        return np.asarray(item)
    chunk = int(array.chunks[0])
    dtype = np.dtype(array.dtype).newbyteorder("<")
    if item is None:
        return np.zeros(chunk, dtype=array.dtype)
    decoded: Any = item if isinstance(item, bytes) else item.to_bytes()
    try:
        for compressor in reversed(compressors):
            decoded = compressor.decode(decoded)
        values = np.frombuffer(decoded, dtype=dtype)
    except Exception as broken:  # numcodecs raises RuntimeError, ValueError, ...
        raise LayoutError(
            f"A chunk of {array.path} cannot be decoded ({type(broken).__name__}: {broken}); "
            "the object is truncated or corrupt, and its values are unknown. Write it again."
        ) from broken
    if values.shape != (chunk,):
        raise LayoutError(
            f"A chunk of {array.path} decodes to {values.shape[0]} values, not {chunk}; the "
            "object is truncated or corrupt. Write it again."
        )
    return values


class Encoding:
    """Whole chunks encoded, or None for a chunk of only the fill value; a chunk of one value
    repeated is encoded once per value (a stretch of ``indptr`` where no position holds any)."""

    __slots__ = ("_chunk", "_encode", "_repeated")

    def __init__(self, encode: Encoder, chunk: int) -> None:
        self._encode, self._chunk = encode, chunk
        self._repeated: dict[bytes, bytes] = {}

    def __call__(self, piece: npt.NDArray[Any]) -> bytes | None:
        if piece.shape[0] < self._chunk:
            piece = np.concatenate([piece, np.zeros(self._chunk - piece.shape[0], piece.dtype)])
        if piece[0] != piece[-1] or not np.all(piece == piece[0]):  # a NaN is never repeated
            return self._encode(piece)
        if not piece[0]:  # the fill value throughout
            return None
        value = piece[:1].tobytes()
        if value not in self._repeated:
            self._repeated[value] = self._encode(piece)
        return self._repeated[value]
