"""A store's reduction as a dask array: one task per span of a layout's positions, their
fields merged in a tree, or their finished cells laid down once."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sporadik_dask.kernels.regions import deal_by_lead, gather_leads
from sporadik_dask.planning.budgets import DENSE_PARTIALS_BYTES
from sporadik_dask.reduce.disjoint import Disjoint
from sporadik_dask.reduce.fields import Fields, Op, needed_fields, result_dtype
from sporadik_dask.reduce.layout import layout_for
from sporadik_dask.reduce.results import (
    combine_parts,
    finish_fields,
    finish_moments,
    result_meta,
)
from sporadik_dask.reduce.sparse_fields import SparseFields
from sporadik_dask.reduce.store import finished_cells, store_fields
from sporadik_dask.reduce.target import Target

__all__ = [
    "SpanCells",
    "merge_spans",
    "moments_store_dask",
    "place_spans",
    "reduce_store_dask",
    "span_cells",
]


def reduce_store_dask(
    reader: Any,
    op: Op,
    target: Target,
    spans: int,
    *,
    skipna: bool,
    ddof: int = 0,
    dense: bool = True,
    vectors: Sequence[Any] = (),
) -> Any:
    """:func:`reduce_store` as a dask array: one task per span of the layout's positions (about
    equal in values), their fields added in a tree, so every worker reads its own runs; for a
    dense result, no more spans than ``sporadik.dense-partials-bytes`` of their fields hold.
    Spans of a sparse sum or mean that keeps the layout's axis ungrouped share no output cell:
    each span's finished cells are laid into the result once (:func:`place_spans`), not
    merged. ``reader`` may be a :class:`~sporadik_dask.reduce.elementwise.Transformed` whose
    vector operands are the dask arrays ``vectors``, computed once and given to every span."""
    from sporadik_dask.reduce.graph import store_reduction

    in_task, made, layout, bounds = _spans(reader, op, target, spans, dense, vectors)
    meta = result_meta(op, target, reader.dtype, dense)
    disjoint = None if dense else Disjoint.of(target, layout.indexed_axis, reader.dtype)
    if disjoint is not None and meta.dtype != np.float16:  # spans share no cell: laid down
        cells = disjoint.extent * disjoint.trail
        return store_reduction(
            reader,
            bounds,
            label=f"sporadik-{op}",
            fields=(span_cells, in_task, op, target, skipna, cells, disjoint.lead),
            merge=None,
            finish=(place_spans, target.out_shape, cells),
            shape=target.out_shape,
            meta=meta,
            made=made,
        )
    return store_reduction(
        reader,
        bounds,
        label=f"sporadik-{op}",
        fields=(store_fields, in_task, op, target, skipna, dense),
        merge=(merge_spans, op, target, layout.indexed_axis, reader.dtype),
        finish=(finish_fields, op, target, reader.dtype, skipna, ddof),
        shape=target.out_shape,
        meta=meta,
        made=made,
    )


def moments_store_dask(
    reader: Any,
    target: Target,
    spans: int,
    *,
    skipna: bool,
    ddof: int = 0,
    vectors: Sequence[Any] = (),
) -> Any:
    """The mean and the variance into ``target`` from one pass over a store, as a dask array of
    shape ``(2, *target.out_shape)`` (mean first), float64: the variance's fields hold the mean
    already, so asking for both costs what the variance alone costs (where ``Y.mean()`` and
    ``Y.var()`` are two passes). Spans and ``vectors`` as :func:`reduce_store_dask`'s."""
    from sporadik_dask.reduce.graph import store_reduction

    in_task, made, layout, bounds = _spans(reader, "var", target, spans, True, vectors)
    return store_reduction(
        reader,
        bounds,
        label="sporadik-moments",
        fields=(store_fields, in_task, "var", target, skipna, True),
        merge=(merge_spans, "var", target, layout.indexed_axis, reader.dtype),
        finish=(finish_moments, target, reader.dtype, skipna, ddof),
        shape=(2, *target.out_shape),
        meta=np.empty((0,) * (len(target.out_shape) + 1), np.float64),
        made=made,
    )


