"""`describe` describes what the reference writes exactly as the reference does, from metadata only,
and refuses every corrupted store with the reference's error class."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sporadik
from zarr.storage import LocalStore

import sporadik_dask as sd
from tests.helpers import (
    RecordingStore,
    block_of,
    edit_json,
    memory_copy,
    random_dense,
    write_reference,
)


def assert_described_as_the_reference(path: Path) -> sd.StoreDescription:
    ours = sd.describe(path)
    reference = sporadik.describe(path)
    assert (ours.spec, ours.shape) == (reference.spec, reference.shape)
    assert set(ours.layouts) == set(reference.layouts)
    for axis, theirs in reference.layouts.items():
        mine = ours.layouts[axis]
        assert (
            mine.path,
            mine.encoding,
            mine.encoding_version,
            mine.shape,
            mine.indexed_axis,
            mine.index_order,
            mine.nnz,
            str(mine.dtype),
            dict(mine.chunks),
            mine.byte_addressable,
            mine.has_maxima,
        ) == (
            theirs.path,
            theirs.encoding,
            theirs.encoding_version,
            theirs.shape,
            theirs.indexed_axis,
            theirs.index_order,
            theirs.nnz,
            theirs.dtype,
            theirs.chunks,
            theirs.range_readable,
            theirs.has_maxima,
        )
    return ours


CASES: dict[str, tuple[tuple[int, ...], dict[int, tuple[int, ...]], dict[str, Any]]] = {
    "rank 2, both layouts": ((40, 30), {0: (1,), 1: (0,)}, {}),
    "rank 2, one layout": ((40, 30), {1: (0,)}, {}),
    "rank 3, default orders": ((6, 5, 4), {0: (1, 2), 1: (0, 2), 2: (0, 1)}, {}),
    "rank 3, reversed orders": ((6, 5, 4), {0: (2, 1), 1: (2, 0), 2: (1, 0)}, {}),
    "rank 4, mixed orders": ((3, 4, 2, 5), {0: (3, 1, 2), 2: (1, 3, 0)}, {}),
    "byte addressable": ((40, 30), {0: (1,), 1: (0,)}, {"byte_addressable": True}),
    "without maxima": ((6, 5, 4), {1: (2, 0)}, {"maxima": False}),
    "small chunks": ((60, 50), {0: (1,), 1: (0,)}, {"chunk": 7}),
    "empty array": ((20, 10), {0: (1,), 1: (0,)}, {"density": 0.0}),
    "zero-length axis": ((0, 10), {0: (1,), 1: (0,)}, {}),
    "zero-length axis, rank 3": ((3, 0, 4), {0: (1, 2), 1: (2, 0)}, {}),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_store_the_reference_writes_is_described_as_the_reference_describes_it(
    tmp_path: Path, case: str
) -> None:
    shape, orders, case_options = CASES[case]
    options = dict(case_options)
    density = options.pop("density", 0.2)
    dense = random_dense(np.random.default_rng(0), shape, density)
    path = write_reference(tmp_path / "s.zarr", dense, orders, **options)
    ours = assert_described_as_the_reference(path)
    assert ours.nnz == np.count_nonzero(dense)
    assert sd.validate(path) == ours


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(24))
def test_seeded_random_stores_are_described_as_the_reference_describes_them(
    tmp_path: Path, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(2, 5))
    shape = tuple(int(size) for size in rng.integers(0, 7, size=rank))
    axes = [a for a in range(rank) if rng.random() < 0.7] or [int(rng.integers(rank))]
    orders = {
        axis: tuple(rng.permutation([a for a in range(rank) if a != axis]).tolist())
        for axis in axes
    }
    dtype = rng.choice(["float32", "float64", "int64", "int16"])
    dense = random_dense(rng, shape, float(rng.random()), dtype)
    path = write_reference(
        tmp_path / "s.zarr",
        dense,
        orders,
        byte_addressable=bool(rng.random() < 0.3),
        maxima=bool(rng.random() < 0.7),
        chunk=int(rng.integers(1, 50)) if rng.random() < 0.5 else None,
    )
    assert_described_as_the_reference(path)
    sd.validate(path)


def test_describe_reads_only_metadata_documents(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(1), (300, 200), 0.1)
    path = write_reference(tmp_path / "s.zarr", dense, {0: (1,), 1: (0,)}, chunk=100)
    store = RecordingStore(LocalStore(path, read_only=True))
    description = sd.describe(store)
    assert description.nnz == np.count_nonzero(dense)
    assert store.reads, "the counting store saw no reads"
    assert all(key.endswith("zarr.json") for key in store.reads), store.reads
    # The root, then per layout its group and its four arrays.
    assert len(store.reads) == 1 + 2 * 5


def test_open_store_reads_each_metadata_document_once_and_keeps_every_array_it_opened(
    tmp_path: Path,
) -> None:
    from sporadik_dask.store.describe import open_store

    dense = random_dense(np.random.default_rng(1), (300, 200), 0.1)
    path = write_reference(tmp_path / "s.zarr", dense, {0: (1,), 1: (0,)}, chunk=100)
    store = RecordingStore(LocalStore(path, read_only=True))
    opened = open_store(store)
    assert opened.description == sd.describe(path)
    assert len(store.reads) == len(set(store.reads)) == 1 + 2 * 5
    assert sorted(opened.arrays) == sorted(
        f"layouts/axis{axis}/{name}"
        for axis in (0, 1)
        for name in ("data", "indices", "indptr", "maxima")
    )
    with pytest.raises(AttributeError):
        opened.description = opened.description  # type: ignore[misc]


def test_a_reader_built_from_an_opened_store_fetches_no_metadata_document_again(
    tmp_path: Path,
) -> None:
    from sporadik_dask.store.describe import open_store

    dense = random_dense(np.random.default_rng(1), (300, 200), 0.1)
    path = write_reference(tmp_path / "s.zarr", dense, {0: (1,), 1: (0,)}, chunk=100)
    store = RecordingStore(LocalStore(path, read_only=True))
    reader = sd.StoreReader.from_opened(open_store(store), axis=1)
    store.reads.clear()
    np.testing.assert_array_equal(reader[:, 3:9].todense(), dense[:, 3:9])
    documents = [key for key in store.reads if key.endswith("zarr.json")]
    assert store.reads and documents == ["zarr.json"]  # the root's, once: still the store opened


def test_validate_reads_each_metadata_document_once(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(1), (300, 200), 0.1)
    path = write_reference(tmp_path / "s.zarr", dense, {0: (1,), 1: (0,)}, chunk=100)
    store = RecordingStore(LocalStore(path, read_only=True))
    sd.validate(store)
    documents = [key for key in store.reads if key.endswith("zarr.json")]
    assert len(documents) == len(set(documents)) == 1 + 2 * 5


def test_describe_works_inside_a_running_event_loop(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(2), (30, 20), 0.2)
    path = write_reference(tmp_path / "s.zarr", dense, {0: (1,)})

    async def in_a_notebook_cell() -> tuple[int, ...]:
        return sd.describe(path).shape

    assert asyncio.run(in_a_notebook_cell()) == (30, 20)


def test_describe_opens_a_zarr_store_object(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(3), (30, 20), 0.2)
    path = write_reference(tmp_path / "s.zarr", dense, {0: (1,), 1: (0,)})
    memory = memory_copy(path)
    assert sd.describe(memory) == sd.describe(LocalStore(path))
    assert sd.describe(memory).nnz == np.count_nonzero(dense)


def test_a_missing_store_is_refused_as_not_found(tmp_path: Path) -> None:
    with pytest.raises(sd.StoreNotFoundError, match=r"nothing\.zarr") as raised:
        sd.describe(tmp_path / "nothing.zarr")
    assert isinstance(raised.value, FileNotFoundError)


# Corrupted stores, each made by hand from a valid one.
Corruption = Callable[[Path], None]


def _block_edit(edit: Callable[[dict[str, Any]], None]) -> Corruption:
    return lambda path: edit_json(path / "zarr.json", lambda doc: edit(block_of(doc)))


def _set(key: str, value: Any) -> Corruption:
    return _block_edit(lambda block: block.__setitem__(key, value))


def _entry(index: int, key: str, value: Any) -> Corruption:
    return _block_edit(lambda block: block["layouts"][index].__setitem__(key, value))


def _child_attr(axis: int, key: str, value: Any) -> Corruption:
    return lambda path: edit_json(
        path / "layouts" / f"axis{axis}" / "zarr.json",
        lambda doc: doc["attributes"].__setitem__(key, value),
    )


def _array_shape(axis: int, name: str, size: int) -> Corruption:
    def edit(doc: dict[str, Any]) -> None:
        doc["shape"] = [size]

    return lambda path: edit_json(path / "layouts" / f"axis{axis}" / name / "zarr.json", edit)


def _delete(relative: str) -> Corruption:
    return lambda path: shutil.rmtree(path / relative)


def _remove_block(path: Path) -> None:
    edit_json(path / "zarr.json", lambda doc: doc["attributes"].pop("sporadik"))


def _duplicate_entry(block: dict[str, Any]) -> None:
    block["layouts"][1] = dict(block["layouts"][0])


def _extra_entry(block: dict[str, Any]) -> None:
    block["layouts"].append(dict(block["layouts"][0]))


CORRUPTIONS: dict[str, Corruption] = {
    "no block": _remove_block,
    "complete is false": _set("complete", False),
    "unknown spec": _set("spec", "2"),
    "shape of rank one": _set("shape", [40]),
    "no layouts named": _set("layouts", []),
    "path filed under the wrong axis": _entry(0, "path", "layouts/axis1"),
    "indexed axis out of range": _entry(0, "indexed_axis", 5),
    "index order not a permutation": _entry(0, "index_order", [0]),
    "index order repeats an axis": _entry(1, "index_order", [1]),
    "wrong declared shape": _child_attr(0, "shape", [30, 40]),
    "wrong encoding": _child_attr(0, "encoding-type", "csc_matrix"),
    "short indptr": _array_shape(0, "indptr", 40),
    "data and indices of different lengths": _array_shape(1, "data", 3),
    "two layouts for one axis": _block_edit(_duplicate_entry),
    "more layouts than axes": _block_edit(_extra_entry),
    "a named layout missing from the prefix": _delete("layouts/axis1"),
    "a layout missing its indices": _delete("layouts/axis0/indices"),
    "a path that leaves the prefix": _entry(0, "path", "layouts/../../elsewhere"),
    "a path that climbs above the store": _entry(0, "path", "../s.zarr/layouts/axis0"),
    "an absolute path": _entry(0, "path", "/layouts/axis0"),
}


@pytest.mark.parametrize("corruption", CORRUPTIONS, ids=list(CORRUPTIONS))
def test_a_corrupted_store_is_refused_with_the_references_error_class(
    tmp_path: Path, corruption: str
) -> None:
    dense = random_dense(np.random.default_rng(4), (40, 30), 0.2)
    path = write_reference(tmp_path / "s.zarr", dense, {0: (1,), 1: (0,)})
    CORRUPTIONS[corruption](path)
    with pytest.raises(ValueError) as theirs:
        sporadik.describe(path)
    with pytest.raises(sd.SporadikError) as ours:
        sd.describe(path)
    if isinstance(theirs.value, sporadik.SporadikError):
        assert type(ours.value).__name__ == type(theirs.value).__name__
    else:  # zarr's own refusal of a path with '..' segments
        assert isinstance(ours.value, sd.LayoutError)
    assert str(path) in str(ours.value)


@pytest.mark.parametrize("name", ["SporadikError", "SpecError", "IncompleteError", "LayoutError"])
def test_every_error_class_has_the_references_name_and_place(name: str) -> None:
    ours, theirs = getattr(sd, name), getattr(sporadik, name)
    assert issubclass(ours, ValueError)
    assert [c.__name__ for c in ours.__mro__[:2]] == [c.__name__ for c in theirs.__mro__[:2]]
