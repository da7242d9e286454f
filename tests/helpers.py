"""Test helpers: arrays with known values, stores written by the reference, and a counting store."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypedDict

import numpy as np
import numpy.typing as npt
import pytest
import scipy.sparse as sp
import sporadik
import xarray as xr
import zarr
from zarr.abc.store import ByteRequest, Store
from zarr.storage import MemoryStore, StoreLike, WrapperStore

from sporadik_dask.store.zarr_adapter import Buffer, BufferPrototype, buffer_prototype, run
from sporadik_dask.testing import LoopbackS3, S3Proxy

#: The store kinds for a test whose many cases would cost minutes on the S3 server: its S3
#: cases are marked slow (``pytest.mark.parametrize("store_kind", S3_SLOW, indirect=True)``).
S3_SLOW = ["local", "memory", "sharded", pytest.param("s3", marks=pytest.mark.slow)]
#: The store kinds for a test whose sharded cases repeat what another test of its module checks
#: on a sharded store: its sharded and S3 cases are marked slow.
SHARDED_SLOW = [
    "local",
    "memory",
    *(pytest.param(k, marks=pytest.mark.slow) for k in ("sharded", "s3")),
]


class StoreKind(NamedTuple):
    """What the ``store_kind`` fixture gives: where a store goes, how to reach it, and what a
    write there passes besides (``chunk``/``shard`` for the sharded kind)."""

    name: str
    store: Any
    storage_options: dict[str, Any] | None
    write_options: dict[str, Any]

    @property
    def options(self) -> dict[str, Any]:
        """``storage_options=`` for every call, when the kind needs them."""
        return {} if self.storage_options is None else {"storage_options": self.storage_options}

    def writing(self, chunk: int | None = None) -> dict[str, Any]:
        """What a write here passes, with ``chunk`` in place of the kind's own when given (the
        sharded kind's shard stays four chunks, a multiple of the chunk as it must be)."""
        if chunk is None:
            return dict(self.write_options)
        return {"chunk": chunk, **({"shard": 4 * chunk} if "shard" in self.write_options else {})}

    def beside(self, name: str) -> Any:
        """Another location of this kind, named ``name``: a directory or a key beside the
        kind's own, or a memory store of its own."""
        if isinstance(self.store, Path):
            return self.store.parent / name
        if isinstance(self.store, str):
            return f"{self.store.rsplit('/', 1)[0]}/{name}"
        return MemoryStore()

    def holding_reference(
        self,
        dense: npt.NDArray[Any],
        orders: Mapping[int, Sequence[int]],
        chunk: int,
        scratch: Path,
    ) -> Any:
        """The store here holding ``dense`` as the reference writes it (one layout per key of
        ``orders``): written in place for the local kind, its files copied into the memory store
        or the bucket. The reference does not shard, so the sharded kind is written by
        ``to_sporadik`` with the same layouts, sharded (index orders then the writer's own)."""
        import sporadik_dask as sd

        if self.name == "sharded":
            sd.to_sporadik(dense, self.store, axes=tuple(orders), **self.writing(chunk))
            return self.store
        if self.name == "local":
            write_reference(self.store, dense, orders, chunk=chunk)
            return self.store
        path = write_reference(scratch / "reference.zarr", dense, orders, chunk=chunk)
        target: Store = self.store
        if self.name == "s3":
            from zarr.storage import FsspecStore

            target = FsspecStore.from_url(self.store, storage_options=self.storage_options)
        for file in sorted(path.rglob("*")):
            if file.is_file():
                key = file.relative_to(path).as_posix()
                run(target.set(key, buffer_prototype().buffer.from_bytes(file.read_bytes())))
        return self.store


class S3Bucket(TypedDict):
    """What the ``s3`` fixture gives: a bucket's name and the ``storage_options`` reaching it."""

    storage_options: dict[str, Any]
    bucket: str


def proxied_store(
    server: LoopbackS3, proxy: S3Proxy, kind: str = "obstore", **retries: Any
) -> tuple[Any, dict[str, Any]]:
    """A fresh store location through the proxy: an fsspec URL with the ``storage_options``
    reaching it (``retries`` passed to them), or zarr's obstore store; and the keyword arguments
    every entry point takes it with."""
    prefix = f"{uuid.uuid4().hex}/counts.zarr"
    if kind == "fsspec":
        options = server.storage_options(proxy.endpoint, **retries)
        return f"s3://{server.bucket}/{prefix}", {"storage_options": options}
    return server.obstore(prefix, proxy.endpoint), {}


def random_dense(
    rng: np.random.Generator,
    shape: Sequence[int],
    density: float,
    dtype: npt.DTypeLike = np.float32,
) -> npt.NDArray[Any]:
    """A dense array with about ``density`` of its cells nonzero, values never zero."""
    values = rng.integers(1, 100, size=tuple(shape)).astype(dtype)
    return np.where(rng.random(tuple(shape)) < density, values, 0).astype(dtype)


