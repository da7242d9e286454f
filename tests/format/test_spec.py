"""The pure format rules agree with the reference's normative module."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sporadik
import sporadik.spec as reference_spec
from hypothesis import given
from hypothesis import strategies as st

from sporadik_dask.format import spec
from sporadik_dask.format.errors import IncompleteError, LayoutError, SpecError, SporadikError


def test_the_names_and_versions_are_the_references() -> None:
    assert spec.SPEC_VERSION == reference_spec.SPEC_VERSION
    assert spec.SUPPORTED_SPECS == reference_spec.SUPPORTED_SPECS
    assert spec.BLOCK_KEY == reference_spec.BLOCK_KEY
    assert spec.LAYOUTS_GROUP == reference_spec.LAYOUTS_GROUP
    assert spec.MIN_RANK == reference_spec.MIN_RANK
    assert spec.TARGET_CHUNK_BYTES == sporadik.TARGET_CHUNK_BYTES


@pytest.mark.parametrize("rank", [2, 3, 4])
def test_paths_encodings_and_declared_shapes_follow_the_reference_at_every_rank(rank: int) -> None:
    shape = tuple(range(3, 3 + rank))
    for axis in range(rank):
        others = [a for a in range(rank) if a != axis]
        assert spec.layout_path(axis) == reference_spec.layout_path(axis)
        assert spec.anndata_encoding(rank, axis) == reference_spec.anndata_encoding(rank, axis)
        for order in itertools.permutations(others):
            assert spec.declared_shape(shape, axis, order) == reference_spec.raveled_shape(
                shape, axis, order
            )


@given(
    extent=st.integers(0, 2**40),
    nnz=st.integers(0, 2**40),
)
def test_index_width_is_int32_until_an_index_or_offset_would_not_fit(extent: int, nnz: int) -> None:
    expected = np.int32 if max(extent, nnz) < 2**31 else np.int64
    assert spec.index_dtype(extent, nnz) == np.dtype(expected)


@given(
    dtype=st.sampled_from(["int8", "int32", "int64", "float32", "float64", "bool", "complex128"]),
    length=st.integers(0, 10**6),
)
def test_chunk_size_is_the_references(dtype: str, length: int) -> None:
    assert spec.chunk_for(dtype, length) == sporadik.chunk_for(dtype, length)


@pytest.mark.parametrize("rank", [2, 3, 4])
def test_a_written_block_is_the_one_the_reference_writes(rank: int) -> None:
    shape = tuple(range(2, 2 + rank))
    orders = {axis: tuple(reversed([a for a in range(rank) if a != axis])) for axis in range(rank)}
    ours = spec.Block.over(shape, orders).to_json()
    layouts = {
        axis: sporadik.layout_over(
            shape,
            axis,
            data=np.zeros(0),
            indices=np.zeros(0),
            indptr=np.zeros(shape[axis] + 1),
            index_order=order,
        )
        for axis, order in orders.items()
    }
    assert ours == reference_spec.block_for(shape, layouts)
    assert spec.parse_block({spec.BLOCK_KEY: ours}, "here") == spec.Block.over(shape, orders)


def _block(**changes: object) -> dict[str, object]:
    block: dict[str, object] = {
        "spec": "1",
        "complete": True,
        "shape": [4, 5],
        "layouts": [{"path": "layouts/axis0", "indexed_axis": 0, "index_order": [1]}],
    }
    block.update(changes)
    return {spec.BLOCK_KEY: block}


@pytest.mark.parametrize(
    ("attributes", "error"),
    [
        ({}, IncompleteError),
        ({spec.BLOCK_KEY: "done"}, IncompleteError),
        (_block(spec="2"), SpecError),
        (_block(spec=1), SpecError),
        (_block(complete=False), IncompleteError),
        (_block(complete="yes"), IncompleteError),
        (_block(shape=[4]), SporadikError),
        (_block(shape=[4, -1]), SporadikError),
        (_block(shape=[4, 5.5]), SporadikError),
        (_block(shape="4x5"), SporadikError),
        (_block(layouts=[]), SporadikError),
        (_block(layouts=["layouts/axis0"]), SporadikError),
        (
            _block(
                layouts=[
                    {"path": "layouts/axis0", "indexed_axis": a, "index_order": [1 - a]}
                    for a in (0, 1, 0)
                ]
            ),
            SporadikError,
        ),
        (
            _block(layouts=[{"path": "layouts/axis0", "indexed_axis": 0, "index_order": [1]}] * 2),
            LayoutError,
        ),
        (
            _block(layouts=[{"path": "layouts/axis0", "indexed_axis": 2, "index_order": [1]}]),
            LayoutError,
        ),
        (
            _block(layouts=[{"path": "layouts/axis0", "indexed_axis": True, "index_order": [0]}]),
            LayoutError,
        ),
        (
            _block(layouts=[{"path": "layouts/axis0", "indexed_axis": 0, "index_order": [0]}]),
            LayoutError,
        ),
        (
            _block(layouts=[{"path": "layouts/axis0", "indexed_axis": 0, "index_order": None}]),
            LayoutError,
        ),
        (
            _block(layouts=[{"path": "layouts/../../x", "indexed_axis": 0, "index_order": [1]}]),
            LayoutError,
        ),
        (
            _block(layouts=[{"path": "/etc/passwd", "indexed_axis": 0, "index_order": [1]}]),
            LayoutError,
        ),
        (_block(layouts=[{"path": 7, "indexed_axis": 0, "index_order": [1]}]), LayoutError),
    ],
)
def test_a_block_a_reader_cannot_trust_is_refused_with_its_class(
    attributes: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error) as raised:
        spec.parse_block(attributes, "store.zarr")
    assert isinstance(raised.value, SporadikError)
    assert "store.zarr" in str(raised.value)


@pytest.mark.parametrize(
    ("indptr", "nnz", "fragment"),
    [
        ([1, 2, 3], 3, "starts at 1"),
        ([0, 3, 2, 4], 4, "decreases after position 1"),
        ([0, 2, 3], 4, "ends at 3"),
        ([0, 2, 5], 4, "ends at 5"),
        ([], 0, "empty"),
    ],
)
def test_an_indptr_that_would_slice_outside_data_is_refused(
    indptr: list[int], nnz: int, fragment: str
) -> None:
    with pytest.raises(LayoutError, match=fragment):
        spec.check_indptr(np.asarray(indptr), nnz, "axis0")


def test_a_well_formed_indptr_with_empty_runs_passes() -> None:
    spec.check_indptr(np.asarray([0, 0, 2, 2, 5, 5]), 5, "axis0")


@pytest.mark.parametrize("bad", [-1, 10, 11])
def test_an_index_outside_the_raveled_extent_is_refused(bad: int) -> None:
    with pytest.raises(LayoutError, match=str(bad)):
        spec.check_indices(np.asarray([0, 3, bad, 9]), 10, "axis1")
    spec.check_indices(np.asarray([0, 3, 9]), 10, "axis1")
