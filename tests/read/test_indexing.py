"""Every kind of indexer, on every layout of stores of rank 2 to 4 written by `to_sporadik` on
every store kind, reads what numpy's outer indexing of the dense array gives: values, dtype and
shape."""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pytest
import sparse
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import sporadik_dask as sd
from tests.helpers import SHARDED_SLOW, StoreKind, random_dense

#: Shapes and dtypes of the module's stores, one per rank.
CASES = {2: ((7, 6), "float32"), 3: ((5, 6, 4), "int64"), 4: ((4, 3, 5, 3), "uint8")}


class Written(NamedTuple):
    """A store of the module's: the dense array it holds, where it is, what reaches it."""

    dense: npt.NDArray[Any]
    where: Any
    options: dict[str, Any]


@pytest.fixture(scope="module")
def stores(module_store_kind: StoreKind) -> dict[int, Written]:
    """One store per rank on the module's store kind, every axis a layout, zarr chunks of 4
    values (runs cross them)."""
    kind, made = module_store_kind, {}
    for rank, (shape, dtype) in CASES.items():
        dense = random_dense(np.random.default_rng(rank), shape, 0.4, dtype=dtype)
        where = kind.beside(f"rank{rank}.zarr")
        sd.to_sporadik(dense, where, **kind.writing(chunk=4), **kind.options)
        made[rank] = Written(dense, where, kind.options)
    return made


def indexers(size: int) -> st.SearchStrategy[Any]:
    """Any indexer numpy's outer indexing takes along an axis of ``size``."""
    position = st.integers(-size, size - 1)
    bound = st.one_of(st.none(), st.integers(-size - 2, size + 2))
    return st.one_of(
        position,
        st.builds(slice, bound, bound, st.sampled_from([None, 1, 2, 3, -1, -2, -3])),
        st.lists(position, max_size=8),  # unsorted, repeated, negative, empty
        st.lists(position, max_size=8).map(lambda p: np.unique(np.asarray(p, dtype=np.int64))),
        st.lists(st.booleans(), min_size=size, max_size=size).map(np.array),
    )


def outer(dense: npt.NDArray[Any], key: tuple[Any, ...]) -> npt.NDArray[Any]:
    """numpy's answer: each axis indexed on its own (``np.ix_``), integer axes dropped."""
    per_axis = [np.arange(size)[part] for part, size in zip(key, dense.shape, strict=True)]
    result: npt.NDArray[Any] = dense[np.ix_(*[np.atleast_1d(p) for p in per_axis])]
    return result.reshape([n for n, p in zip(result.shape, per_axis, strict=True) if np.ndim(p)])


def check(result: Any, expected: npt.NDArray[Any]) -> None:
    if expected.ndim == 0:
        assert np.ndim(result) == 0 and result == expected
        assert np.asarray(result).dtype == expected.dtype
        return
    assert isinstance(result, sparse.COO)
    assert result.shape == expected.shape and result.dtype == expected.dtype
    linear = np.ravel_multi_index(tuple(result.coords), result.shape)
    assert np.all(np.diff(linear) > 0)  # C order, as sparse.COO(sorted=True) promises
    np.testing.assert_array_equal(result.todense(), expected)


@pytest.mark.parametrize("module_store_kind", SHARDED_SLOW, indirect=True)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_indexer_reads_numpys_outer_indexing_through_every_layout(
    stores: dict[int, Written], data: st.DataObject
) -> None:
    dense, where, options = stores[data.draw(st.sampled_from(sorted(stores)), label="rank")]
    reader = sd.StoreReader(where, **options)
    key = tuple(data.draw(indexers(size), label=f"axis {a}") for a, size in enumerate(dense.shape))
    expected = outer(dense, key)
    check(reader.read(key), expected)
    for axis in range(dense.ndim):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a forced layout never warns
            check(reader.read(key, axis=axis), expected)


@pytest.mark.parametrize("module_store_kind", SHARDED_SLOW, indirect=True)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_a_key_shorter_than_the_rank_or_with_an_ellipsis_selects_the_rest_whole(
    stores: dict[int, Written], data: st.DataObject
) -> None:
    dense, where, options = stores[data.draw(st.sampled_from(sorted(stores)), label="rank")]
    reader = sd.StoreReader(where, **options)
    given_axes = data.draw(st.integers(0, dense.ndim), label="axes given")
    head = tuple(data.draw(indexers(dense.shape[a])) for a in range(given_axes))
    full = head + (slice(None),) * (dense.ndim - given_axes)
    check(reader.read(head), outer(dense, full))
    check(reader.read((*head, ...)), outer(dense, full))


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_pointwise_indexing_reads_numpys_vectorized_indexing(
    stores: dict[int, Written], data: st.DataObject
) -> None:
    dense, where, options = stores[data.draw(st.sampled_from(sorted(stores)), label="rank")]
    reader = sd.StoreReader(where, **options)
    shape = tuple(data.draw(st.lists(st.integers(0, 3), max_size=2), label="points' shape"))
    key = tuple(
        data.draw(arrays(np.int64, shape, elements=st.integers(-size, size - 1)), label=f"{a}")
        for a, size in enumerate(dense.shape)
    )
    expected = dense[key]
    result = reader.vindex[key]
    if expected.ndim == 0:
        assert result == expected
        return
    assert isinstance(result, sparse.COO)
    assert result.shape == expected.shape and result.dtype == expected.dtype
    np.testing.assert_array_equal(result.todense(), expected)
