"""Each input's pieces as tasks: their keys and offsets, read without computing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr

from sporadik_dask.planning.plan import plan_layout
from sporadik_dask.write import array_refs, piece_graphs


def test_block_pieces_carry_each_block_offset_in_c_order() -> None:
    layer = piece_graphs._block_pieces("p", "x", ((2, 3), (4, 1, 5)))
    assert [task[1:] for task in layer.values()] == [
        (("x", 0, 0), (0, 0)),
        (("x", 0, 1), (0, 4)),
        (("x", 0, 2), (0, 5)),
        (("x", 1, 0), (2, 0)),
        (("x", 1, 1), (2, 4)),
        (("x", 1, 2), (2, 5)),
    ]


def test_layout_pieces_are_named_by_the_arrays_they_read(tmp_path: Path) -> None:
    group = zarr.open_group(tmp_path / "s.zarr", mode="w", zarr_format=3)
    indices = group.create_array("indices", shape=(4,), dtype="int32", chunks=(2,))
    data = group.create_array("data", shape=(4,), dtype="float32", chunks=(2,))
    other = zarr.open_group(tmp_path / "t.zarr", mode="w", zarr_format=3)
    moved = other.create_array("data", shape=(4,), dtype="float32", chunks=(2,))
    indptr = np.array([0, 1, 3, 4])
    bounds = np.array([0, 2, 3])
    plan = plan_layout((3, 5), 0, (1,), np.diff(indptr), "float32", partition_values=2)
    refs = array_refs.ArrayRef.of(indices), array_refs.ArrayRef.of(data)
    here = piece_graphs.pieces_of_layout(*refs, indptr, bounds, plan)
    there = piece_graphs.pieces_of_layout(
        refs[0], array_refs.ArrayRef.of(moved), indptr, bounds, plan
    )
    assert len(here.keys) == 2 and here.keys[0] != there.keys[0]
    task = here.graph.layers[here.keys[0][0]][here.keys[0]]
    np.testing.assert_array_equal(task[3], [0, 1, 3])
