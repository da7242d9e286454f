"""Array references: what a write's task holds in place of an open zarr array."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import zarr

import sporadik_dask as sd
from sporadik_dask.write import array_refs, tasks


def test_an_array_reference_pickles_without_the_array_and_opens_it_once_per_process(
    tmp_path: Path,
) -> None:
    group = zarr.open_group(tmp_path / "s.zarr", mode="w", zarr_format=3)
    array = group.create_array("layouts/axis0/data", shape=(10,), dtype="float32", chunks=(4,))
    ref = array_refs.ArrayRef.of(array)
    copied = pickle.loads(pickle.dumps(ref))
    assert copied == ref and hash(copied) == hash(ref)
    opened = copied.open()
    assert opened.path == "layouts/axis0/data" and opened.chunks == (4,)
    assert copied.open() is opened


def test_an_array_reference_differs_by_store_path_and_chunking(tmp_path: Path) -> None:
    def ref(store: str, path: str, chunk: int) -> array_refs.ArrayRef:
        group = zarr.open_group(tmp_path / store, mode="a", zarr_format=3)
        array = group.create_array(path, shape=(10,), dtype="float32", chunks=(chunk,))
        return array_refs.ArrayRef.of(array)

    first = ref("a.zarr", "data", 4)
    assert len({first, ref("b.zarr", "data", 4), ref("a.zarr", "other", 4)}) == 3
    assert ref("c.zarr", "data", 4) != ref("d.zarr", "data", 5)


def test_an_array_replaced_after_the_write_was_planned_is_refused(tmp_path: Path) -> None:
    group = zarr.open_group(tmp_path / "s.zarr", mode="w", zarr_format=3)
    ref = array_refs.ArrayRef.of(
        group.create_array("data", shape=(10,), dtype="float32", chunks=(4,))
    )
    group.create_array("data", shape=(10,), dtype="float32", chunks=(5,), overwrite=True)
    with pytest.raises(sd.SporadikError, match="changed after this write was planned"):
        tasks.write_array(ref, 0, np.ones(10, dtype=np.float32))
