"""The pieces the count pass keeps on disk come back as they were read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sporadik_dask.write.kept import keep_piece, keep_to_for, kept_piece
from sporadik_dask.write.pieces import Piece
from sporadik_dask.write.spill import SpillTo


@pytest.mark.parametrize(
    ("coords", "stored"),
    [
        (np.array([[0, 5, 9], [3, 1, 2]]), "<i4"),
        (np.array([[0, 1, 2], [2**31, 3 * 10**9, 7]]), "<i8"),  # a genome's positions
        (np.zeros((3, 0), dtype=np.int64), "<i4"),
    ],
)
def test_a_kept_piece_reads_back_as_it_was_read(
    tmp_path: Path, coords: np.ndarray, stored: str
) -> None:
    data = np.arange(coords.shape[1], dtype=np.float32) + 0.5
    kept = keep_piece(Piece(coords, data), SpillTo(str(tmp_path), str(tmp_path)))
    assert kept is not None and kept.coords_dtype == stored
    back = kept_piece(kept)
    assert back.coords.dtype == np.int64 and back.data.dtype == np.float32
    np.testing.assert_array_equal(back.coords, coords)
    np.testing.assert_array_equal(back.data, data)


def test_nothing_is_kept_of_an_input_cheaper_to_read_again_or_when_nothing_may_go_to_disk() -> None:
    import dask.config

    assert keep_to_for(False) is None
    assert keep_to_for(True) is not None
    with dask.config.set({"sporadik.spill-bytes": -1}):
        assert keep_to_for(True) is None


@pytest.mark.parametrize("cut", [30, 10])  # into the values, into the coordinates
def test_a_cut_kept_piece_is_an_error_naming_it(tmp_path: Path, cut: int) -> None:
    coords, data = np.array([[0, 1, 2], [1, 2, 0]]), np.ones(3)
    kept = keep_piece(Piece(coords, data), SpillTo(str(tmp_path), str(tmp_path)))
    assert kept is not None
    with open(kept.path, "r+b") as file:
        file.truncate(cut)
    with pytest.raises(OSError, match=rf"{kept.path} is {cut} of its 48 bytes"):
        kept_piece(kept)
