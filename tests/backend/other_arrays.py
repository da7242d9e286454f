"""xarray and dask operations on arrays that are not sporadik variables, and what each gave.

Run as ``python -m tests.backend.other_arrays {plain,after-sporadik} STORE OUT``: ``plain`` never
imports ``sporadik_dask`` (it is found nowhere, as if not installed: xarray skips its entry
points); ``after-sporadik`` first writes a store at ``STORE`` with ``to_sporadik``, opens it
lazily and with ``chunks={}``, reduces, groups, multiplies, selects and joins it, and writes it
again, on dask's threads. Both then run the same operations on numpy, dask-of-numpy,
``sparse.COO``, dask-of-sparse and ``scipy.sparse`` arrays and pickle to ``OUT``, per operation,
the types of the result (its data, a dask array's meta and computed blocks) and its values, or
the error raised. ``tests/backend/test_other_arrays.py`` compares the two.
"""

from __future__ import annotations

import importlib.abc
import pickle
import sys
import warnings
from collections.abc import Callable
from typing import Any

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
import sparse
import xarray as xr

dask.config.set(scheduler="sync")

SHAPE = (6, 4)
GROUPS = np.array(["b", "a", "b", "c", "a", "b"])


def _dense() -> np.ndarray[Any, Any]:
    values = np.arange(1.0, 25.0).reshape(SHAPE)
    values[np.arange(24).reshape(SHAPE) % 3 != 0] = 0.0
    values[5, 3] = np.nan
    return values


def _arrays() -> dict[str, Callable[[], Any]]:
    dense = _dense()
    coo = sparse.COO.from_numpy(dense)
    return {
        "numpy": lambda: dense.copy(),
        "dask-of-numpy": lambda: da.from_array(dense, chunks=(3, 2)),
        "sparse": lambda: sparse.COO.from_numpy(dense),
        "dask-of-sparse": lambda: da.from_array(coo, chunks=(3, 2), asarray=False),
        "scipy": lambda: sp.csr_matrix(np.nan_to_num(dense)),
    }


def _labelled(data: Any) -> xr.DataArray:
    return xr.DataArray(
        data,
        dims=("x", "y"),
        coords={"x": np.arange(SHAPE[0]) * 10, "g": ("x", GROUPS)},
        name="v",
        attrs={"units": "u"},
    )


def _weights() -> xr.DataArray:
    return xr.DataArray(np.arange(1.0, 9.0).reshape(4, 2), dims=("y", "k"))


