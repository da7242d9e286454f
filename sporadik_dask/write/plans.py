"""A write's layouts planned: the count pass computed once, then each layout planned from it.

The count pass also keeps each piece it reads, where the input is costly to read again, on disk
(:mod:`~sporadik_dask.write.kept`) or persisted on a cluster's workers
(:mod:`~sporadik_dask.write.persisted`), and the write takes them from there.

The count pass (:func:`~sporadik_dask.write.graph.count_graph`) is the one pass over the input
before anything is written: values per position along each axis, the cells named twice, each
piece's span and, with ``dtype=``, the values' range. Every layout's plan
(:func:`~sporadik_dask.planning.plan.plan_layout`) is made from its counts, so a refused write
(duplicates, a dtype no value fits) touches nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

import numpy.typing as npt

from sporadik_dask.format.errors import LayoutError
from sporadik_dask.planning.budgets import partition_values
from sporadik_dask.planning.dtypes import check_dtype_option, stored_dtype
from sporadik_dask.planning.plan import LayoutPlan, plan_layout
from sporadik_dask.write import persisted, spill
from sporadik_dask.write.graph import count_graph
from sporadik_dask.write.kept import keep_to, keeping
from sporadik_dask.write.piece_graphs import current_client, kept_pieces, persisted_pieces
from sporadik_dask.write.sources import Source

__all__ = ["Duplicates", "plan_source"]

Duplicates = Literal["sum", "refuse"]


def plan_source(
    source: Source,
    axes: Sequence[int],
    *,
    duplicates: Duplicates,
    chunk: int | None,
    byte_addressable: bool,
    partition_bytes: int | None,
    shard: int | None = None,
    dtype: npt.DTypeLike | None = None,
) -> tuple[dict[int, LayoutPlan], Source]:
    """Count the source's values per position along each axis (one pass), and plan each layout,
    its values stored in the dtype ``dtype`` asks for (:mod:`~sporadik_dask.planning.dtypes`),
    found from the range of values the same pass finds.

    Returns the plans and the source for the write: the pieces the pass kept, where it kept
    them (:mod:`~sporadik_dask.write.kept`, :mod:`~sporadik_dask.write.persisted`), else the
    source as given.
    """
    if duplicates not in ("sum", "refuse"):
        raise LayoutError(f"duplicates={duplicates!r}; choose 'sum' or 'refuse'.")
    if shard is not None and byte_addressable:
        raise LayoutError(
            "shard= and byte_addressable=True contradict each other: a byte-addressable array "
            "is one uncompressed chunk, and a shard holds many. Choose one."
        )
    ranged = check_dtype_option(dtype) is not None
    client = current_client()
    where = keeping(source.pieces.keep, client)
    to = keep_to() if where == "files" else None
    futures: tuple[Any, ...] = ()
    tally: Any  # a Tally, whose kept names a file for every piece when kept as files
    try:
        count = count_graph(source.pieces, source.shape, axes, ranged=ranged, keep_to=to)
        if where == "workers":
            tally, futures = persisted.count_and_persist(count, source.pieces, client)
        else:
            tally = count.compute()
        counts, repeats, spans, found, kept = tally
        if repeats and duplicates == "refuse":
            raise LayoutError(
                f"{repeats} values name a cell another value already names. With "
                "duplicates='refuse' nothing was written; pass duplicates='sum' to add them "
                "together, as scipy does."
            )
        stored = stored_dtype(dtype, source.dtype, found)
        target = partition_values(source.dtype, partition_bytes)
        rank = len(source.shape)
        plans = {
            axis: plan_layout(
                source.shape,
                axis,
                tuple(a for a in range(rank) if a != axis),
                column,
                stored,
                partition_values=target,
                chunk=chunk,
                byte_addressable=byte_addressable,
                shard=shard,
                spans=spans[:, k],
            )
            for k, (axis, column) in enumerate(zip(axes, counts, strict=True))
        }
    except BaseException:
        if to is not None:
            spill.remove(to.directories)
        persisted.release(futures)
        raise
    if to is not None:
        source = replace(source, pieces=kept_pieces(source.pieces, kept, to.local))
    elif where == "workers":
        source = replace(source, pieces=persisted_pieces(source.pieces, futures))
    return plans, source