def _spans(
    reader: Any, op: Op, target: Target, spans: int, dense: bool, vectors: Sequence[Any]
) -> tuple[Any, Any, Any, npt.NDArray[np.int64]]:
    """The reader as a span's task names it, the call making a transformed reader from its
    ``vectors`` (or None), the layout read, and the spans' bounds of positions."""
    from sporadik_dask.planning.plan import partition_bounds
    from sporadik_dask.reduce.elementwise import Transformed
    from sporadik_dask.reduce.graph import MADE_READER

    made = None
    if vectors:
        assert isinstance(reader, Transformed), "vectors are a transformed reader's operands"
        made = ((Transformed.made, reader.reader, reader.steps), list(vectors))
    in_task = MADE_READER if made is not None else reader

    layout = layout_for(reader, target, dense)
    layout.check_whole_read(reader.location)
    if dense:  # each span's fields fill the whole result, and their merge holds all of them
        import dask

        budget = int(dask.config.get("sporadik.dense-partials-bytes", DENSE_PARTIALS_BYTES))
        partial = math.prod(target.out_shape) * 8 * len(needed_fields(op))
        spans = min(spans, max(1, budget // max(partial, 1)))
    ((lo, hi),) = reader.brackets([(layout, range(layout.positions))])
    indptr = np.concatenate(([0], np.cumsum(hi - lo)))
    bounds = partition_bounds(indptr, max(1, -(-int(indptr[-1]) // max(spans, 1))))
    if bounds.size < 2:  # an empty axis has no partition, but the result still needs a task
        bounds = np.zeros(2, dtype=np.int64)
    return in_task, made, layout, bounds


class SpanCells(NamedTuple):
    """The finished cells of one span of runs of a sparse sum or mean that keeps the runs' axis
    ungrouped (:class:`Disjoint`): no other span reaches them."""

    #: How many cells each lead cell holds; the cells come lead by lead.
    leads: npt.NDArray[np.int64]
    #: Each cell among its lead's, in C order within each lead, in the narrowest unsigned dtype
    #: that holds them (uint16 for 20,000 genes: a quarter of raveled int64 ids).
    offsets: npt.NDArray[Any]
    #: The result's value at each, in its dtype.
    data: npt.NDArray[Any]


def span_cells(
    reader: Any, op: Op, target: Target, skipna: bool, cells: int, leads: int, span: tuple[int, int]
) -> SpanCells:
    """:class:`SpanCells` of the runs of positions ``span`` of a sparse sum or mean's layout,
    whose output has ``leads`` lead cells of ``cells`` cells each."""
    layout = layout_for(reader, target, dense=False)
    disjoint = Disjoint.of(target, layout.indexed_axis, reader.dtype)
    assert disjoint is not None, "spans of cells are planned for disjoint runs only"
    found = list(finished_cells(reader, op, skipna, layout, disjoint, span))
    if not found:  # no runs in the span
        none = np.zeros(0, np.int64)
        found = [(none, none, np.zeros(0, result_dtype(op, reader.dtype)))]
    counts, offsets, data = deal_by_lead(found, leads, np.min_scalar_type(max(cells - 1, 0)))
    return SpanCells(counts, offsets, data)


def place_spans(shape: tuple[int, ...], cells: int, *spans: SpanCells) -> Any:
    """Every span's cells, in span order, as one ``sparse.COO`` of ``shape`` whose leads hold
    ``cells`` cells each: spans cover consecutive positions, so each lead's cells in span order
    are in C order, and :func:`~sporadik_dask.kernels.regions.gather_leads` writes them lead by
    lead. No sort, and no copy of a span. Memory: the spans' cells and the result, once each."""
    import sparse

    coords, data = gather_leads(shape, cells, [(s.leads, s.offsets, s.data) for s in spans])
    return sparse.COO(coords, data, shape=shape, has_duplicates=False, sorted=True)


def merge_spans(
    op: Op, target: Target, axis: int, dtype: np.dtype[Any], *parts: Fields | SparseFields
) -> Fields | SparseFields:
    """Fields of consecutive spans of a layout's runs, in span order, combined: sparse fields
    of a target keeping ``axis`` ungrouped share no cell, so they are concatenated and put in C
    order by one counting sort (:meth:`Disjoint.merge`), not sorted by comparison."""
    disjoint = Disjoint.of(target, axis, dtype) if isinstance(parts[0], SparseFields) else None
    if disjoint is None:
        return combine_parts(op, parts)
    return disjoint.merge(list(parts))  # type: ignore[arg-type]