def labelled(data: Any) -> xr.DataArray:
    """A (6, 4) DataArray over ``data`` with dims, coordinates, a name and attrs to round-trip."""
    return xr.DataArray(
        data,
        dims=("cell", "gene"),
        coords={"gene": ["a", "b", "c", "d"], "cell": np.arange(10, 16)},
        name="counts",
        attrs={"units": "reads"},
    )


def reference_layout(
    dense: npt.NDArray[Any], axis: int, index_order: Sequence[int]
) -> sporadik.Layout:
    """The layout of ``dense`` making ``axis`` contiguous, raveled over ``index_order``."""
    moved = np.transpose(dense, (axis, *index_order))
    matrix = sp.csr_matrix(moved.reshape(dense.shape[axis], math.prod(moved.shape[1:])))
    matrix.sort_indices()
    return sporadik.layout_over(
        dense.shape,
        axis,
        data=matrix.data,
        indices=matrix.indices,
        indptr=matrix.indptr,
        index_order=tuple(index_order),
    )


def write_reference(
    path: Path,
    dense: npt.NDArray[Any],
    orders: Mapping[int, Sequence[int]],
    *,
    byte_addressable: bool = False,
    maxima: bool = True,
    chunk: int | None = None,
) -> Path:
    """Write ``dense`` with the reference, one layout per key of ``orders``."""
    layouts = [reference_layout(dense, axis, order) for axis, order in orders.items()]
    sporadik.write_store(path, layouts, byte_addressable=byte_addressable, chunk=chunk)
    if not maxima:
        for axis in orders:
            shutil.rmtree(path / "layouts" / f"axis{axis}" / "maxima")
    return path


def layout_files(path: Path) -> dict[str, bytes]:
    """Every file under a store's ``layouts/``, by its path there: what two writes' bytes are
    compared by."""
    return {
        file.relative_to(path).as_posix(): file.read_bytes()
        for file in sorted((path / "layouts").rglob("*"))
        if file.is_file()
    }


