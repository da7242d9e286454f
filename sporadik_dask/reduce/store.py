"""A reduction over a whole store in one pass: a layout's runs read in bounded batches,
never sorted into C order."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.format.spec import check_indices
from sporadik_dask.kernels.groups import add_runs
from sporadik_dask.kernels.regions import Regions
from sporadik_dask.reduce.codes import CodeWindows
from sporadik_dask.reduce.disjoint import Disjoint
from sporadik_dask.reduce.fields import Fields, Op, merge_into, result_dtype
from sporadik_dask.reduce.layout import affine, index_coords, layout_for
from sporadik_dask.reduce.prefetch import Fetch, OneBehind, ahead, batch_bounds
from sporadik_dask.reduce.results import combine_parts, finish_fields, gather_fields
from sporadik_dask.reduce.sparse_fields import SparseFields, sparse_values
from sporadik_dask.reduce.target import Target

__all__ = [
    "finished_cells",
    "reduce_store",
    "store_fields",
]


def store_fields(
    reader: Any,
    op: Op,
    target: Target,
    skipna: bool,
    dense: bool,
    span: tuple[int, int] | None = None,
) -> Fields | SparseFields:
    """The fields of the runs of positions ``span`` (default all) of the reduction's layout,
    read in bounded batches (the next read while this one is added); the runs' values alone
    when their axis is the only one kept."""
    layout = layout_for(reader, target, dense)
    axis = layout.indexed_axis
    first, last = span or (0, layout.positions)
    ((lo, hi),) = reader.brackets([(layout, range(first, last))])
    disjoint = None if dense else Disjoint.of(target, axis, reader.dtype)
    grouped_here = target.grouping is not None and target.grouping.axis == axis
    nothing = np.zeros(0, np.int64), np.zeros(0, reader.dtype)
    parts = [gather_fields(op, target, *nothing, skipna, dense)]
    strides = affine(op, target, layout, reader.dtype) if dense else None
    fields: Fields = parts[0]  # type: ignore[assignment]
    empty = np.zeros(0, np.float64)
    # the one-pass adder checks each index as it adds: signed indices need no widened copy
    stored = layout.index_dtypes["indices"]
    as_stored = strides is not None and stored.kind == "i"
    # each value's output cell is its run's when only the run's axis is kept: no index read
    fetch = Fetch(reader, layout, lo, hi, runs_only=target.kept == (axis,), as_stored=as_stored)
    batches = batch_bounds(lo, hi, _bytes_per_value(reader, layout, fetch))

    grouping = target.grouping
    windows = None  # the groups of the grouped axis's positions in the values' index
    if grouping is not None and not grouped_here and (strides is None or strides.grouped):
        windows = CodeWindows(grouping)

    none_stored = np.zeros(0, np.int64)
    moments = (
        (fields["stored"], fields["mean"], fields["m2"])
        if dense and "m2" in fields  # sparse fields are a tuple of arrays: no moments
        else (none_stored, empty, empty)
    )

    def add(
        bases: Any,
        lengths: Any,
        indices: Any,
        stride: int,
        values: Any,
        window: tuple[Any, int] = (np.zeros(0, np.int8), 0),
        extent: int = layout.extent,
    ) -> bool:
        return add_runs(
            bases,
            lengths,
            indices,
            stride,
            values,
            extent=extent,
            lookup=window[0],
            offset=window[1],
            skipna=skipna,
            total=fields.get("total", empty),
            moments=moments,
            nans=fields["nans"],
        )

    none = nothing[0]
    probe = np.zeros(0, stored if as_stored else np.int64)  # numba takes both dtypes, or not
    if strides is not None and add(none, none, probe, 0, nothing[1]):
        run_stride, index_stride, _ = strides
        for a, b, (indices, values) in ahead(fetch, batches):
            positions = np.arange(first + a, first + b, dtype=np.int64)
            if grouped_here:
                positions = target.grouping.groups(positions)  # type: ignore[union-attr]
            bases = np.where(positions >= 0, positions * run_stride, -1)
            lengths = hi[a:b] - lo[a:b]
            if windows is None:
                add(bases, lengths, none if indices is None else indices, index_stride, values)
                continue
            window = windows.covering(indices)
            if window is not None:
                add(bases, lengths, indices, index_stride, values, window)
                continue
            # read as stored, unchecked: each index is checked before its group is found
            check_indices(indices, layout.extent, f"Layout {layout.path!r} in {reader.location}")
            lengths, codes, values = windows.in_groups(lengths, indices, values)
            add(bases, lengths, codes, index_stride, values, extent=windows.grouping.size)
        return fields
    for a, b, (indices, values) in ahead(fetch, batches):
        coords = index_coords(len(reader.shape), layout, indices)
        positions = np.arange(first + a, first + b, dtype=np.int64)
        if grouped_here:  # each run's group, once per run
            positions = target.grouping.groups(positions)  # type: ignore[union-attr]
        coords[axis] = np.repeat(positions, hi[a:b] - lo[a:b])
        if disjoint is not None:
            lengths = hi[a:b] - lo[a:b]
            parts.append(disjoint.fields(first + a, lengths, coords, values, skipna=skipna))
            continue
        mapped = windows is not None and coords[windows.grouping.axis] is not None
        if mapped:  # each value's group, from a window of the table as the kernel's are
            coords[windows.grouping.axis] = windows.groups(coords[windows.grouping.axis])  # type: ignore[union-attr]
        where, values = target.locate(coords, values, grouped=grouped_here or mapped)
        part = gather_fields(op, target, where, values, skipna, dense)
        if dense:  # dense fields add up as they come, in place
            merge_into(parts[0], part)  # type: ignore[arg-type]
        else:
            parts.append(part)
    if disjoint is not None:
        return disjoint.merge(parts)  # type: ignore[arg-type]
    return combine_parts(op, parts)


def reduce_store(
    reader: Any, op: Op, target: Target, *, skipna: bool, ddof: int = 0, dense: bool = True
) -> Any:
    """``op`` into ``target`` over a whole store, one pass over a layout in bounded batches.

    Only runs are read, never sorted into C order. The result is numpy, or a ``sparse.COO`` when
    not ``dense`` (sums and means only).
    """
    layout_for(reader, target, dense).check_whole_read(reader.location)
    placed = None if dense else _placed(reader, op, target, skipna)
    if placed is not None:
        return placed
    fields = store_fields(reader, op, target, skipna, dense)
    return finish_fields(op, target, reader.dtype, skipna, ddof, fields)


def _lead_bound(
    reader: Any, target: Target, layout: Any, disjoint: Disjoint
) -> npt.NDArray[np.int64] | None:
    """The most output cells each lead cell of ``disjoint`` can receive: the values it receives,
    at most its cells. With no lead axis that is every value of the layout; with one, the values
    at each of its positions (summed over each group's members) from its own layout's counts.
    None for a lead of several axes, or of an axis with no layout."""
    lead_axes = target.kept[: target.kept.index(layout.indexed_axis)]
    cells = disjoint.extent * disjoint.trail
    if not lead_axes:
        return np.array([min(layout.nnz, cells)], dtype=np.int64)
    if len(lead_axes) > 1 or lead_axes[0] not in reader.description.layouts:
        return None
    lead = lead_axes[0]
    counts = reader.counts(lead)
    grouping = target.grouping
    if grouping is not None and grouping.axis == lead:
        counts = grouping.gathered(counts)
    bound: npt.NDArray[np.int64] = np.minimum(counts, cells)
    return bound


def _placed(reader: Any, op: Op, target: Target, skipna: bool) -> Any:
    """A sparse sum or mean over a whole store whose layout's indexed axis is kept ungrouped, as
    a ``sparse.COO``: each batch's cells are finished (no other batch reaches them) and laid
    straight into the result's regions (:class:`~sporadik_dask.kernels.regions.Regions`) on a second
    thread while the next batch is added up, so memory is the result's bound plus two batches,
    however many batches. None when no bound is known or numba lacks the result's dtype
    (float16): the caller merges batches instead."""
    import sparse

    layout = layout_for(reader, target, dense=False)
    axis = layout.indexed_axis
    disjoint = Disjoint.of(target, axis, reader.dtype)
    out_dtype = result_dtype(op, reader.dtype)
    if disjoint is None or out_dtype == np.float16:
        return None
    bound = _lead_bound(reader, target, layout, disjoint)
    if bound is None:
        return None
    regions = Regions(target.out_shape, disjoint.extent * disjoint.trail, bound, out_dtype)
    with OneBehind() as behind:  # each batch is laid down while the next is added up
        behind.then(regions.prefault)
        for cells in finished_cells(reader, op, skipna, layout, disjoint):
            behind.then(functools.partial(regions.place_cells, *cells))
    placed, data = regions.result()
    return sparse.COO(placed, data, shape=target.out_shape, has_duplicates=False, sorted=True)


def finished_cells(
    reader: Any,
    op: Op,
    skipna: bool,
    layout: Any,
    disjoint: Disjoint,
    span: tuple[int, int] | None = None,
) -> Iterator[tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]]:
    """The finished cells of each batch of runs of positions ``span`` (default all) of
    ``layout``, as :meth:`Regions.place_cells` takes them: each cell's lead, its offset among
    the lead's cells and its value, each lead's cells in C order."""
    first, last = span or (0, layout.positions)
    ((lo, hi),) = reader.brackets([(layout, range(first, last))])
    # the grouping kernel checks each index as it looks it up: signed indices need no widening
    stored = disjoint.by_code and layout.index_dtypes["indices"].kind == "i"
    fetch = Fetch(reader, layout, lo, hi, as_stored=stored)
    cells = disjoint.extent * disjoint.trail
    for a, b, (indices, values) in ahead(
        fetch, batch_bounds(lo, hi, _bytes_per_value(reader, layout, fetch))
    ):
        lengths = hi[a:b] - lo[a:b]
        coords = index_coords(len(reader.shape), layout, indices)
        found = disjoint.lead_cells(op, first + a, lengths, coords, values, skipna=skipna)
        if found is not None:
            yield found
            continue
        if stored and indices is not None:  # read unchecked for the kernel, int64 ones too
            check_indices(indices, layout.extent, f"Layout {layout.path!r} in {reader.location}")
            coords = index_coords(len(reader.shape), layout, indices.astype(np.int64, copy=False))
        fields = disjoint.fields(first + a, lengths, coords, values, skipna=skipna)
        data = sparse_values(op, fields, disjoint.target, reader.dtype, skipna=skipna)
        yield fields.ids // cells, fields.ids % cells, data


def _bytes_per_value(reader: Any, layout: Any, fetch: Fetch) -> int:
    """What each value a batch of ``fetch`` reads costs: its own bytes, and its index's
    (stored, or widened to int64) unless only the runs are read."""
    if fetch.runs_only:
        return int(reader.dtype.itemsize)
    index = layout.index_dtypes["indices"].itemsize if fetch.as_stored else 8
    return int(reader.dtype.itemsize + index)