def _operations() -> dict[str, Callable[[xr.DataArray], Any]]:
    mask = np.array([True, False, True, True, False, True])
    points = {"x": xr.DataArray([0, 5, 2], dims="p"), "y": xr.DataArray([1, 3, 0], dims="p")}
    return {
        "sum": lambda a: a.sum(),
        "sum x": lambda a: a.sum("x"),
        "sum x skipna=False": lambda a: a.sum("x", skipna=False),
        "sum y min_count=2": lambda a: a.sum("y", min_count=2),
        "sum keepdims": lambda a: a.sum("y", keepdims=True),
        "sum keep_attrs=False": lambda a: a.sum("x", keep_attrs=False),
        "mean y": lambda a: a.mean("y"),
        "max": lambda a: a.max(),
        "min y": lambda a: a.min("y"),
        "count x": lambda a: a.count("x"),
        "var x ddof=1": lambda a: a.var("x", ddof=1),
        "std": lambda a: a.std(),
        "prod y": lambda a: a.prod("y"),
        "sum axis=1": lambda a: a.reduce(np.sum, axis=1),
        "median x": lambda a: a.median("x"),
        "any of a comparison": lambda a: (a > 3).any("x"),
        "all of isnull": lambda a: a.isnull().all("y"),
        "quantile y": lambda a: a.quantile([0.2, 0.5], "y"),
        "quantile nearest": lambda a: a.quantile(0.5, method="nearest"),
        "cumsum x": lambda a: a.cumsum("x"),
        "argmax y": lambda a: a.argmax("y"),
        "chunk median": lambda a: a.chunk({"x": 3}).median("x"),
        "chunk quantile": lambda a: a.chunk({"y": 2}).quantile(0.3, "x"),
        "sum over a missing dim": lambda a: a.sum("z"),
        "groupby sum": lambda a: a.groupby("g").sum(),
        "groupby mean": lambda a: a.groupby("g").mean(),
        "groupby count": lambda a: a.groupby("g").count(),
        "groupby sum no flox": lambda a: _without_flox(lambda: a.groupby("g").sum()),
        "groupby mean no flox": lambda a: _without_flox(lambda: a.groupby("g").mean()),
        "dataset groupby sum": lambda a: a.to_dataset().groupby("g").sum(),
        "resample sum": lambda a: _timed(a).resample(x="2D").sum(),
        "xr.dot": lambda a: xr.dot(a, _weights()),
        "xr.dot reversed": lambda a: xr.dot(_weights(), a),
        "xr.dot over x": lambda a: xr.dot(a, xr.DataArray(np.arange(6.0), dims="x")),
        "matmul": lambda a: a @ _weights(),
        "xr.dot with itself": lambda a: xr.dot(a, a, dim="y"),
        "chunk sum": lambda a: a.chunk({"x": 3}).sum("x"),
        "chunk() sum": lambda a: a.chunk().sum(),
        "chunk auto sum": lambda a: a.chunk("auto").sum("y"),
        "chunk mean": lambda a: a.chunk({"x": 2}).mean("y"),
        "chunk groupby sum": lambda a: a.chunk({"x": 2}).groupby("g").sum(),
        "chunk xr.dot": lambda a: xr.dot(a.chunk({"x": 3}), _weights()),
        "chunk isel list": lambda a: a.chunk({"x": 2}).isel(x=[4, 0, 1]),
        "chunk isel step": lambda a: a.chunk({"x": 2}).isel(x=slice(None, None, -2)),
        "chunk isel points": lambda a: a.chunk({"x": 2}).isel(points),
        "chunk load": lambda a: a.chunk({"y": 1}).load(),
        "concat x": lambda a: xr.concat([a, a], "x"),
        "concat y": lambda a: xr.concat([a, a.assign_coords(y=np.arange(4) + 4)], "y"),
        "concat new dim": lambda a: xr.concat([a, a], "z"),
        "reindex": lambda a: a.reindex(x=[0, 10, 15]),
        "expand_dims": lambda a: a.expand_dims(z=3),
        "broadcast": lambda a: xr.broadcast(a, xr.DataArray(np.ones(2), dims="z"))[0],
        "isel list": lambda a: a.isel(x=[4, 0, 0, 2]),
        "isel mask": lambda a: a.isel(x=mask),
        "isel lists": lambda a: a.isel(x=[1, 0], y=[3, 1]),
        "isel slice": lambda a: a.isel(x=slice(1, 5), y=slice(None, None, 2)),
        "isel back": lambda a: a.isel(x=slice(None, -2, -2)),
        "isel int": lambda a: a.isel(x=2),
        "isel points": lambda a: a.isel(points),
        "sel": lambda a: a.sel(x=[50, 10]),
        "transpose": lambda a: a.T,
        "where": lambda a: a.where(a > 5),
        "where other": lambda a: a.where(a > 5, 0.0),
        "xr.where": lambda a: xr.where(a > 5, a, -1.0),
        "add": lambda a: a + 1,
        "multiply": lambda a: a * a,
        "negate": lambda a: -a,
        "compare": lambda a: a >= 4,
        "dask concatenate blocks": lambda a: _blocks_joined(a),
    }


def _without_flox(run: Callable[[], Any]) -> Any:
    with xr.set_options(use_flox=False):
        return run()


def _timed(a: xr.DataArray) -> xr.DataArray:
    return a.assign_coords(x=np.arange(SHAPE[0]).astype("datetime64[D]"))


def _blocks_joined(a: xr.DataArray) -> Any:
    """dask's join of blocks along a later axis (``concatenate_lookup``)."""
    data = a.data
    if not isinstance(data, da.Array):
        data = da.from_array(data, chunks=(3, 2), asarray=False)
    return data.rechunk((3, 2)).compute()


def _type(x: Any) -> str:
    return f"{type(x).__module__}.{type(x).__qualname__}"


def _values(x: Any) -> Any:
    if isinstance(x, sparse.SparseArray):
        return ("sparse", x.fill_value, np.asarray(x.todense()))
    if sp.issparse(x):
        return ("scipy", np.asarray(x.toarray()))
    return np.asarray(x)


