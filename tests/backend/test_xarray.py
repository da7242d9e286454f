"""The xarray layer: a cheap entry point, the accessor wherever a variable travels, and
coordinates as plain numpy strings."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sparse
import xarray as xr
from distributed import Client

import sporadik_dask as sd
from sporadik_dask.read.dask_model import EXPRESSIONS, graph_names
from tests.helpers import labelled, random_dense

#: Loads both entry points as xarray does (after importing xarray), and says which heavy modules
#: came with them (what loading costs is measured in docs/reading.md, not asserted here).
LOAD_ENTRY_POINTS = """
import sys
import xarray
from importlib.metadata import entry_points

for group in ("xarray.backends", "xarray.chunkmanagers"):
    entry_points(group=group)["sporadik"].load()
print(",".join(m for m in ("numba", "dask.array", "sparse", "zarr") if m in sys.modules))
"""


@pytest.mark.slow
def test_loading_the_entry_points_imports_none_of_numba_dask_array_sparse_or_zarr() -> None:
    done = subprocess.run(
        [sys.executable, "-c", LOAD_ENTRY_POINTS], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == ""


@pytest.mark.slow
def test_the_entry_point_opens_a_store_from_a_fresh_process(tmp_path: Path) -> None:
    sd.to_sporadik(labelled(sparse.COO.from_numpy(np.eye(6, 4))), tmp_path / "s.zarr")
    script = (
        "import sys, xarray as xr\n"
        f"ds = xr.open_dataset({str(tmp_path / 's.zarr')!r}, engine='sporadik', chunks={{}})\n"
        "counts = ds['counts']\n"
        "print(type(counts.data._meta).__name__, int(counts.sporadik.nnz('gene').sum()))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["COO", "4"]


@pytest.mark.slow
@pytest.mark.parametrize("chunks", [None, {}])
def test_the_accessor_works_on_a_dask_worker(
    tmp_path: Path, client: Client, chunks: dict[str, int] | None
) -> None:
    dense = random_dense(np.random.default_rng(5), (6, 4), 0.5)
    sd.to_sporadik(labelled(sparse.COO.from_numpy(dense)), tmp_path / "s.zarr")
    opened = xr.open_dataset(tmp_path / "s.zarr", engine="sporadik", chunks=chunks)
    nnz = client.submit(lambda ds: ds["counts"].sporadik.nnz("gene").values, opened, pure=False)
    np.testing.assert_array_equal(nnz.result(), np.count_nonzero(dense, axis=0))


def test_string_coordinates_come_back_as_numpy_str_that_np_save_takes(tmp_path: Path) -> None:
    genes = np.array(["CD3E", "MS4A1", "", "ÉPÉE-1"])
    written = xr.DataArray(
        sparse.COO.from_numpy(np.eye(3, 4)), dims=("cell", "gene"), coords={"gene": genes}
    )
    sd.to_sporadik(written, tmp_path / "s.zarr")
    coords = xr.open_dataset(tmp_path / "s.zarr", engine="sporadik").coords["gene"].values
    assert coords.dtype.kind == "U", coords.dtype
    np.testing.assert_array_equal(coords.astype(str), genes)
    saved = io.BytesIO()
    np.save(saved, coords)
    saved.seek(0)
    np.testing.assert_array_equal(np.load(saved), genes)  # no pickle needed to load them


@pytest.mark.parametrize("store", ["s.zarr", "data.zarr"])
def test_an_unnamed_array_is_not_named_as_one_of_its_dims(tmp_path: Path, store: str) -> None:
    """The store's name names an unnamed array, unless a dim is called so: xarray would take
    the data for that dim's coordinate, and the Dataset would hold no variable."""
    dense = random_dense(np.random.default_rng(3), (6, 4), 0.5)
    dims = ("s", "data")
    sd.to_sporadik(xr.DataArray(sparse.COO.from_numpy(dense), dims=dims), tmp_path / store)
    ds = xr.open_dataset(tmp_path / store, engine="sporadik")
    (name,) = ds.data_vars
    assert name not in dims
    assert ds[name].dims == dims
    np.testing.assert_array_equal(ds[name].data.todense(), dense)


def test_numeric_coordinates_keep_their_dtype(tmp_path: Path) -> None:
    sd.to_sporadik(labelled(sparse.COO.from_numpy(np.eye(6, 4))), tmp_path / "s.zarr")
    cells = xr.open_dataset(tmp_path / "s.zarr", engine="sporadik").coords["cell"].values
    assert cells.dtype == np.arange(1).dtype
    np.testing.assert_array_equal(cells, np.arange(10, 16))


