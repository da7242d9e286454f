"""A layout's runs straight to a rank-2 result (gathered, rows, columns, rows of some columns),
compared with numpy and scipy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
import sparse
from hypothesis import given, settings
from hypothesis import strategies as st

from sporadik_dask.kernels.runs import columns_of_runs, gather_runs, kept_of_runs, rows_of_runs


@settings(max_examples=100, deadline=None)
@given(
    size=st.integers(0, 40),
    runs=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 8)), max_size=12),
    dtype=st.sampled_from([np.float32, np.int64, np.float16, np.uint16]),
)
def test_gathered_runs_are_numpys_stretches_concatenated(
    size: int, runs: list[tuple[int, int]], dtype: type
) -> None:
    table: np.ndarray = np.arange(size).astype(dtype)
    kept = [(start, min(length, size - start)) for start, length in runs if start < size]
    starts = np.array([start for start, _ in kept], dtype=np.int64)
    lengths = np.array([length for _, length in kept], dtype=np.int64)
    expected = np.concatenate(
        [table[start : start + length] for start, length in kept] + [table[:0]]
    )
    at = np.cumsum(lengths) - lengths
    order = np.random.default_rng(size).permutation(len(kept))  # runs copied in any order
    got = np.zeros(int(lengths.sum()), dtype=table.dtype)
    gather_runs(table, starts[order], lengths[order], got, at[order])
    np.testing.assert_array_equal(got, expected)


def _selected(rng: np.random.Generator, size: int, order: str) -> tuple[np.ndarray, np.ndarray]:
    """Positions of an axis of ``size`` picked once each in ``order``, and the slot table of
    each position (-1: not picked)."""
    picked = np.flatnonzero(rng.random(size) < 0.7)
    if order == "descending":
        picked = picked[::-1]
    elif order == "shuffled":
        picked = rng.permutation(picked)
    slots = np.full(size, -1, dtype=np.int64)
    slots[picked] = np.arange(picked.size)
    return picked, slots


def _coo_of(dense: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A dense matrix's nonzeros in C order, as ``sparse.COO`` keeps them."""
    found = sparse.COO.from_numpy(dense)
    return found.coords, found.data


def _runs_asked(
    rng: np.random.Generator, lengths: np.ndarray, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs asked for in a caller's order, some twice: the positions, starts and lengths."""
    asked = rng.integers(0, size, rng.integers(0, 2 * size + 1))
    return asked, (np.cumsum(lengths) - lengths)[asked], lengths[asked]


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    rows=st.integers(1, 30),
    cols=st.integers(1, 30),
    order=st.sampled_from(["ascending", "descending"]),
    stored=st.sampled_from(["int32", "int64"]),
    every=st.booleans(),
)
def test_rows_of_runs_is_what_indexing_the_dense_matrix_gives(
    seed: int, rows: int, cols: int, order: str, stored: str, every: bool
) -> None:
    """Rows asked in any order, or every value in order (then permuted in place)."""
    rng = np.random.default_rng(seed)
    csr = sp.random(rows, cols, density=0.4, format="csr", random_state=rng)
    csr.data[:] = rng.integers(1, 100, csr.nnz)
    dense = csr.toarray()
    if every:
        asked = np.arange(rows)
        starts, lengths = csr.indptr[:-1].astype(np.int64), np.diff(csr.indptr)
        picked = np.arange(cols)[:: 1 if order == "ascending" else -1]
        slots = np.empty(cols, dtype=np.int64)
        slots[picked] = np.arange(cols)
    else:
        asked, starts, lengths = _runs_asked(rng, np.diff(csr.indptr), rows)
        picked, slots = _selected(rng, cols, order)
    got = rows_of_runs(
        starts, lengths, csr.indices.astype(stored), csr.data, slots, reverse=order != "ascending"
    )
    assert got is not None
    coords, data = _coo_of(dense[np.ix_(asked, picked)])
    np.testing.assert_array_equal(got[0], coords)
    np.testing.assert_array_equal(got[1], data)
    if every and csr.nnz:
        assert np.shares_memory(got[1], csr.data)


