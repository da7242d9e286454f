"""zarr's private names the package relies on exist and behave as ``zarr_adapter`` uses them.

Each check names what is missing, so a zarr upgrade that moves one fails here, by name, rather
than deep inside a read or a write.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.core.metadata import ArrayV3Metadata

#: (module, attribute, what the package does with it): everything the adapter reaches for.
PRIVATE = [
    ("zarr.core.sync", "sync", "runs the async core from synchronous code"),
    ("zarr.core.array", "AsyncArray", "describes a store's arrays in one batch"),
    ("zarr.core.group", "AsyncGroup", "opens a store's root and layout groups"),
    ("zarr.core.buffer", "default_buffer_prototype", "reads and writes raw chunk objects"),
    ("zarr.core.buffer", "Buffer", "the type of a raw chunk object"),
    ("zarr.core.buffer", "BufferPrototype", "the type of the buffer prototype"),
    ("zarr.storage._common", "make_store_path", "resolves a write's target before writing"),
]


def _private(module: str, name: str, use: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as missing:
        pytest.fail(
            f"zarr {zarr.__version__} has no {module}.{name} ({missing}); "
            f"sporadik_dask.store.zarr_adapter uses it: it {use}. Update the adapter."
        )


@pytest.mark.parametrize(
    ("module", "name", "use"), PRIVATE, ids=[f"{m}.{n}" for m, n, _ in PRIVATE]
)
def test_every_private_zarr_name_the_adapter_imports_exists(
    module: str, name: str, use: str
) -> None:
    _private(module, name, use)


def test_the_adapter_imports_and_exports_what_the_package_takes_from_it() -> None:
    from sporadik_dask.store import zarr_adapter

    missing = [name for name in zarr_adapter.__all__ if not hasattr(zarr_adapter, name)]
    assert not missing


def test_a_zarr_array_holds_its_async_array_under_the_name_the_adapter_reads(
    tmp_path: Path,
) -> None:
    from sporadik_dask.store.zarr_adapter import AsyncArray, async_array

    array = zarr.create_array(tmp_path / "a.zarr", shape=(10,), chunks=(4,), dtype="int32")
    if not hasattr(array, "_async_array"):
        pytest.fail(f"zarr {zarr.__version__}: zarr.Array has no _async_array any more")
    assert isinstance(async_array(array), AsyncArray)
    assert zarr.Array(async_array(array)).shape == (10,)


def test_an_opened_group_is_an_async_group_and_its_arrays_async_arrays(tmp_path: Path) -> None:
    from sporadik_dask.store.zarr_adapter import AsyncArray, AsyncGroup, run

    group = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=3)
    group.create_array("x", shape=(3,), dtype="int8")
    opened = run(zarr.api.asynchronous.open_group(store=tmp_path / "g.zarr", mode="r"))
    assert isinstance(opened, AsyncGroup)
    assert isinstance(run(opened.getitem("x")), AsyncArray)


def test_run_drives_a_coroutine_from_sync_code_and_from_inside_a_running_loop() -> None:
    from sporadik_dask.store.zarr_adapter import run

    async def seven() -> int:
        await asyncio.sleep(0)
        return 7

    async def notebook_cell() -> int:
        return run(seven())  # a running loop in this thread, as in a notebook

    assert run(seven()) == 7
    assert asyncio.run(notebook_cell()) == 7


def test_the_buffer_prototype_round_trips_bytes() -> None:
    from sporadik_dask.store.zarr_adapter import Buffer, buffer_prototype

    buffer = buffer_prototype().buffer.from_bytes(b"sporadik")
    assert isinstance(buffer, Buffer)
    assert buffer.to_bytes() == b"sporadik"


def test_the_zstd_codecs_numcodecs_object_decodes_what_zarr_wrote(tmp_path: Path) -> None:
    from sporadik_dask.store.zarr_adapter import chunk_key, zstd_codec

    codec = zarr.codecs.ZstdCodec(level=3)
    array = zarr.create_array(
        tmp_path / "z.zarr", shape=(8,), chunks=(4,), dtype="<i4", compressors=[codec]
    )
    array[:] = np.arange(1, 9, dtype="<i4")
    if not hasattr(codec, "_zstd_codec"):
        pytest.fail(f"zarr {zarr.__version__}: ZstdCodec has no _zstd_codec any more")
    assert isinstance(array.metadata, ArrayV3Metadata)
    written = array.metadata.codecs[1]
    assert isinstance(written, zarr.codecs.ZstdCodec)
    inner = zstd_codec(written)
    raw = (tmp_path / "z.zarr" / chunk_key(array, 1)).read_bytes()
    assert np.frombuffer(inner.decode(raw), dtype="<i4").tolist() == [5, 6, 7, 8]
    assert inner.decode(inner.encode(raw)) == raw


def test_the_blosc_codecs_numcodecs_object_writes_the_bytes_zarr_wrote(tmp_path: Path) -> None:
    from sporadik_dask.store.zarr_adapter import blosc_codec, chunk_key

    codec = zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle")
    array = zarr.create_array(
        tmp_path / "b.zarr", shape=(8,), chunks=(4,), dtype="<f4", compressors=[codec]
    )
    array[:] = np.arange(1, 9, dtype="<f4")
    if not hasattr(codec, "_blosc_codec"):
        pytest.fail(f"zarr {zarr.__version__}: BloscCodec has no _blosc_codec any more")
    assert isinstance(array.metadata, ArrayV3Metadata)
    written = array.metadata.codecs[1]
    assert isinstance(written, zarr.codecs.BloscCodec)
    inner = blosc_codec(written)
    raw = (tmp_path / "b.zarr" / chunk_key(array, 1)).read_bytes()
    assert np.frombuffer(inner.decode(raw), dtype="<f4").tolist() == [5, 6, 7, 8]
    assert inner.encode(np.array([5, 6, 7, 8], dtype="<f4")) == raw


def test_chunk_keys_name_the_objects_zarr_writes(tmp_path: Path) -> None:
    from sporadik_dask.store.zarr_adapter import chunk_key

    array = zarr.create_array(tmp_path / "k.zarr", shape=(12,), chunks=(4,), dtype="int8")
    array[:] = 1
    written = {
        p.relative_to(tmp_path / "k.zarr").as_posix() for p in (tmp_path / "k.zarr").rglob("*")
    }
    assert {chunk_key(array, i) for i in range(3)} <= written


def test_the_metadata_document_is_the_zarr_json_zarr_wrote(tmp_path: Path) -> None:
    from sporadik_dask.store.zarr_adapter import metadata_document

    array = zarr.create_array(tmp_path / "m.zarr", shape=(5,), chunks=(5,), dtype="float32")
    on_disk = json.loads((tmp_path / "m.zarr" / "zarr.json").read_bytes())
    assert json.loads(metadata_document(array)) == on_disk


def test_a_path_resolves_to_a_store_path_on_that_directory(tmp_path: Path) -> None:
    from zarr.storage import LocalStore, StorePath

    from sporadik_dask.store.zarr_adapter import resolve_store_path, run

    (tmp_path / "s.zarr").mkdir()
    resolved = run(resolve_store_path(str(tmp_path / "s.zarr")))
    assert isinstance(resolved, StorePath)
    assert isinstance(resolved.store, LocalStore)
    assert str(resolved.store.root) == str(tmp_path / "s.zarr")


def test_no_module_but_the_adapter_names_zarrs_private_parts() -> None:
    import re
    from pathlib import Path

    import sporadik_dask

    package = Path(sporadik_dask.__file__).parent
    private = re.compile(r"zarr\.core|zarr\.storage\._|\._zstd_codec|\._blosc_codec|\._async_array")
    found = [
        f"{path.relative_to(package)}:{number}"
        for path in package.rglob("*.py")
        if path.name != "zarr_adapter.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert not found, f"zarr's private names outside sporadik_dask/store/zarr_adapter.py: {found}"


def test_crc32c_is_the_checksum_zarr_puts_after_a_shard_index(tmp_path: Path) -> None:
    from sporadik_dask.store.zarr_adapter import crc32c

    array = zarr.create_array(
        tmp_path / "h.zarr", shape=(8,), chunks=(2,), shards=(8,), dtype="int8", fill_value=0
    )
    array[:] = 1
    shard = (tmp_path / "h.zarr" / "c" / "0").read_bytes()
    index = shard[-(16 * 4 + 4) :]
    assert crc32c(index[:-4]) == index[-4:]
