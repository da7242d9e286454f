"""An .h5ad's sparse matrix read in blocks, its compressed chunks decoded outside h5py: the same
values as anndata's, whatever the filters, chunking and blocks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anndata
import h5py
import numpy as np
import pytest
import scipy.sparse as sp

from sporadik_dask.cli.h5ad import elements, sparse_matrix
from sporadik_dask.cli.main import main
from tests.helpers import random_dense

#: h5py's dataset options: gzip alone (anndata's ``compression="gzip"``), gzip after the byte
#: shuffle, lzf (left to h5py), and no filter at all.
FILTERS: dict[str, dict[str, Any]] = {
    "gzip": {"compression": "gzip"},
    "gzip-shuffle": {"compression": "gzip", "shuffle": True},
    "lzf": {"compression": "lzf"},
    "none": {},
}


def _write(path: Path, matrix: Any, filters: dict[str, Any], chunk: int) -> None:
    """``matrix`` as anndata lays out a sparse group, its arrays chunked by ``chunk`` elements."""
    kind = "csr_matrix" if matrix.format == "csr" else "csc_matrix"
    with h5py.File(path, "w") as file:
        group = file.create_group("X")
        group.attrs.update({"encoding-type": kind, "encoding-version": "0.1.0"})
        group.attrs["shape"] = np.asarray(matrix.shape)
        for name in ("data", "indices", "indptr"):
            values = getattr(matrix, name)
            chunks = (min(chunk, len(values)),) if filters or chunk < len(values) else None
            group.create_dataset(name, data=values, chunks=chunks, **filters)


@pytest.mark.parametrize("filters", FILTERS)
@pytest.mark.parametrize("kind", [sp.csr_matrix, sp.csc_matrix])
@pytest.mark.parametrize("values", [7, 50, 10_000])
def test_blocks_hold_the_matrix_whatever_the_filters_and_blocks(
    tmp_path: Path, filters: str, kind: Any, values: int
) -> None:
    dense = random_dense(np.random.default_rng(0), (40, 30), 0.3).astype(np.float32)
    matrix = kind(dense)
    path = tmp_path / "x.h5ad"
    _write(path, matrix, FILTERS[filters], chunk=16)
    with h5py.File(path, "r") as file:
        x = sparse_matrix(str(path), file["X"], values)
    assert x is not None and type(x._meta) is kind and x.dtype == np.float32
    blocks = x.numblocks[0] if kind is sp.csr_matrix else x.numblocks[1]
    assert blocks == 1 if values >= matrix.nnz else blocks > 1
    np.testing.assert_array_equal(x.compute().toarray(), dense)


@pytest.mark.parametrize("filters", ["gzip", "gzip-shuffle"])
@pytest.mark.parametrize(("lo", "hi"), [(0, 100), (3, 5), (15, 17), (16, 32), (31, 99), (9, 9)])
def test_elements_inflated_outside_h5py_are_h5pys(
    tmp_path: Path, filters: str, lo: int, hi: int
) -> None:
    values = np.random.default_rng(1).integers(-(2**40), 2**40, 100)
    with h5py.File(tmp_path / "a.h5", "w") as file:
        file.create_dataset("a", data=values, chunks=(16,), **FILTERS[filters])
    with h5py.File(tmp_path / "a.h5", "r") as file:
        found = elements(file["a"], lo, hi)
    np.testing.assert_array_equal(found, values[lo:hi])
    assert found.dtype == values.dtype


def test_chunks_never_written_read_as_the_fill_value(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "a.h5", "w") as file:
        partial = file.create_dataset(
            "a", shape=(50,), chunks=(10,), dtype="i4", fillvalue=7, compression="gzip"
        )
        partial[:12] = np.arange(12)
    with h5py.File(tmp_path / "a.h5", "r") as file:
        found = elements(file["a"], 5, 35)
    np.testing.assert_array_equal(found, np.r_[np.arange(5, 12), np.full(23, 7)])


def test_an_empty_matrix_is_one_empty_block(tmp_path: Path) -> None:
    path = tmp_path / "x.h5ad"
    _write(path, sp.csr_matrix((0, 5), dtype=np.float64), {}, chunk=4)
    with h5py.File(path, "r") as file:
        x = sparse_matrix(str(path), file["X"])
    assert x.shape == (0, 5) and x.compute().nnz == 0


def test_a_dense_matrix_is_not_one_to_read_in_blocks(tmp_path: Path) -> None:
    anndata.AnnData(np.ones((3, 2), dtype=np.float32)).write_h5ad(tmp_path / "x.h5ad")
    with h5py.File(tmp_path / "x.h5ad", "r") as file:
        assert sparse_matrix(str(tmp_path / "x.h5ad"), file["X"]) is None


@pytest.mark.parametrize("kind", [sp.csr_matrix, sp.csc_matrix])
def test_convert_of_a_gzip_h5ad_reads_the_values_anndata_reads(tmp_path: Path, kind: Any) -> None:
    dense = random_dense(np.random.default_rng(2), (300, 40), 0.2).astype(np.float32)
    adata = anndata.AnnData(kind(dense))
    adata.write_h5ad(tmp_path / "in.h5ad", compression="gzip")
    assert main(["convert", str(tmp_path / "in.h5ad"), str(tmp_path / "out.zarr"), "--quiet"]) == 0
    import sporadik

    with sporadik.open_array(tmp_path / "out.zarr") as store:
        np.testing.assert_array_equal(store.to_array().to_dense(), dense)
