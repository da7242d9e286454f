"""The codec chains this package encodes and decodes itself, outside zarr.

zarr's own ``array[a:b] = values`` spends Python per chunk holding the GIL, so two threads write
no faster than one, and far slower than encoding the same chunks with the same codec
(docs/benchmarks.md, "Numbers behind the code's choices").
The arrays here carry only the codecs this package chose (``bytes``, then ``zstd`` or ``blosc``, or
nothing), so their chunks are encoded with those codecs' own numcodecs implementation; any other
codec chain falls back to zarr. Tests compare the objects byte for byte with zarr's.

Which chain a write gives each array is chosen by name (:data:`CODECS`): zarr-python reads every
one with its own registered codecs, and so do the reference and zarrita (JS), which decodes
``zstd`` and ``blosc`` alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import numpy.typing as npt
import zarr
from numcodecs import Blosc, Zstd
from zarr.codecs import BloscCodec, BytesCodec, ShardingCodec, ZstdCodec
from zarr.codecs.bytes import Endian

from sporadik_dask.format.errors import LayoutError
from sporadik_dask.format.spec import MAXIMA
from sporadik_dask.store import zstd
from sporadik_dask.store.objects import read_file
from sporadik_dask.store.zarr_adapter import blosc_codec, zstd_codec

__all__ = [
    "CODECS",
    "Codec",
    "Codecs",
    "Encoder",
    "Encoding",
    "chain_label",
    "chain_of",
    "check_codecs",
    "compressors_for",
    "compressors_of",
    "decode_chunk",
    "decode_chunk_into",
    "encoder_of",
]

Encoder = Callable[[npt.NDArray[Any]], bytes]

#: The codec chains a write may give an array, after little-endian ``bytes``:
#:
#: - ``"zstd"``: zstd at level 0 (zarr's default for numbers, and this package's);
#: - ``"blosc-zstd"``: blosc's shuffle, then zstd inside blosc (blosc level 3): the fewest bytes;
#: - ``"blosc-lz4"``: blosc's shuffle, then lz4 (blosc level 5): the fastest decode.
#:
#: Blosc bit-shuffles ``data`` (small counts: most bits zero) and byte-shuffles the integer
#: arrays (positions within a run vary in their low bytes only). Blosc level 3 is zstd's level 5:
#: on 6,000 realistic cells in 32,768-value chunks its chunks were 1-2 % larger than at blosc
#: level 5 (zstd's 9) and encoded 2-9x faster. Bytes and speed: ``benchmarks/codecs.py``.
Codec = Literal["zstd", "blosc-zstd", "blosc-lz4"]
CODECS: tuple[Codec, ...] = get_args(Codec)
#: One chain for every array, or one per array name (``data``, ``indices``, ``indptr``; those not
#: named get ``"zstd"``).
Codecs = Codec | Mapping[str, Codec]
_ARRAYS = ("data", "indices", "indptr", MAXIMA)


def check_codecs(codecs: Codecs) -> None:
    """Refuse a chain or an array name this package does not write, before anything is."""
    chosen = {name: codecs for name in _ARRAYS} if isinstance(codecs, str) else codecs
    for name, codec in chosen.items():
        if name not in _ARRAYS:
            raise LayoutError(
                f"codecs names the array {name!r}; a layout holds {', '.join(_ARRAYS[:3])} "
                "(and maxima). Name those, or give one chain for all."
            )
        if codec not in CODECS:
            raise LayoutError(
                f"codecs={codec!r} for {name}; choose one of {', '.join(map(repr, CODECS))}, "
                "the chains zarr-python, the reference and zarrita all read."
            )


def compressors_for(codecs: Codecs, name: str, dtype: np.dtype[Any]) -> Any:
    """The ``compressors`` zarr's ``create_array`` takes for array ``name`` of ``dtype``."""
    codec = codecs if isinstance(codecs, str) else codecs.get(name, "zstd")
    if codec == "zstd":
        return "auto"  # zarr's own default: zstd at level 0, the bytes written so far
    shuffle: Literal["bitshuffle", "shuffle"] = "bitshuffle" if name == "data" else "shuffle"
    cname: Literal["zstd", "lz4"] = "zstd" if codec == "blosc-zstd" else "lz4"
    level = 3 if cname == "zstd" else 5
    return [BloscCodec(cname=cname, clevel=level, shuffle=shuffle, typesize=dtype.itemsize)]


def chain_label(codecs: Sequence[Any]) -> str:
    """An array's codecs as :data:`CODECS` names them (``blosc-zstd/bitshuffle``), ``raw`` for
    bytes alone; a chain no option writes by zarr's names (``gzip``), sharded ones ``... in
    shards``."""
    names = []
    for codec in codecs:
        if isinstance(codec, ShardingCodec):
            return f"{chain_label(list(codec.codecs))} in shards"
        if isinstance(codec, BloscCodec):
            names.append(f"blosc-{codec.cname.name}/{codec.shuffle.name}")
        elif not isinstance(codec, BytesCodec):
            names.append(str(codec.to_dict()["name"]))
    return " + ".join(names) or "raw"


def chain_of(codecs: list[Any]) -> list[Any] | None:
    """The numcodecs compressors after a little-endian ``bytes`` codec, if that is the chain
    (each ``zstd`` or ``blosc``)."""
    if not codecs:
        return None
    serializer = codecs.pop(0)
    if not isinstance(serializer, BytesCodec) or serializer.endian not in (None, Endian.little):
        return None
    found = []
    for codec in codecs:
        if isinstance(codec, ZstdCodec):
            found.append(zstd_codec(codec))
        elif isinstance(codec, BloscCodec):
            found.append(blosc_codec(codec))
        else:
            return None
    return found


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
    steps = [
        zstd.encoder(compressor) if isinstance(compressor, Zstd) else compressor.encode
        for compressor in compressors
    ]

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
    """Decode one zstd or blosc chunk straight into ``out``, a whole chunk of the table it fills;
    False leaves it to :func:`decode_chunk` (no compressor or another chain, an absent chunk, a
    big-endian table, or no numcodecs library functions to decode with)."""
    if item is None or compressors is None or len(compressors) != 1:
        return False
    if out.dtype != out.dtype.newbyteorder("<"):
        return False
    source = item if isinstance(item, bytes) else item.to_bytes()
    if isinstance(compressors[0], Blosc):
        written = _blosc_into(compressors[0], source, out)
    else:
        decode = zstd.decoder()
        if decode is None:
            return False
        written = decode(source, out)
    if written != out.nbytes:
        found = "cannot be decoded" if written < 0 else f"decodes to {written} bytes"
        raise LayoutError(
            f"A chunk of {array.path} {found}, not the {out.nbytes} bytes of a whole chunk; the "
            "object is truncated or corrupt, and its values are unknown. Write it again."
        )
    return True


def _blosc_into(codec: Blosc, source: bytes, out: npt.NDArray[Any]) -> int:
    """Decompress a blosc chunk into ``out``: the bytes written, -1 for an object that is no
    whole blosc frame or holds more or fewer bytes than ``out`` (blosc would leave the rest as
    it was). Blosc's 16-byte header holds, little-endian, the bytes it decodes to at 4 and its
    own length at 12."""
    if len(source) < 16:
        return -1
    decoded, length = int.from_bytes(source[4:8], "little"), int.from_bytes(source[12:16], "little")
    if decoded != out.nbytes or length != len(source):
        return -1
    try:
        codec.decode(source, out=out)
    except (RuntimeError, ValueError, TypeError):
        return -1
    return out.nbytes


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