def record(result: Any) -> dict[str, Any]:
    """The types and values of one result: of its data, a dask array's meta and blocks."""
    if isinstance(result, (xr.DataArray, xr.Variable)):
        out: dict[str, Any] = {
            "dims": result.dims,
            "attrs": dict(result.attrs),
            "name": getattr(result, "name", None),
        }
        data = result.data
    else:
        out, data = {}, result
    out["type"] = _type(data)
    if isinstance(data, da.Array):
        out["meta"] = _type(data._meta)
        out["chunks"] = data.chunks
        blocks = dask.compute(*data.to_delayed().ravel())
        out["blocks"] = sorted({_type(block) for block in blocks})
        data = data.compute()
        out["computed"] = _type(data)
    if isinstance(result, xr.DataArray):
        out["coords"] = {k: np.asarray(v.values) for k, v in result.coords.items()}
        if result.chunks is None:
            out["loaded"] = _type(result.load().data)
    out["values"] = _values(data)
    return out


def run_all() -> dict[tuple[str, str], Any]:
    """Every operation on every kind of array: a record, or the error it raised."""
    results: dict[tuple[str, str], Any] = {}
    for kind, make in _arrays().items():
        for name, operation in _operations().items():
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    results[kind, name] = record(operation(_labelled(make())))
            except Exception as error:  # what was raised is compared as well
                results[kind, name] = ("raised", _type(error), str(error))
    return results


#: What a user does with a store's variable, lazily opened and chunked.
_USES: dict[str, Callable[[xr.DataArray], Any]] = {
    "sum": lambda ours: ours.sum("x"),
    "mean": lambda ours: ours.mean(),
    "median": lambda ours: ours.median("x"),
    "all": lambda ours: (ours > 0).all("y"),
    "quantile": lambda ours: ours.quantile([0.1, 0.9], "y"),
    "groupby": lambda ours: ours.groupby("g").sum(),
    "dataset groupby": lambda ours: ours.to_dataset().groupby("g").mean(),
    "xr.dot": lambda ours: xr.dot(ours, _weights()),
    "isel list": lambda ours: ours.isel(x=[3, 1]),
    "isel back": lambda ours: ours.isel(y=slice(None, None, -1)),
    "concat": lambda ours: xr.concat([ours, ours], "y"),
    "expand_dims": lambda ours: ours.expand_dims(z=2),
    "load": lambda ours: ours.compute(),
}

#: What dask's expression model (``array.query-planning``) lacks for every dask array under
#: xarray (``result_type``, ``broadcast_to``): left out of a store's use there.
_EXPRESSIONS_LACK = frozenset({"concat", "expand_dims"})


def use_sporadik(store: str) -> None:
    """Write a store, open it lazily and chunked, use it as a user would, and write it again
    on dask's threads."""
    import sporadik_dask as sd

    data = _labelled(sparse.COO.from_numpy(np.nan_to_num(_dense())))
    sd.to_sporadik(data.drop_vars("g"), store)
    chunks: dict[str, int] | None
    for chunks in (None, {}):
        ours = xr.open_dataset(store, engine="sporadik", chunks=chunks)["v"]
        ours = ours.assign_coords(g=("x", GROUPS))
        # lazily too: an operator of a lazily opened variable acts on its dask read
        lacking = _EXPRESSIONS_LACK if hasattr(da.Array, "expr") else ()
        for name, use in _USES.items():
            if name not in lacking:
                use(ours).load()
    again = xr.open_dataset(store, engine="sporadik", chunks={})["v"]
    with dask.config.set(scheduler="threads"):
        sd.to_sporadik(again, store + "-again")
    assert "sporadik_dask" in sys.modules


class _NotInstalled(importlib.abc.MetaPathFinder):
    """Finds ``sporadik_dask`` nowhere, so a process runs as if the package were not installed
    (xarray warns that it skips the package's entry points)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if fullname.partition(".")[0] == "sporadik_dask":
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)


def main(argv: list[str]) -> None:
    mode, store, out = argv
    if mode == "plain":
        sys.meta_path.insert(0, _NotInstalled())
    else:
        use_sporadik(store)
    results = run_all()
    if mode == "plain":
        imported = sorted(m for m in sys.modules if m.partition(".")[0] == "sporadik_dask")
        assert not imported, f"the plain run imported {imported}"
    with open(out, "wb") as file:
        pickle.dump(results, file)


if __name__ == "__main__":
    main(sys.argv[1:])
