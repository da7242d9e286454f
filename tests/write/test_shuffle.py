"""The shuffle's layer, read without computing: each input split once, each partition gathering
one part of each."""

from __future__ import annotations

from typing import Any

import pytest

from sporadik_dask.write import shuffle
from sporadik_dask.write.pieces import merge_pieces, split_by_cell


def _shuffled(inputs: int, partitions: int) -> tuple[list[Any], dict[Any, Any]]:
    return shuffle.shuffle(
        "s",
        [("in", b) for b in range(inputs)],
        split=(split_by_cell, (4, 4), "bounds"),
        combine=[(merge_pieces, (4, 4))] * partitions,
    )


@pytest.mark.parametrize(("inputs", "partitions"), [(1, 1), (3, 5), (6, 2)])
def test_the_shuffle_splits_each_input_once_and_each_partition_gathers_one_part_of_each(
    inputs: int, partitions: int
) -> None:
    outputs, layer = _shuffled(inputs, partitions)
    assert outputs == [("s", p) for p in range(partitions)]
    splits = [key for key in layer if key[0] == "s-split"]
    assert splits == [("s-split", b) for b in range(inputs)]
    for b in range(inputs):
        assert layer[("s-split", b)] == (split_by_cell, ("in", b), (4, 4), "bounds")
    for p in range(partitions):
        func, shape, *parts = layer[("s", p)]
        assert (func, shape) == (merge_pieces, (4, 4))
        assert parts == [("s-part", b, p) for b in range(inputs)]
        for b in range(inputs):
            assert layer[("s-part", b, p)][1:] == (("s-split", b), p)
    assert len(layer) == inputs + inputs * partitions + partitions