@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "chunks={}"])
def test_a_mask_made_of_a_stored_coordinate_selects_with_isel(
    tmp_path: Path, chunks: dict[str, int] | None
) -> None:
    """Stored coordinates along a dim are indexed, so in memory under ``chunks=`` too: a mask
    made of one is numpy, where xarray refuses to ``isel`` with a boolean dask array."""
    dense = random_dense(np.random.default_rng(7), (20, 6), 0.5)
    symbols = np.array(["MT-CO1", "ACTB", "MT-ND1", "CD3E", "GAPDH", "MT-ATP6"])
    written = xr.DataArray(
        sparse.COO.from_numpy(dense),
        dims=("obs", "var"),
        coords={"gene_symbols": ("var", symbols), "batch": ("obs", np.arange(20) % 3)},
    )
    sd.to_sporadik(written, tmp_path / "s.zarr")
    X = xr.open_dataset(tmp_path / "s.zarr", engine="sporadik", chunks=chunks)["s"]
    mito = X.gene_symbols.str.startswith("MT-")
    assert isinstance(mito.data, np.ndarray) and isinstance(X.batch.data, np.ndarray)
    got = X.isel(var=mito).sum("var").compute()
    np.testing.assert_allclose(got.values, dense[:, [0, 2, 5]].sum(axis=1), rtol=1e-5)
    assert X.sel(batch=1).shape == (7, 6)


def test_a_chunked_store_computes_beside_plain_dask_arrays_and_its_own_coordinates(
    tmp_path: Path,
) -> None:
    """With ``chunks=``, a user's own variables and coordinates are plain dask arrays (a stored
    coordinate is indexed, so in memory): every result of ours computes beside them, where
    xarray refuses a Dataset holding two types of dask array."""
    import dask.array as da

    dense = random_dense(np.random.default_rng(5), (40, 12), 0.3)
    batch = np.arange(40) % 3
    written = xr.DataArray(
        sparse.COO.from_numpy(dense),
        dims=("cell", "gene"),
        coords={"gene": [f"g{i}" for i in range(12)], "batch": ("cell", batch)},
        name="counts",
    )
    sd.to_sporadik(written, tmp_path / "s.zarr")
    ds = xr.open_dataset(tmp_path / "s.zarr", engine="sporadik", chunks={})
    counts = ds["counts"]
    assert type(ds["batch"].data) is np.ndarray  # indexed, so not chunked by xarray
    weights = xr.DataArray(da.arange(40, chunks=10, dtype=np.float64), dims="cell")
    ds = ds.assign_coords(kind=("cell", da.from_array(batch, chunks=10)))
    counts = ds["counts"]
    total = dense.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        norm = dense / total[:, None]
    for got, expected in (
        (counts.sum("gene").compute().values, total),
        (counts.isel(gene=[7, 3, 3, 11, 0]).compute().data.todense(), dense[:, [7, 3, 3, 11, 0]]),
        (counts.sel(gene=["g2", "g1"]).compute().data.todense(), dense[:, [2, 1]]),
        (ds.assign(total=counts.sum("gene")).compute()["total"].values, total),
        (ds.assign(norm=counts / counts.sum("gene")).compute()["norm"].data.todense(), norm),
        (xr.merge([counts, weights.rename("w")]).compute()["w"].values, np.arange(40)),
        (counts.assign_coords(w=weights).sum("gene").compute().values, total),
        (counts.max().compute().values, dense.max()),
    ):
        np.testing.assert_allclose(got, expected, rtol=1e-5)
    np.testing.assert_array_equal(counts.sum("gene").compute()["kind"].values, batch)


@pytest.mark.skipif(
    EXPRESSIONS, reason="xarray factorizes a dask coordinate by what dask's expression model lacks"
)
def test_a_chunked_stored_coordinate_groups_in_one_pass_given_its_labels(tmp_path: Path) -> None:
    """xarray asks for the labels of a chunked coordinate to group by; given them, the grouping
    is the single pass, dims in xarray's order for it (groups last), an absent label missing."""
    import dask
    from xarray.groupers import UniqueGrouper

    dense = random_dense(np.random.default_rng(6), (60, 9), 0.3)
    batch = np.arange(60) % 4
    written = xr.DataArray(
        sparse.COO.from_numpy(dense), dims=("cell", "gene"), coords={"batch": ("cell", batch)}
    )
    sd.to_sporadik(written, tmp_path / "s.zarr")
    counts = xr.open_dataset(tmp_path / "s.zarr", engine="sporadik", chunks={})["s"]
    counts = counts.drop_indexes("batch")  # stored ones are indexed: a user's chunked one
    counts = counts.assign_coords(batch=counts.batch.chunk(15))
    grouped = counts.groupby(batch=UniqueGrouper(labels=[3, 0, 9]))
    with dask.config.set({"sporadik.pushdown": False}):
        xarrays = grouped.sum()
    assert _holds_xarray_groupby(xarrays.data)
    for op in ("sum", "max", "mean"):
        got = getattr(grouped, op)()
        assert got.dims == xarrays.dims == ("gene", "batch")
        assert "transpose" in got.data.name and not _holds_xarray_groupby(got.data)
        expected = np.stack(
            [getattr(dense[batch == k], op)(axis=0) for k in (3, 0)] + [np.full(9, np.nan)]
        ).T
        np.testing.assert_allclose(got.compute().values, expected, rtol=1e-5)
    loaded = counts.assign_coords(batch=counts.batch.load()).groupby("batch").sum().compute()
    np.testing.assert_allclose(loaded.values, [dense[batch == k].sum(0) for k in range(4)], 1e-5)


def _holds_xarray_groupby(x: object) -> bool:
    """Whether a dask array's graph holds xarray's (or flox's) grouped reduction."""
    return any("groupby" in name or "flox" in name for name in graph_names(x))  # type: ignore[arg-type]
