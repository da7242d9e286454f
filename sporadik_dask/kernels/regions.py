"""A ``sparse.COO`` result laid down in C order while its cells arrive in another order.

Reads of several layouts, and of leading axes above rank 2, deliver cells grouped by whatever
the layout made contiguous; the result must be in C order. Regions sized by a bound per lead
cell take the cells where they land, so no second copy of the coordinates is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sporadik_dask.format.errors import LayoutError
from sporadik_dask.kernels.compiled import kernel
from sporadik_dask.kernels.sort import code_dtype, sort_by_code

__all__ = ["Regions", "deal_by_lead", "gather_leads"]


@kernel
def _unravel_into(coords: Any, stride: int, at: int, cell: int, shape: Any) -> None:
    """Cell ``cell`` (raveled over ``shape``) as column ``at`` of flat coordinates whose rows
    are ``stride`` apart."""
    for r in range(len(shape) - 1, -1, -1):
        coords[r * stride + at] = cell % shape[r]
        cell //= shape[r]


@kernel
def _place(counts: Any, offsets: Any, data: Any, span: int, shape: Any, split: bool, fill: Any,
           ends: Any, coords: Any, out: Any) -> int:  # fmt: skip
    capacity = out.size
    j = 0
    for lead in range(len(counts)):
        n = counts[lead]
        k = fill[lead]
        if k + n > ends[lead]:
            return lead  # more cells than the lead's room: the caller's bound was wrong
        fill[lead] = k + n
        for at in range(k, k + n):
            out[at] = data[j]
            if split:  # rank 2, one lead per row: row 0 (the lead) is laid down by _compact
                coords[capacity + at] = offsets[j]
            else:
                _unravel_into(coords, capacity, at, lead * span + offsets[j], shape)
            j += 1
    return -1


@kernel
def _place_codes(codes: Any, offsets: Any, data: Any, fill: Any, ends: Any, coords: Any,
                 out: Any) -> int:  # fmt: skip
    capacity = out.size
    for i in range(len(codes)):
        lead = codes[i]
        k = fill[lead]
        if k >= ends[lead]:
            return int(lead)  # more cells than the lead's room: the caller's bound was wrong
        fill[lead] = k + 1
        coords[capacity + k] = offsets[i]  # row 0, the lead, is laid down by _compact
        out[k] = data[i]
    return -1


@kernel
def _compact(coords: Any, out: Any, starts: Any, fill: Any, rows: int, split: bool) -> int:
    capacity = out.size
    n = 0
    for lead in range(len(starts)):
        n += fill[lead] - starts[lead]
    for r in range(rows):  # every move is to the left, so no unread cell is overwritten
        at = r * n
        for lead in range(len(starts)):
            if split and r == 0:  # rank 2, one lead per row: the row is the lead
                coords[at : at + fill[lead] - starts[lead]] = lead
                at += fill[lead] - starts[lead]
                continue
            for k in range(starts[lead], fill[lead]):
                coords[at] = coords[r * capacity + k]
                at += 1
    at = 0
    for lead in range(len(starts)):
        for k in range(starts[lead], fill[lead]):
            out[at] = out[k]
            at += 1
    return n


@kernel
def _deal(codes: Any, offsets: Any, data: Any, fill: Any, out_offsets: Any, out_data: Any) -> None:
    for i in range(len(codes)):
        k = fill[codes[i]]
        fill[codes[i]] = k + 1
        out_offsets[k] = offsets[i]
        out_data[k] = data[i]


def deal_by_lead(
    parts: Sequence[tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]],
    leads: int,
    offset_dtype: Any,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any], npt.NDArray[Any]]:
    """Cells given part by part as each one's lead, offset and value, each lead's in C order,
    stably sorted by lead in one counting pass over the parts as they are (none joined first):
    how many cells each lead holds, and their offsets (in ``offset_dtype``) and values. Meant
    for the cells of one span of a reduction, a few million: the leads' write positions then
    stay in cache, where a whole result's would not (:func:`sort_by_code`)."""
    counts = np.zeros(leads, dtype=np.int64)
    for codes, _, _ in parts:
        counts += np.bincount(codes, minlength=leads)
    n = int(counts.sum())
    dtype = parts[0][2].dtype if parts else np.dtype(np.float64)
    out_offsets, out_data = np.empty(n, dtype=offset_dtype), np.empty(n, dtype=dtype)
    fill = np.cumsum(counts) - counts
    for codes, offsets, data in parts:
        _deal(codes, offsets, data, fill, out_offsets, out_data)
    return counts, out_offsets, out_data


