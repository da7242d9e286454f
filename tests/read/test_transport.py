"""A ``sparse.COO`` sent between processes keeps its fill value (``read/transport.py``)."""

from __future__ import annotations

import dask
import numpy as np
import pytest
import sparse
from distributed.protocol.serialize import deserialize, serialize
from distributed.protocol.sparse import deserialize_sparse, serialize_sparse

from sporadik_dask.read.transport import keep_fill_values_in_transit

DENSE = np.array([[1.0, 0.0, 3.0], [0.0, 2.0, 0.0]])


def _where(fill: float) -> sparse.COO:
    """A block as ``X.where(X > 0)`` makes it: absent cells ``fill``."""
    coo = sparse.COO.from_numpy(DENSE)
    return sparse.COO(coo.coords, coo.data, shape=coo.shape, fill_value=fill)


def test_distributeds_own_serializer_still_drops_the_fill_value() -> None:
    """Pinned: once distributed keeps it, ``read/transport.py`` can go (docs/upstream.md)."""
    header, frames = serialize_sparse(_where(np.nan))
    assert deserialize_sparse(header, frames).fill_value == 0


@pytest.mark.parametrize("fill", [np.nan, 7.0, -0.0])
def test_a_block_of_another_fill_value_comes_back_with_it(fill: float) -> None:
    assert keep_fill_values_in_transit()
    sent = _where(fill)
    header, frames = serialize(sent, serializers=("dask", "pickle"))
    assert header["serializer"] == "pickle"
    got = deserialize(header, frames)
    np.testing.assert_array_equal(got.todense(), sent.todense())
    assert np.array_equal(got.fill_value, fill, equal_nan=True)
    assert np.signbit(got.fill_value) == np.signbit(fill)


@pytest.mark.parametrize("dtype", ["float64", "int8", "complex64", "bool"])
def test_a_block_of_fill_zero_goes_as_distributeds_own_byte_for_byte(dtype: str) -> None:
    assert keep_fill_values_in_transit()
    sent = sparse.COO.from_numpy(DENSE.astype(dtype))
    header, frames = serialize(sent, serializers=("dask", "pickle"))
    assert header["serializer"] == "dask"
    _, theirs = serialize_sparse(sent)
    assert [bytes(f) for f in frames] == [bytes(f) for f in theirs]
    got = deserialize(header, frames)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.todense(), DENSE.astype(dtype))


def test_a_block_of_a_fill_numpy_cannot_compare_with_zero_goes_by_pickle() -> None:
    assert keep_fill_values_in_transit()
    days = np.array([[1, 0], [0, 2]], dtype="datetime64[D]")
    coo = sparse.COO.from_numpy(days)
    sent = sparse.COO(coo.coords, coo.data, shape=coo.shape, fill_value=np.datetime64("NaT"))
    header, frames = serialize(sent, serializers=("dask", "pickle"))
    assert header["serializer"] == "pickle"
    assert np.isnat(deserialize(header, frames).fill_value)


def test_switched_off_a_block_goes_as_distributeds_own() -> None:
    assert keep_fill_values_in_transit()
    with dask.config.set({"sporadik.patches": False}):
        header, frames = serialize(_where(np.nan), serializers=("dask", "pickle"))
    assert header["serializer"] == "dask"
    assert deserialize(header, frames).fill_value == 0
