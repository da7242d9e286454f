"""The pieces the count pass keeps on disk come back as they were read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sporadik_dask.format.errors import SporadikError
from sporadik_dask.write.kept import keep_piece, keeping, kept_piece
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

    assert keeping(False) is None
    assert keeping(True) == "files"
    with dask.config.set({"sporadik.spill-bytes": -1}):
        assert keeping(True) is None
        with dask.config.set({"sporadik.keep-pieces": "workers"}):
            assert keeping(True) is None


@pytest.mark.parametrize("chosen", ["auto", "files", "workers"])
def test_a_local_scheduler_has_no_workers_and_keeps_files(chosen: str) -> None:
    import dask.config

    with dask.config.set({"sporadik.keep-pieces": chosen}):
        assert keeping(True) == "files"


def test_an_unknown_place_to_keep_pieces_is_refused_by_name() -> None:
    import dask.config

    with (
        dask.config.set({"sporadik.keep-pieces": "disk"}),
        pytest.raises(SporadikError, match=r"keep-pieces is 'disk'.*'auto', 'files', 'workers'"),
    ):
        keeping(True)


@pytest.mark.parametrize("cut", [30, 10])  # into the values, into the coordinates
def test_a_cut_kept_piece_is_an_error_naming_it(tmp_path: Path, cut: int) -> None:
    coords, data = np.array([[0, 1, 2], [1, 2, 0]]), np.ones(3)
    kept = keep_piece(Piece(coords, data), SpillTo(str(tmp_path), str(tmp_path)))
    assert kept is not None
    with open(kept.path, "r+b") as file:
        file.truncate(cut)
    with pytest.raises(OSError, match=rf"{kept.path} is {cut} of its 48 bytes"):
        kept_piece(kept)
