"""Coordinates on disk: every coordinate a DataArray carries comes back through the backend,
read without a chunk of the matrix, and what cannot come back as it was is refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import sparse
import xarray as xr
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.storage import LocalStore

import sporadik_dask as sd
from tests.helpers import RecordingStore, labelled, open_dataset, random_dense

DIMS = ("cell", "gene")
SHAPE = {"cell": 5, "gene": 3}
TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=6)


def _values(draw: st.DrawFn, kind: str, size: int | None) -> Any:
    """``size`` values of ``kind`` (a scalar's one value when ``size`` is None)."""
    n = 1 if size is None else size
    if kind == "categorical":
        categories = draw(st.lists(TEXT, max_size=4, unique=True))
        codes = draw(st.lists(st.integers(-1, len(categories) - 1), min_size=n, max_size=n))
        return pd.Categorical.from_codes(codes, categories, ordered=draw(st.booleans()))
    element = {
        "int": st.integers(-(2**40), 2**40),
        "float": st.floats(
            allow_nan=True, allow_infinity=True, width=draw(st.sampled_from([32, 64]))
        ),
        "bool": st.booleans(),
        "str": TEXT,
        "datetime": st.integers(-(2**62), 2**62) | st.just(np.iinfo(np.int64).min),  # NaT
    }[kind]
    drawn = draw(st.lists(element, min_size=n, max_size=n))
    dtype = {"int": np.int64, "bool": bool, "str": str, "datetime": np.int64}.get(kind)
    values = np.array(drawn, dtype=dtype)
    if kind == "datetime":
        values = values.view("datetime64[ns]")
    return values if size is not None else values[0]


@st.composite
def coordinates(draw: st.DrawFn) -> dict[str, tuple[tuple[str, ...], Any]]:
    """One to three coordinates, each scalar or along a dim, of any kind a store keeps."""
    coords: dict[str, tuple[tuple[str, ...], Any]] = {}
    for i in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["int", "float", "bool", "str", "categorical", "datetime"]))
        dims = (
            () if kind != "categorical" and draw(st.booleans()) else (draw(st.sampled_from(DIMS)),)
        )
        coords[f"c{i}"] = (dims, _values(draw, kind, SHAPE[dims[0]] if dims else None))
    if draw(st.booleans()):
        coords["gene"] = (("gene",), np.array(["g0", "g1", "g2"]))
    return coords


def _check_same(opened: xr.DataArray, expected: Any) -> None:
    if isinstance(expected, pd.Categorical):
        assert isinstance(opened.dtype, pd.CategoricalDtype)
        assert opened.dtype == expected.dtype  # the same categories, in order, and ordered
        got = pd.Categorical(opened.values, dtype=opened.dtype)
        np.testing.assert_array_equal(got.codes, expected.codes)
        return
    expected = np.asarray(expected)
    assert opened.dtype.kind == expected.dtype.kind
    if expected.dtype.kind != "U":
        assert opened.dtype == expected.dtype
    np.testing.assert_array_equal(opened.values, expected)


@pytest.mark.slow
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(coords=coordinates())
def test_every_kind_of_coordinate_comes_back_without_reading_a_chunk_of_the_matrix(
    tmp_path_factory: pytest.TempPathFactory, coords: dict[str, tuple[tuple[str, ...], Any]]
) -> None:
    dense = random_dense(np.random.default_rng(0), (SHAPE["cell"], SHAPE["gene"]), 0.5)
    array = xr.DataArray(sparse.COO.from_numpy(dense), dims=DIMS, name="X", coords=coords)
    path = tmp_path_factory.mktemp("c") / "s.zarr"
    sd.to_sporadik(array, path)
    store = RecordingStore(LocalStore(path, read_only=True))
    opened = open_dataset(store)
    assert set(opened.coords) == set(coords)
    for name, (dims, values) in coords.items():
        assert opened[name].dims == dims
        _check_same(opened[name], values)
    chunks = [key for key in store.reads if key.startswith("layouts/") and "/c/" in key]
    assert not chunks and any(key.startswith("coords/") for key in store.reads)
    np.testing.assert_array_equal(opened["X"].data.todense(), dense)


