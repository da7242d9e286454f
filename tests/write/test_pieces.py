"""Pieces on their own: made from numpy, scipy and sparse blocks, merged and split by cell,
compared with dense arrays."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
import sparse

import sporadik_dask as sd
from sporadik_dask.write.pieces import (
    Piece,
    cell_bounds,
    cell_sample,
    merge_pieces,
    piece_of_block,
    split_by_cell,
)
from tests.helpers import random_dense


def test_merging_pieces_adds_repeated_cells_and_counts_them() -> None:
    rng = np.random.default_rng(3)
    coords = rng.integers(0, 6, size=(2, 60))
    data = rng.integers(1, 9, 60).astype(np.float64)
    expected = np.zeros((6, 6))
    np.add.at(expected, tuple(coords), data)
    pieces = [Piece(coords[:, :25], data[:25]), Piece(coords[:, 25:], data[25:])]
    merged = merge_pieces((6, 6), *pieces)
    got = np.zeros((6, 6))
    got[tuple(merged.piece.coords)] = merged.piece.data
    np.testing.assert_array_equal(got, expected)
    assert merged.repeats == 60 - np.count_nonzero(expected)
    keys = np.ravel_multi_index(tuple(merged.piece.coords), (6, 6))
    assert np.all(np.diff(keys) > 0)


def test_splitting_by_cell_sends_every_copy_of_a_cell_to_one_part_in_order_of_cells() -> None:
    coords = np.array([[0, 1, 0, 2, 1, 2], [3, 1, 3, 0, 1, 3]])
    bounds = cell_bounds(3, cell_sample(Piece(coords, np.arange(6.0)), (3, 4)))
    parts = split_by_cell(Piece(coords, np.arange(6.0)), (3, 4), bounds)
    homes = {tuple(cell): p for p, part in enumerate(parts) for cell in part.coords.T.tolist()}
    for p, part in enumerate(parts):
        assert all(homes[tuple(cell)] == p for cell in part.coords.T.tolist())
    assert sum(part.data.size for part in parts) == 6
    cells = [np.ravel_multi_index(tuple(part.coords), (3, 4)) for part in parts]
    assert all(c.size for c in cells)
    assert all(a.max() < b.min() for a, b in itertools.pairwise(cells))


@pytest.mark.parametrize("pieces", [1, 3, 8])
def test_bounds_from_samples_cut_the_cells_into_partitions_of_similar_size(pieces: int) -> None:
    rng = np.random.default_rng(8)
    shape = (100, 3_100_000_000)
    raw = [
        Piece(
            np.stack([rng.integers(0, 100, 20_000), rng.integers(0, 31_000_000, 20_000)]),
            np.ones(20_000),
        )
        for _ in range(pieces)
    ]
    bounds = cell_bounds(pieces, *(cell_sample(piece, shape) for piece in raw))
    sizes = np.zeros(pieces, dtype=np.int64)
    for piece in raw:
        sizes += [part.coords.shape[1] for part in split_by_cell(piece, shape, bounds)]
    assert sizes.sum() == 20_000 * pieces
    assert sizes.max() <= 1.2 * 20_000


SCIPY_FORMATS = ["csr", "csc", "coo", "lil", "dok", "bsr"]


@pytest.mark.parametrize("layout", SCIPY_FORMATS)
def test_a_scipy_block_gives_the_cells_of_its_dense_form_placed_by_offset(layout: str) -> None:
    dense = random_dense(np.random.default_rng(4), (9, 7), 0.3)
    block = sp.csr_matrix(dense).asformat(layout)
    piece = piece_of_block(block, (100, 20))
    got = np.zeros((109, 27))
    got[tuple(piece.coords)] = piece.data
    np.testing.assert_array_equal(got[100:, 20:], dense)
    assert piece.data.size == np.count_nonzero(dense)


def test_a_csr_block_keeps_row_major_order_and_shares_its_values() -> None:
    block = sp.csr_matrix(random_dense(np.random.default_rng(5), (8, 6), 0.4, np.float64))
    piece = piece_of_block(block, (0, 0))
    keys = np.ravel_multi_index(tuple(piece.coords), (8, 6))
    assert np.all(np.diff(keys) > 0)
    assert np.shares_memory(piece.data, block.data)


def test_a_sparse_block_with_a_nonzero_fill_value_is_refused() -> None:
    block = sparse.COO.from_numpy(np.ones((2, 2)), fill_value=1.0)
    with pytest.raises(sd.LayoutError, match=r"fill_value 1\.0"):
        piece_of_block(block, (0, 0))