@kernel
def _gather_leads(counts: Any, starts: Any, offsets: Any, data: Any, span: int, shape: Any,
                  split: bool, coords: Any, out: Any) -> None:  # fmt: skip
    n = out.size
    at = 0
    for lead in range(counts.shape[1]):
        for part in range(counts.shape[0]):
            k = starts[part, lead]
            for i in range(k, k + counts[part, lead]):
                out[at] = data[i]
                if split:  # rank 2, one lead per row: the lead and the offset
                    coords[at] = lead
                    coords[n + at] = offsets[i]
                else:
                    _unravel_into(coords, n, at, lead * span + offsets[i], shape)
                at += 1


def gather_leads(
    shape: tuple[int, ...],
    span: int,
    parts: Sequence[tuple[npt.NDArray[np.int64], npt.NDArray[Any], npt.NDArray[Any]]],
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Coordinates ``(ndim, n)`` and values in C order of parts that each hold, lead by lead,
    ``counts[l]`` cells of lead ``l`` at ``offsets`` among its ``span`` cells, with ``data``;
    within a lead, every cell of one part comes before every cell of the next.

    The result is written in order, lead after lead, each part read where it left off: a few
    read streams and one write stream, where laying each part into regions of the result in
    turn writes to every lead's region at once (a cache miss per stretch, a stretch per part
    and lead)."""
    counts = np.stack([np.asarray(p[0], dtype=np.int64) for p in parts])
    sizes = counts.sum(axis=1)
    starts = np.cumsum(counts, axis=1) - counts + (np.cumsum(sizes) - sizes)[:, None]
    n = int(sizes.sum())
    offsets = np.concatenate([p[1] for p in parts])  # one array each: numba's lists compile
    data = np.concatenate([p[2] for p in parts])  # in every process, about 0.8 s
    coords = np.empty(len(shape) * n, dtype=code_dtype(max(shape, default=0)))
    out = np.empty(n, dtype=data.dtype)
    split = len(shape) == 2 and span == shape[1]
    _gather_leads(counts, starts, offsets, data, span, np.asarray(shape, dtype=np.int64), split,
                  coords, out)  # fmt: skip
    return coords.reshape(len(shape), n), out


class Regions:
    """A ``sparse.COO``'s coordinates and values laid down in C order while its cells arrive
    in another: one region per *lead* cell (the output cells raveled over the leading axes,
    ``span`` cells each), sized by a bound on the cells the lead can receive. Cells arrive in C
    order within each lead; at rank 2 they go straight to their lead's region in any
    interleaving of leads (:meth:`place_codes`), otherwise a batch sorted by lead appends a
    stretch to each region in turn (:meth:`place_leads`). :meth:`result` closes the gaps in
    place and gives the unused tail back. Memory: the bound's worth of coordinates and values,
    never a second copy of either.
    """

    def __init__(
        self, shape: tuple[int, ...], span: int, bound: npt.NDArray[np.int64], dtype: Any
    ) -> None:
        self.shape, self.span = shape, span
        self._shape = np.asarray(shape, dtype=np.int64)
        self._split = len(shape) == 2 and span == shape[1]
        self.ends = np.cumsum(bound, dtype=np.int64)
        self.starts = self.ends - bound
        self.fill = self.starts.copy()
        capacity = int(self.ends[-1]) if self.ends.size else 0
        # int32 coordinates when every axis fits: sparse keeps them, and they take half
        self.coords = np.empty(len(shape) * capacity, dtype=code_dtype(max(shape, default=0)))
        self.values = np.empty(capacity, dtype=dtype)

    def place(self, ids: npt.NDArray[np.int64], data: npt.NDArray[Any]) -> None:
        """Append cells ``ids`` (raveled, each lead's in C order) holding ``data``."""
        self.place_cells(ids // self.span, ids % self.span, data)

    def place_cells(
        self, codes: npt.NDArray[Any], offsets: npt.NDArray[Any], data: npt.NDArray[Any]
    ) -> None:
        """Append cells given as each one's lead (``codes``, spent) and offset among the lead's
        cells, each lead's in C order: :meth:`place_codes` at rank 2, else sorted by lead and
        :meth:`place_leads`."""
        if self._split:
            self.place_codes(codes, offsets, data)
            return
        leads = np.bincount(codes, minlength=self.ends.size)
        self.place_leads(leads, *sort_by_code(codes, offsets, data, self.ends.size))

    def place_leads(
        self, leads: npt.NDArray[Any], offsets: npt.NDArray[Any], data: npt.NDArray[Any]
    ) -> None:
        """Append ``leads[l]`` cells to each lead ``l`` in turn: cells at ``offsets`` (among
        the lead's ``span``) holding ``data``. No division per cell at rank 2."""
        bad = _place(
            leads, offsets, data, self.span, self._shape, self._split, self.fill, self.ends,
            self.coords, self.values,
        )  # fmt: skip
        if bad >= 0:
            self._refuse(bad, int(leads[bad]))

    def place_codes(
        self, codes: npt.NDArray[Any], offsets: npt.NDArray[Any], data: npt.NDArray[Any]
    ) -> None:
        """Append cells to their leads, given as each cell's lead (``codes``) and offset, in C order
        within each lead, at rank 2 with one lead per row: each cell straight into its region, in
        the order they come. A counting pass by lead first was slower (docs/benchmarks.md, "Numbers
        behind the code's choices"): the regions' pages are huge ones, so the TLB holds them all,
        and the last line written of each region stays in cache."""
        if not self._split:
            raise ValueError("place_codes lays down rank-2 regions of one row each")
        bad = _place_codes(codes, offsets, data, self.fill, self.ends, self.coords, self.values)
        if bad >= 0:
            self._refuse(bad, int(np.count_nonzero(codes == bad)))

    def prefault(self) -> None:
        """Touch the pages of the lead row, which :meth:`place_codes` leaves for
        :meth:`result` to lay down: on a thread of its own, first-touch page faults (the dearest
        part of writing fresh memory, on a virtual machine above all) overlap the pass instead
        of lengthening its end."""
        if self._split:
            self.coords[: self.values.size] = 0

    def _refuse(self, lead: int, more: int) -> None:
        raise LayoutError(
            f"output lead {lead} receives {int(self.fill[lead] - self.starts[lead])} + "
            f"{more} cells, more than its bound of {int(self.ends[lead] - self.starts[lead])} "
            "allows: the store's layouts disagree on how many values it holds, and the result "
            "would overwrite other cells. Validate the store (`sporadik-dask validate`) and "
            "rewrite it."
        )

    def result(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
        """Coordinates ``(ndim, n)`` and values of every cell placed, in C order; the buffers
        are shrunk in place (they are this object's no longer)."""
        rows = len(self.shape)
        n = _compact(self.coords, self.values, self.starts, self.fill, rows, self._split)
        coords, values = self.coords, self.values
        self.coords, self.values = np.empty(0, np.int64), np.empty(0, values.dtype)
        coords.resize(rows * n, refcheck=False)  # realloc: the tail's pages go back
        values.resize(n, refcheck=False)
        return coords.reshape(rows, n), values
