"""Sums and means whose runs reach output cells no other run reaches: added per run and
concatenated, never merged."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.kernels.groups import group_runs, sum_runs
from sporadik_dask.kernels.sort import sort_by_lead
from sporadik_dask.planning.budgets import SPARSE_BATCH_CELLS
from sporadik_dask.reduce.fields import Op, accumulator_dtype, result_dtype
from sporadik_dask.reduce.sparse_fields import SparseFields, cells_of, sparse_fields_of, sum_by_id
from sporadik_dask.reduce.target import Target

__all__ = [
    "Disjoint",
]


class Disjoint:
    """Output cells of a sum or mean that keeps the layout's indexed axis ungrouped: the output
    axes before it (*lead*, ``L`` cells), the axis itself (``A`` positions) and the axes after
    it (*trail*, ``T`` cells).

    A run reaches only its own position's ``L * T`` cells, so no two runs share a cell: each
    run's values add into a reused accumulator of ``L * T`` cells (:func:`sum_runs`, one pass,
    no sort) and the runs' sums are concatenated, never added. Runs come in position order, so
    one stable counting sort by the lead cell puts the whole in C order (within a run the trail
    cells are sorted). Memory: the cells some value lands in, plus the accumulator.
    """

    def __init__(self, target: Target, axis: int, dtype: np.dtype[Any]) -> None:
        at = target.kept.index(axis)
        out = target.out_shape
        self.target, self.axis = target, axis
        self.lead, self.extent, self.trail = math.prod(out[:at]), out[at], math.prod(out[at + 1 :])
        self._cells = self.lead * self.trail
        self._buffers: tuple[npt.NDArray[Any], npt.NDArray[np.bool_]] | None = None
        self._dtype, self._stored = accumulator_dtype(dtype), dtype
        grouping = target.grouping
        others = [a for a in target.kept if a != axis]
        #: Group codes (int32, a quarter of the cache int64 takes) when the only other kept axis
        #: is the grouped one, its codes a table: each value's key is then its code, looked up in
        #: the kernel.
        self._codes: npt.NDArray[np.int32] | None = None
        self._grouped = grouping.axis if grouping is not None else -1
        if grouping is not None and others == [grouping.axis] and grouping.size < 2**31:
            table = grouping.lookup
            self._codes = None if table is None else table.astype(np.int32)

    @property
    def by_code(self) -> bool:
        """Whether :meth:`lead_cells` serves: the lead is the grouped axis alone."""
        return self._codes is not None and self.trail == 1 and self._cells <= SPARSE_BATCH_CELLS

    @classmethod
    def of(cls, target: Target, axis: int, dtype: np.dtype[Any]) -> Disjoint | None:
        grouped = target.grouping.axis if target.grouping is not None else None
        if axis not in target.kept or axis == grouped:
            return None
        return cls(target, axis, dtype)

    def _keys(self, coords: Sequence[Any], size: int) -> npt.NDArray[np.int64]:
        """Each value's cell among its run's ``L * T`` (lead and trail raveled), -1 for a value
        whose position along the grouped axis is in no group."""
        target, grouping = self.target, self.target.grouping
        if self._codes is not None:
            looked: npt.NDArray[np.int64] = self._codes[coords[self._grouped]].astype(np.int64)
            return looked
        others = [
            (axis, extent)
            for axis, extent in zip(target.kept, target.out_shape, strict=True)
            if axis != self.axis
        ]
        keys = np.zeros(size, dtype=np.int64)
        outside = None
        for axis, extent in others:
            column = np.asarray(coords[axis])
            if grouping is not None and axis == grouping.axis:
                column = grouping.groups(column)  # -1: in no group
                outside = column < 0
            if len(others) == 1:  # the key is the column itself, -1 included
                return column.astype(np.int64, copy=False)
            keys *= extent
            keys += column
        if outside is not None and outside.any():
            keys[outside] = -1
        return keys

    def fields(
        self,
        first: int,
        lengths: npt.NDArray[np.int64],
        coords: Sequence[Any],
        values: npt.NDArray[Any],
        *,
        skipna: bool,
    ) -> SparseFields:
        """:class:`SparseFields` (C order within each run) of the runs of positions
        ``first, first + 1, ...``, ``lengths`` values each."""
        nan = np.isnan(values) if values.dtype.kind in "fc" else None
        nan_ids, nans = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        keys = None
        if nan is not None and nan.any():
            keys = self._keys(coords, values.size)
            runs = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
            hit = nan & (keys >= 0)
            nan_ids, nans = sum_by_id(
                self._ids(first, keys[hit], runs[hit]), np.ones(int(hit.sum()), np.int64)
            )
            if skipna:  # a NaN adds nothing, but its cell stays (all NaN: a NaN mean)
                values = np.where(nan, np.zeros((), dtype=values.dtype), values)
        summed = None
        if self._cells <= SPARSE_BATCH_CELLS:
            if self._buffers is None:
                self._buffers = np.zeros(self._cells, self._dtype), np.zeros(self._cells, bool)
            if self._codes is not None:  # the grouped axis's positions, mapped in the kernel
                where, lookup = np.asarray(coords[self._grouped]), self._codes
            else:
                keys = self._keys(coords, values.size) if keys is None else keys
                where, lookup = keys, np.zeros(0, np.int32)
            summed = sum_runs(
                lengths, where, values, self._buffers, lookup=lookup, first=first,
                extent=self.extent, trail=self.trail,
            )  # fmt: skip
        if summed is None:  # too many cells per run for an accumulator, or a dtype numba lacks
            keys = self._keys(coords, values.size) if keys is None else keys
            runs = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
            inside = keys >= 0
            found = sparse_fields_of(
                self._ids(first, keys[inside], runs[inside]), values[inside], skipna=False
            )
            return SparseFields(found.ids, found.total, nan_ids, nans)
        return SparseFields(summed[0], summed[1], nan_ids, nans)

    def lead_cells(
        self,
        op: Op,
        first: int,
        lengths: npt.NDArray[np.int64],
        coords: Sequence[Any],
        values: npt.NDArray[Any],
        *,
        skipna: bool,
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]] | None:
        """The finished cells of the runs of positions ``first, first + 1, ...`` when the lead
        is the grouped axis alone (rank 2 out, groups first): each cell's group, position and
        value in the result's dtype, run by run. None otherwise, or for a mean that skips NaNs
        of a batch holding some (:meth:`fields` then)."""
        if not self.by_code or self._codes is None:
            return None
        if op == "mean" and skipna and values.dtype.kind in "fc" and np.isnan(values).any():
            return None
        if self._buffers is None:
            self._buffers = np.zeros(self._cells, self._dtype), np.zeros(self._cells, bool)
        where = np.asarray(coords[self._grouped])
        out = result_dtype(op, self._stored)
        found = group_runs(
            lengths, where, self._codes, values, self._buffers, first=first, skipna=skipna,
            dtype=self._dtype if op == "mean" else out,
        )  # fmt: skip
        if found is None:
            return None
        groups, positions, data = found
        if op == "mean":
            data = (data / cells_of(self.target, groups)).astype(out, copy=False)
        return groups, positions, data

    def _ids(
        self, first: int, keys: npt.NDArray[np.int64], runs: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """Output cells (raveled over the output) of run ``runs`` (from ``first``) at ``keys``."""
        ids = keys // self.trail
        ids *= self.extent
        ids += runs + first
        ids *= self.trail
        ids += keys % self.trail
        return ids

    def merge(self, parts: list[SparseFields]) -> SparseFields:
        """The batches' fields (``parts`` is emptied as they are taken), concatenated (no cell
        is in two) and put in C order."""
        ids = np.concatenate([p.ids for p in parts])
        total = np.concatenate([p.total for p in parts])
        nan_ids, nans = sum_by_id(
            np.concatenate([p.nan_ids for p in parts]), np.concatenate([p.nans for p in parts])
        )
        parts.clear()
        if self.lead > 1:
            ids, total = sort_by_lead(ids, total, self.extent * self.trail, self.lead)
        return SparseFields(ids, total, nan_ids, nans)
