"""Arrays built and inspected through ``read/dask_model.py`` are the same in dask's graph and
expression models (``.ci/run`` runs this file in both), and the private dask name it uses in the
expression model is where it is called, by name."""

from __future__ import annotations

import inspect
import weakref
from typing import Any

import dask
import dask.array as da
import numpy as np
import sparse

from sporadik_dask.read import dask_model


class _Source:
    """What a read reads: an array-like that admits weak references and has no ``copy``."""

    def __init__(self, values: np.ndarray[Any, Any]) -> None:
        self.values = values
        self.shape, self.dtype, self.ndim = values.shape, values.dtype, values.ndim

    def __getitem__(self, key: Any) -> Any:
        return self.values[key]


def test_the_expression_models_from_graph_takes_what_it_is_given() -> None:
    """``dask.array._array_expr._collection.from_graph(layer, _meta, chunks, keys, name_prefix)``:
    private, called by position in the expression model."""
    from dask.array._array_expr._collection import from_graph

    assert list(inspect.signature(from_graph).parameters) == [
        "layer",
        "_meta",
        "chunks",
        "keys",
        "name_prefix",
    ]


def test_an_array_from_a_graph_has_its_blocks_meta_and_the_names_prefix() -> None:
    graph = {("mine-abc", i): np.full(2, float(i)) for i in range(3)}
    x = dask_model.from_graph(graph, "mine-abc", ((2, 2, 2),), np.empty(0))
    assert x.name.startswith("mine") and x.chunks == ((2, 2, 2),)
    assert isinstance(x._meta, np.ndarray)
    np.testing.assert_array_equal(x.compute(), [0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal((x + 1).sum().compute(), 12.0)


def test_a_delayed_value_is_a_one_block_array_of_its_metas_type() -> None:
    value = dask.delayed(sparse.COO.from_numpy)(np.eye(3))
    x = dask_model.from_delayed(value, (3, 3), sparse.COO.from_numpy(np.zeros((0, 0))))
    assert isinstance(x._meta, sparse.COO) and x.numblocks == (1, 1)
    np.testing.assert_array_equal(x.compute().todense(), np.eye(3))


def test_a_read_is_known_by_its_source_and_beneath_what_is_computed_from_it() -> None:
    source = _Source(np.arange(12.0).reshape(3, 4))
    x = dask_model.read_array(source, (2, 4), np.empty((0, 0)), name="sporadik-read-test")
    assert dask_model.source_of(x) is source
    derived = (x + 1)[:, :2]
    assert dask_model.source_of(derived) is None and dask_model.reads_beneath(derived)
    assert x.name in dask_model.names_beneath(derived)
    assert not dask_model.reads_beneath(da.ones(3))
    np.testing.assert_array_equal(derived.compute(), source.values[:, :2] + 1)
    gone = weakref.ref(source)
    del source, x, derived
    assert gone() is None  # nothing here holds a source beyond its arrays


def test_a_subclass_rewraps_the_same_array() -> None:
    class Mine(da.Array):
        pass

    x = da.arange(6, chunks=2) * 2
    mine = dask_model.rewrap(Mine, x)
    assert type(mine) is Mine and mine.name == x.name and mine.chunks == x.chunks
    assert dask_model.rewrap(da.Array, mine).name == x.name
    np.testing.assert_array_equal(dask.compute(mine)[0], x.compute())


def test_blocks_of_several_arrays_are_held_by_one_graph() -> None:
    left, right = da.arange(6, chunks=3), (da.arange(6, chunks=2) * 10).rechunk(3)
    graph, names = dask_model.blocks_of_arrays([left, right])
    layer = {("both", b): (np.add, (names[0], b), (names[1], b)) for b in range(2)}
    joined = dask_model.on_blocks("both", layer, graph)
    x = dask_model.from_graph(joined, "both", ((3, 3),), np.empty(0))
    np.testing.assert_array_equal(x.compute(), np.arange(6) * 11)


def test_an_arrays_blocks_are_delayed_values_of_its_blocks() -> None:
    x = (da.from_array(np.arange(12).reshape(3, 4), chunks=(3, 2)) + 1).rechunk((2, 3))
    blocks = dask_model.delayed_blocks(x)
    assert blocks.shape == x.numblocks == (2, 2)
    computed = dask.compute(*blocks.ravel())
    for (i, j), block in zip(np.ndindex(*x.numblocks), computed, strict=True):
        expected = np.arange(1, 13).reshape(3, 4)[2 * i : 2 * i + 2, 3 * j : 3 * j + 3]
        np.testing.assert_array_equal(block, expected)


def test_dasks_chunk_cutter_takes_what_it_is_given() -> None:
    """``dask.array._shuffle._calculate_new_chunksizes(input_chunks, new_chunks,
    changeable_dimensions, maximum_chunk)``: private, called by position."""
    from dask.array._shuffle import _calculate_new_chunksizes

    assert list(inspect.signature(_calculate_new_chunksizes).parameters) == [
        "input_chunks",
        "new_chunks",
        "changeable_dimensions",
        "maximum_chunk",
    ]
    assert dask_model.cut_chunks(((20, 20), (50,)), {0}, 500) == [(10, 10, 10, 10), (50,)]