def test_coordinate_attrs_and_anndata_categoricals_come_back(tmp_path: Path) -> None:
    kinds = pd.Categorical(["b", "a", None, "b", "a", "b"], categories=["a", "b", "unused"])
    array = labelled(sparse.COO.from_numpy(np.eye(6, 4))).assign_coords(
        kind=("cell", kinds), depth=("gene", [1.5, np.nan, 3.0, 4.0], {"units": "m"})
    )
    sd.to_sporadik(array, tmp_path / "s.zarr")
    opened = xr.open_dataarray(tmp_path / "s.zarr", engine="sporadik")
    assert opened["depth"].attrs == {"units": "m"}
    kind = opened["kind"].dtype
    assert isinstance(kind, pd.CategoricalDtype) and list(kind.categories) == ["a", "b", "unused"]
    # anndata's own reader reads the categorical group as the Categorical it was
    import anndata

    read = anndata.io.read_elem(zarr.open_group(tmp_path / "s.zarr/coords/kind", mode="r"))
    pd.testing.assert_extension_array_equal(read, kinds)


@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "chunks={}"])
def test_a_categorical_coordinate_groups_and_selects_lazily_or_chunked(
    tmp_path: Path, chunks: Any
) -> None:
    dense = random_dense(np.random.default_rng(2), (6, 4), 0.6)
    kinds = pd.Categorical(["t", "b", "t", "nk", "b", "t"], categories=["t", "b", "nk", "dc"])
    array = labelled(sparse.COO.from_numpy(dense)).assign_coords(kind=("cell", kinds))
    sd.to_sporadik(array, tmp_path / "s.zarr")
    opened = xr.open_dataset(tmp_path / "s.zarr", engine="sporadik", chunks=chunks)["counts"]
    kind = opened["kind"].dtype
    assert isinstance(kind, pd.CategoricalDtype) and list(kind.categories) == ["t", "b", "nk", "dc"]
    sums = opened.groupby("kind").sum()
    for group in ("t", "b", "nk"):
        expected = dense[np.asarray(kinds) == group].sum(axis=0)
        np.testing.assert_allclose(sums.sel(kind=group).values, expected)
    picked = opened.sel(kind="b")
    np.testing.assert_array_equal(np.asarray(picked["cell"]), [11, 14])


def test_a_store_written_before_non_dimension_coordinates_still_opens(tmp_path: Path) -> None:
    dense = random_dense(np.random.default_rng(1), (6, 4), 0.5)
    sd.to_sporadik(labelled(sparse.COO.from_numpy(dense)), tmp_path / "s.zarr")
    root = zarr.open_group(tmp_path / "s.zarr", mode="r+")
    # as the writer used to spell them: no dimension_names, strings and ints only
    coords = root["coords"]
    assert isinstance(coords, zarr.Group)
    coords.create_array("gene", shape=(4,), dtype=str, overwrite=True)[:] = np.array(list("wxyz"))
    coords.create_array("cell", data=np.arange(20, 26), overwrite=True)
    assert root["coords/cell"].metadata.dimension_names is None  # type: ignore[union-attr]
    labels = dict(root.attrs["xarray"])  # type: ignore[arg-type]
    del labels["ranges"]  # an arange was stored as an array, like any coordinate
    root.attrs["xarray"] = {**labels, "coords": ["cell", "gene"]}
    opened = xr.open_dataarray(tmp_path / "s.zarr", engine="sporadik")
    assert list(opened["gene"].values) == list("wxyz") and opened["cell"].dims == ("cell",)
    np.testing.assert_array_equal(opened.sel(cell=[25, 20]).data.todense(), dense[[5, 0]])


REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "a 2-D coordinate": ({"grid": (DIMS, np.zeros((6, 4)))}, "'grid' lies along"),
    "objects that are not strings": (
        {"things": ("cell", np.array([1, "a", 2.0, None, object(), 3], dtype=object))},
        "'things' holds",
    ),
    "strings with a missing value": (
        {"names": ("cell", np.array(["a", None, "c", "d", "e", "f"], dtype=object))},
        "'names' holds missing values",
    ),
    "nullable integers with a missing value": (
        {"n": ("cell", pd.array([1, None, 3, 4, 5, 6], dtype="Int64"))},
        "'n' holds missing values",
    ),
    "bytes": ({"raw": ("gene", np.array([b"a", b"b", b"c", b"d"]))}, "'raw' holds"),
    "the array's own name": ({"counts": ("gene", np.arange(4))}, "'counts' has the array's"),
    "a name with a slash": ({"a/b": ("gene", np.arange(4))}, "'a/b' cannot name a zarr node"),
    "attrs JSON cannot hold": (
        {"depth": ("gene", np.arange(4), {"when": object()})},
        "'depth''s attrs cannot be stored",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_coordinate_that_cannot_come_back_as_it_was_is_refused_by_name(
    tmp_path: Path, case: str
) -> None:
    coords, message = REFUSED[case]
    array = labelled(sparse.COO.from_numpy(np.eye(6, 4))).assign_coords(coords)
    with pytest.raises(sd.LayoutError, match=message):
        sd.to_sporadik(array, tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()


def _ranges() -> dict[str, Any]:
    from xarray.indexes import RangeIndex

    return {
        "xarray's RangeIndex of floats": xr.Coordinates.from_xindex(
            RangeIndex.arange(0.5, 5.5, 0.5, dim="pos")
        ),
        "xarray's RangeIndex of int64": xr.Coordinates.from_xindex(
            RangeIndex.arange(0, 20, 2, dim="pos", dtype=np.dtype("int64"))
        ),
        "a pandas RangeIndex": {"pos": pd.RangeIndex(100, 0, -10)},
        "an int64 arange": {"pos": np.arange(1_000, 1_010)},
    }


def _computed(array: xr.DataArray) -> Any:
    data = array.data
    return (data.compute() if hasattr(data, "dask") else data).todense()


@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "chunks={}"])
@pytest.mark.parametrize("case", list(_ranges()))
def test_a_range_coordinate_is_stored_as_its_formula_and_selects_as_xarray_does(
    tmp_path: Path, case: str, chunks: Any
) -> None:
    from xarray.indexes import RangeIndex

    dense = random_dense(np.random.default_rng(3), (4, 10), 0.5)
    array = xr.DataArray(dense, dims=("sample", "pos"), name="calls").assign_coords(_ranges()[case])
    array["pos"].attrs["units"] = "bp"
    sd.to_sporadik(array.copy(data=sparse.COO.from_numpy(dense)), tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr" / "coords").exists()  # no node: the formula is in zarr.json
    opened = xr.open_dataarray(tmp_path / "s.zarr", engine="sporadik", chunks=chunks)
    index = opened.xindexes["pos"]
    if case.startswith("xarray"):
        assert isinstance(index, RangeIndex)
    else:  # a pandas RangeIndex, an arange's too: no array of the values, exact labels
        assert isinstance(index.to_pandas_index(), pd.RangeIndex)
    xr.testing.assert_identical(opened["pos"], array["pos"])
    method = "nearest" if isinstance(index, RangeIndex) else None  # xarray's RangeIndex asks it
    low, high = array["pos"].values[[2, 6]]
    for key in (slice(low, high), [high, low], high):
        want = array.sel(pos=key, method=method)
        got = opened.sel(pos=key, method=method)
        np.testing.assert_array_equal(_computed(got), want.values)
        xr.testing.assert_identical(got["pos"], want["pos"])


def test_the_reference_reads_a_store_whose_coordinate_is_a_range(tmp_path: Path) -> None:
    import sporadik

    dense = random_dense(np.random.default_rng(4), (3, 10), 0.5)
    array = xr.DataArray(
        sparse.COO.from_numpy(dense), dims=("sample", "pos"), coords={"pos": pd.RangeIndex(1, 11)}
    )
    sd.to_sporadik(array, tmp_path / "s.zarr")
    with sporadik.open_store(tmp_path / "s.zarr", axis=0) as reader:
        for sample in range(3):
            (positions,), values = reader.coords_at(sample)
            np.testing.assert_array_equal(values, dense[sample, positions])
            assert np.count_nonzero(dense[sample]) == positions.size


@pytest.mark.parametrize(
    "change",
    [{"step": 0}, {"index": "polars"}, {"dims": ["chromosome"]}, {"dtype": "nope"}, {"size": 9}],
)
def test_a_range_that_is_not_a_formula_is_refused_by_name(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    array = xr.DataArray(
        sparse.COO.from_numpy(np.eye(3, 10)), dims=("sample", "pos"), coords={"pos": range(10)}
    )
    sd.to_sporadik(array, tmp_path / "s.zarr")
    root = zarr.open_group(tmp_path / "s.zarr", mode="r+")
    labels: Any = root.attrs["xarray"]
    labels["ranges"]["pos"].update(change)
    root.attrs["xarray"] = labels
    with pytest.raises(sd.SporadikError, match="the range stored for coordinate 'pos'"):
        xr.open_dataarray(tmp_path / "s.zarr", engine="sporadik")
    with pytest.raises(sd.SporadikError, match="the range stored for coordinate 'pos'"):
        sd.validate(tmp_path / "s.zarr")