def edit_json(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Edit one ``zarr.json`` by hand."""
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


def block_of(document: dict[str, Any]) -> dict[str, Any]:
    """The block inside a root ``zarr.json`` document."""
    block: dict[str, Any] = document["attributes"]["sporadik"]
    return block


class RecordingStore(WrapperStore[Store]):
    """A real store that records every key read and written, and can fail one write like a full
    disk does."""

    def __init__(self, store: Store, fail_on: str | None = None) -> None:
        super().__init__(store)
        self.reads: list[str] = []
        self.writes: list[str] = []
        self.documents: list[dict[str, Any]] = []
        self.fail_on = fail_on

    def _with_store(self, store: Store) -> RecordingStore:
        wrapped = type(self)(store, self.fail_on)
        wrapped.reads, wrapped.writes, wrapped.documents = self.reads, self.writes, self.documents
        return wrapped

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self.reads.append(key)
        return await self._store.get(key, prototype, byte_range)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        key_ranges = list(key_ranges)
        self.reads.extend(key for key, _ in key_ranges)
        return await self._store.get_partial_values(prototype, key_ranges)

    async def set(self, key: str, value: Buffer) -> None:
        if key == self.fail_on:
            raise OSError(28, "No space left on device", key)
        self.writes.append(key)
        if key == "zarr.json":
            self.documents.append(json.loads(value.to_bytes()))
        await self._store.set(key, value)


def first_block(x: Any) -> Any:
    """The first block of the dask array ``x``, computed alone, in either of dask's array models
    (the expression model has no ``.blocks``)."""
    import dask

    from sporadik_dask.read.dask_model import blocks_of

    graph, name = blocks_of(x)
    return dask.get(dict(graph), (name, *(0,) * x.ndim))


def zarr_array(group: zarr.Group, name: str) -> zarr.Array[Any]:
    """The zarr array ``name`` inside ``group`` (indexing a group may also give a group)."""
    array = group[name]
    assert isinstance(array, zarr.Array), f"{name!r} is a {type(array).__name__}"
    return array


def zarr_group(group: zarr.Group, name: str) -> zarr.Group:
    """The zarr group ``name`` inside ``group`` (indexing a group may also give an array)."""
    member = group[name]
    assert isinstance(member, zarr.Group), f"{name!r} is a {type(member).__name__}"
    return member


def stored(group: zarr.Group, name: str) -> npt.NDArray[Any]:
    """Every value of the zarr array ``name`` inside ``group``, as numpy."""
    return np.asarray(zarr_array(group, name)[:])


def open_dataset(store: StoreLike, **kwargs: Any) -> xr.Dataset:
    """``xr.open_dataset(store, engine="sporadik", **kwargs)`` for any zarr store.

    xarray annotates ``filename_or_obj`` with paths, buffers and its own data stores only, yet
    hands any other object to the engine, and ours opens zarr stores.
    """
    return xr.open_dataset(store, engine="sporadik", **kwargs)  # type: ignore[arg-type]


def memory_copy(path: Path) -> MemoryStore:
    """A zarr ``MemoryStore`` holding every object of the store at ``path``."""
    memory = MemoryStore()
    for file in sorted(path.rglob("*")):
        if file.is_file():
            key = file.relative_to(path).as_posix()
            run(memory.set(key, buffer_prototype().buffer.from_bytes(file.read_bytes())))
    return memory


def run_on_terminal(args: list[str], timeout: float = 120) -> tuple[int, str]:
    """Run a command with stdout and stderr on a pseudo-terminal, as a person at a shell would;
    return its exit status and everything it printed."""
    import os
    import pty
    import subprocess

    leader, follower = pty.openpty()
    process = subprocess.Popen(args, stdout=follower, stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    output = bytearray()
    while True:
        try:
            read = os.read(leader, 65536)
        except OSError:  # the terminal closes once the process and its children exit
            break
        if not read:
            break
        output += read
    os.close(leader)
    return process.wait(timeout=timeout), output.decode(errors="replace")


class StallingWrites(WrapperStore[Store]):
    """A real store on which a write stops for good after ``after`` chunk objects: it names its
    process in ``marker`` and sleeps until it is killed, its event loop (every write) held."""

    def __init__(self, store: Store, after: int, marker: Path) -> None:
        super().__init__(store)
        self.after, self.marker, self.written = after, marker, [0]

    def _with_store(self, store: Store) -> StallingWrites:
        wrapped = type(self)(store, self.after, self.marker)
        wrapped.written = self.written
        return wrapped

    async def set(self, key: str, value: Buffer) -> None:
        import os
        import time

        if "/c/" in key:
            if self.written[0] == self.after:
                self.marker.with_suffix(".tmp").write_text(str(os.getpid()))
                self.marker.with_suffix(".tmp").rename(self.marker)
                time.sleep(600)  # killed long before this ends
            self.written[0] += 1
        await self._store.set(key, value)


def overwrite_until_stalled(arguments: str) -> None:
    """In a process of its own: overwrite the store ``arguments`` (JSON: ``location``,
    ``storage_options``, ``input``, a pickled array, ``after`` and ``marker``) names, stalling
    after ``after`` chunk objects (:class:`StallingWrites`)."""
    import pickle

    from zarr.storage import FsspecStore, LocalStore

    import sporadik_dask as sd

    given = json.loads(arguments)
    location, options = given["location"], given["storage_options"]
    store: Store = (
        FsspecStore.from_url(location, storage_options=options, read_only=False)
        if "://" in location
        else LocalStore(location)
    )
    x = pickle.loads(Path(given["input"]).read_bytes())
    stalling = StallingWrites(store, given["after"], Path(given["marker"]))
    sd.to_sporadik(x, stalling, overwrite=True, chunk=given["chunk"])
    raise SystemExit("the write ended without stalling")


def mount_tmpfs(directory: Path, size: str) -> bool:
    """Mount a tmpfs of ``size`` on ``directory``: a real file system that fills up (root only)."""
    directory.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
        capture_output=True,
    )
    return done.returncode == 0


def unmount(directory: Path) -> None:
    """Unmount, waiting for writes still in flight on other threads; detach if they linger."""
    for _ in range(50):
        if subprocess.run(["umount", str(directory)], capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    subprocess.run(["umount", "--lazy", str(directory)], check=True)


#: Shape of each block of :func:`logged_input`.
LOGGED_BLOCK = (30, 40)


def logged_input(log: Path, blocks: int) -> Any:
    """A dask array of ``blocks`` sparse.COO row blocks, each made by a task that appends its
    number to the file ``log`` when it runs: how often a write read each block of its input."""
    import dask
    import dask.array as da
    import sparse

    from sporadik_dask.read.dask_model import from_delayed  # dask's own, in either array model

    meta = sparse.COO.from_numpy(np.zeros((0, 0)))
    return da.concatenate(
        [
            from_delayed(dask.delayed(_logged_block, pure=True)(str(log), b), LOGGED_BLOCK, meta)
            for b in range(blocks)
        ]
    )


def logged_dense(blocks: int) -> npt.NDArray[Any]:
    """The values :func:`logged_input` holds."""
    return np.concatenate([_logged_values(b) for b in range(blocks)])


def _logged_values(b: int) -> npt.NDArray[Any]:
    return random_dense(np.random.default_rng(b), LOGGED_BLOCK, 0.2)


def _logged_block(log: str, b: int) -> Any:
    import sparse

    with open(log, "a") as file:
        file.write(f"{b}\n")
    return sparse.COO.from_numpy(_logged_values(b))


def reads_logged(log: Path) -> list[int]:
    """Each block's number, as often as :func:`logged_input` made it, sorted."""
    return sorted(int(line) for line in log.read_text().split()) if log.exists() else []