def test_rows_of_runs_declines_a_run_out_of_order_and_a_dtype_numba_lacks() -> None:
    one = np.array([0]), np.array([2])
    slots = np.arange(3)
    assert rows_of_runs(*one, np.array([2, 1]), np.ones(2), slots, reverse=False) is None
    half = np.ones(2, dtype=np.float16)
    assert rows_of_runs(*one, np.array([1, 2]), half, slots, reverse=False) is None
    values = np.array([1.0, 2.0])
    assert rows_of_runs(*one, np.array([2, 1]), values, slots, reverse=True) is None
    np.testing.assert_array_equal(values, [1.0, 2.0])  # declined before touching them


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    rows=st.integers(1, 30),
    cols=st.integers(1, 30),
    order=st.sampled_from(["ascending", "descending", "shuffled"]),
    unsorted=st.booleans(),
    end_to_end=st.booleans(),
)
def test_columns_of_runs_is_what_indexing_the_dense_matrix_gives(
    seed: int, rows: int, cols: int, order: str, unsorted: bool, end_to_end: bool
) -> None:
    """Whatever the rows' order, and whatever the order within a run (a writer need not sort);
    runs asked in any order, or every run as read, end to end (no starts given)."""
    rng = np.random.default_rng(seed)
    csc = sp.random(rows, cols, density=0.4, format="csc", random_state=rng)
    csc.data[:] = rng.integers(1, 100, csc.nnz)
    indices, data = csc.indices.copy(), csc.data.copy()
    if unsorted:
        for lo, hi in itertools.pairwise(csc.indptr):
            indices[lo:hi], data[lo:hi] = indices[lo:hi][::-1].copy(), data[lo:hi][::-1].copy()
    if end_to_end:  # the offsets as indptr stores them: int32, read as int64 one by one
        asked, starts = np.arange(cols), None
        lo, hi = csc.indptr[:-1].astype(np.int32), csc.indptr[1:].astype(np.int32)
    else:
        asked, starts, lengths = _runs_asked(rng, np.diff(csc.indptr), cols)
        lo, hi = csc.indptr[asked], csc.indptr[asked] + lengths
    picked, slots = _selected(rng, rows, order)
    got = columns_of_runs(lo, hi, starts, indices, data, slots, picked.size)
    assert got is not None
    coords, expected = _coo_of(csc.toarray()[np.ix_(picked, asked)])
    np.testing.assert_array_equal(got[0], coords)
    np.testing.assert_array_equal(got[1], expected)


def test_columns_of_runs_reads_int32_offsets_near_2_31_as_int64_ones() -> None:
    """A stretch's offsets as ``indptr`` stores them, up to 2**31 - 1: each read into an int64
    before any arithmetic, the runs are those of the same offsets widened."""
    top = 2**31 - 1
    offsets = np.array([top - 9, top - 6, top - 6, top - 2, top], dtype=np.int32)
    indices = np.array([0, 2, 3, 1, 2, 3, 0, 3, 4], dtype=np.int32)
    data = np.arange(1, 10, dtype=np.float32)
    slots = np.array([-1, 0, 1, 2, 3], dtype=np.int64)  # row 0 left out
    narrow = columns_of_runs(offsets[:-1], offsets[1:], None, indices, data, slots, 4)
    wide = offsets.astype(np.int64)
    widened = columns_of_runs(wide[:-1], wide[1:], None, indices, data, slots, 4)
    assert narrow is not None and widened is not None
    dense = np.zeros((5, 4), dtype=np.float32)
    for run, (lo, hi) in enumerate(itertools.pairwise(wide - wide[0])):
        dense[indices[lo:hi], run] = data[lo:hi]
    coords, expected = _coo_of(dense[1:])
    for got in (narrow, widened):
        np.testing.assert_array_equal(got[0], coords)
        np.testing.assert_array_equal(got[1], expected)


@settings(max_examples=100, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 6), max_size=10),
    genes=st.integers(1, 9),
    seed=st.integers(0, 2**16),
)
def test_runs_kept_of_some_columns_are_scipys_column_selection(
    lengths: list[int], genes: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    runs = np.array(lengths, dtype=np.int64)
    indices = rng.integers(0, genes, int(runs.sum())).astype(np.int32)
    values = rng.random(indices.size)
    chosen = np.flatnonzero(rng.random(genes) < 0.5)
    columns = np.full(genes, -1, dtype=np.int64)
    columns[chosen] = np.arange(chosen.size)
    indptr, kept, at = kept_of_runs(runs, indices, columns)
    got = sp.csr_matrix((values[at], kept, indptr), shape=(runs.size, chosen.size))
    rows = np.repeat(np.arange(runs.size), runs)
    whole = sp.coo_matrix((values, (rows, indices)), shape=(runs.size, genes)).tocsr()
    np.testing.assert_array_equal(got.toarray(), whole[:, chosen].toarray())
    assert np.all(indices[at] == chosen[kept])  # each kept value's own column, in run order
    assert np.all(np.diff(at) > 0)
