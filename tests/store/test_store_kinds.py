"""The same writes and reads on every kind of store a user passes: a local directory, a zarr
``MemoryStore``, a bucket on the S3 server, and a sharded local store (the ``store_kind``
fixture). Each answer is compared with numpy on the dense original."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import sparse
import xarray as xr

import sporadik_dask as sd
from tests.helpers import StoreKind, random_dense


def _dense() -> np.ndarray:
    return random_dense(np.random.default_rng(11), (70, 50), 0.15).astype(np.float32)


def test_a_dask_array_written_reads_back_through_every_reader(store_kind: StoreKind) -> None:
    dense = _dense()
    x = da.from_array(sparse.COO.from_numpy(dense), chunks=(25, 20), asarray=False)
    where, options = store_kind.store, store_kind.options
    description = sd.to_sporadik(x, where, **store_kind.write_options, **options)
    assert description.indexed_axes == (0, 1)
    assert sd.describe(where, **options).nnz == np.count_nonzero(dense)
    sd.validate(where, **options)
    ds = xr.open_dataset(where, engine="sporadik", **options)
    variable = next(iter(ds.data_vars.values()))
    picked = variable.isel({variable.dims[1]: [7, 2, 7, 40]})
    np.testing.assert_array_equal(picked.data.todense(), dense[:, [7, 2, 7, 40]])
    rows = variable.isel({variable.dims[0]: slice(60, 5, -3)})
    np.testing.assert_array_equal(rows.data.todense(), dense[60:5:-3])
    chunked = xr.open_dataset(where, engine="sporadik", chunks={}, **options)
    summed = next(iter(chunked.data_vars.values())).sum(str(variable.dims[0])).values
    np.testing.assert_allclose(summed, dense.sum(axis=0), rtol=1e-6)
    y = sd.from_sporadik(where, axis=1, **options)
    np.testing.assert_array_equal(y[:, 10:30].compute().todense(), dense[:, 10:30])


def test_an_overwrite_then_a_layout_added_on_every_kind(store_kind: StoreKind) -> None:
    dense = _dense()
    where, options = store_kind.store, store_kind.options
    sd.to_sporadik(np.eye(5), where, **store_kind.write_options, **options)
    with pytest.raises(sd.StoreExistsError, match="overwrite=True"):
        sd.to_sporadik(dense, where, **options)
    sd.to_sporadik(dense, where, axes=(0,), overwrite=True, **store_kind.write_options, **options)
    assert sd.describe(where, **options).indexed_axes == (0,)
    sd.add_axis(where, 1, **store_kind.write_options, **options)
    assert sd.describe(where, **options).indexed_axes == (0, 1)
    sd.validate(where, **options)
    y = sd.from_sporadik(where, axis=1, **options)
    np.testing.assert_array_equal(y.compute().todense(), dense)
