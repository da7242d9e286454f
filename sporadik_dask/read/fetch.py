"""The two read waves: ``indptr`` brackets of the positions asked for, then every run they name.

Each wave is one batch of zarr chunk fetches (every chunk fetched once), so a selection costs two
round trips of latency whatever its size. This is the reader's only I/O besides the statistics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, TypeGuard

import numpy as np
import numpy.typing as npt
import zarr

from sporadik_dask.format.errors import LayoutError
from sporadik_dask.format.spec import check_indices
from sporadik_dask.kernels.runs import ascending, copy_pieces, gather_runs
from sporadik_dask.planning.budgets import BATCH_VALUES
from sporadik_dask.read.routing import (
    Brackets,
    Runs,
    Stretch,
    abutting,
    chunks_of,
    held,
    held_by,
    run_chunks,
)
from sporadik_dask.read.selection import Axis, as_array, distinct
from sporadik_dask.store.chunks import read_joined, read_visited
from sporadik_dask.store.describe import LayoutDescription

__all__ = [
    "fetch_offsets",
    "fetch_runs",
    "fetch_runs_in_place",
    "fetch_values",
]


def _elements(
    table: npt.NDArray[Any],
    ids: npt.NDArray[np.int64],
    chunk: int,
    where: npt.NDArray[np.int64],
) -> npt.NDArray[Any]:
    """Elements ``where`` of an array, from its whole chunks ``ids`` (sorted), joined.

    Element ``e`` sits at (the rank of chunk ``e // chunk`` among ``ids``) * chunk + e % chunk.
    """
    found: npt.NDArray[Any] = table[np.searchsorted(ids, where // chunk) * chunk + where % chunk]
    return found


def fetch_offsets(
    requests: Sequence[tuple[LayoutDescription, zarr.Array[Any], Axis]],
    location: str,
    *,
    next_arrays: Sequence[zarr.Array[Any]] = (),
) -> list[Runs]:
    """Wave one: where each position's run starts and stops, for one or more layouts at once.

    Each request is a layout, its ``indptr`` array and sorted positions; only the ``indptr``
    chunks holding them are read, all requests in one batch. ``next_arrays`` (the layouts'
    ``data`` and ``indices``) have their shard indexes fetched in the same wave when none is
    known yet (:func:`~sporadik_dask.store.chunks.read_joined`), so wave two is ranges alone.
    A ``range`` of step 1 (a region) is its stretch of ``indptr``, sliced, as stored: no array
    of its positions, no gather, no widened copy (:class:`~sporadik_dask.read.routing.Stretch`);
    the first such request's chunks are joined into the calling thread's reused buffer
    (:func:`~sporadik_dask.store.chunks.read_joined`), so its offsets hold until the thread's
    next call: a stretch never leaves the read that asked for it.
    """
    fetches = []
    for layout, indptr, positions in requests:
        chunk = layout.chunks["indptr"]
        if _stretch(positions):
            ids = np.arange(positions.start // chunk, positions.stop // chunk + 1, dtype=np.int64)
        else:
            asked = as_array(positions)
            ids = distinct(np.concatenate([asked // chunk, (asked + 1) // chunk]))
        fetches.append((indptr, ids))
    stretches = [k for k, (_, _, positions) in enumerate(requests) if _stretch(positions)]
    tables = read_joined(
        fetches, next_arrays=next_arrays, reused=stretches[0] if stretches else None
    )
    found: list[Runs] = []
    for (layout, _, positions), (_, ids), table in zip(requests, fetches, tables, strict=True):
        chunk = layout.chunks["indptr"]
        runs: Runs
        if _stretch(positions):  # runs end to end: the offsets never decrease, in bounds
            first = positions.start - int(ids[0]) * chunk if ids.size else 0
            runs = Stretch(table[first : first + len(positions) + 1])
            broken = runs.start < 0 or runs.stop > layout.nnz or not ascending(runs.offsets)
        else:
            asked = as_array(positions)
            lo = _elements(table, ids, chunk, asked).astype(np.int64)
            hi = _elements(table, ids, chunk, asked + 1).astype(np.int64)
            broken = bool(lo.size) and bool(
                lo.min() < 0 or hi.max() > layout.nnz or np.any(hi < lo)
            )
            runs = (lo, hi)
        if broken:
            raise LayoutError(
                f"Layout {layout.path!r} in {location}: indptr names runs outside its "
                f"{layout.nnz} values or running backwards; the layout is corrupt, and "
                "reading on would return values of other cells. Rewrite it (sporadik-dask "
                "validate names the fault)."
            )
        found.append(runs)
    return found


def _stretch(positions: Axis) -> TypeGuard[range]:
    """Whether positions are a non-empty ``range`` of step 1."""
    return isinstance(positions, range) and positions.step == 1 and len(positions) > 0


def fetch_runs(
    layout: LayoutDescription,
    arrays: tuple[zarr.Array[Any], zarr.Array[Any]],
    runs: Runs,
    location: str,
    *,
    check: bool = True,
    stretch: int = BATCH_VALUES,
) -> tuple[npt.NDArray[np.integer[Any]], npt.NDArray[Any]]:
    """Wave two: the indices (in their stored integer dtype) and values of every run,
    concatenated in the order asked.

    ``arrays`` are the layout's ``indices`` and ``data``; every zarr chunk the runs touch
    (:func:`~sporadik_dask.read.routing.chunks_of`, what routing counted) is fetched once,
    both arrays in one batch. Indices are checked against the layout's extent unless ``check``
    is False, for a caller that checks each index as it uses it (a pass over them fewer).
    Runs are fetched in batches starting within one ``stretch`` of elements (:func:`_take_runs`).
    """
    if held_by(runs) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=layout.dtype)
    indices, data = _take_runs(
        layout, dict(zip(("indices", "data"), arrays, strict=True)), runs, stretch
    )
    if check:
        check_indices(indices, layout.extent, f"Layout {layout.path!r} in {location}")
    return indices, data


def fetch_values(
    layout: LayoutDescription, data: zarr.Array[Any], brackets: Brackets
) -> npt.NDArray[Any]:
    """Wave two without the indices: the values of every run, for what needs no coordinate
    but the run's own (a reduction keeping only the indexed axis): half the chunks."""
    if held(*brackets) == 0:
        return np.zeros(0, dtype=layout.dtype)
    (values,) = _take_runs(layout, {"data": data}, brackets)
    return values


def _take_runs(
    layout: LayoutDescription,
    arrays: dict[str, zarr.Array[Any]],
    runs: Runs,
    stretch: int = BATCH_VALUES,
) -> list[npt.NDArray[Any]]:
    """The elements of every run of each array, fetching each chunk they touch once (a chunk
    two batches share, twice).

    1. One range of elements over consecutive chunks: the joined chunks, sliced; no gather.
    2. Otherwise the runs, in the order of their starts, in batches starting within one
       ``stretch`` of elements (:data:`~sporadik_dask.planning.budgets.BATCH_VALUES`): each
       batch's chunks fetched and joined, each run copied to its place in the result. Only a
       batch's chunks are held beside the result, where every chunk touched was: scattered
       positions touch every chunk of a store, many times the bytes of their runs
       (docs/benchmarks.md, "Numbers behind the code's choices").
    """
    total = held_by(runs)
    if isinstance(runs, Stretch) or abutting(*runs):
        begin = runs.start if isinstance(runs, Stretch) else int(runs[0][0])
        fetches = [(a, chunks_of(runs, layout.chunks[name])) for name, a in arrays.items()]
        taken = []
        for (array, ids), table in zip(fetches, read_joined(fetches), strict=True):
            first = begin - int(ids[0]) * int(array.chunks[0])
            taken.append(table[first : first + total])
        return taken
    lo, hi = runs
    counts = hi - lo
    at = np.cumsum(counts) - counts  # each run's place in the result
    order = np.argsort(lo, kind="stable")
    within = lo[order] // stretch
    cuts = np.flatnonzero(within[1:] != within[:-1]) + 1
    results: list[npt.NDArray[Any]] = []
    for batch in np.split(order, cuts):
        if int(counts[batch].sum()) == 0:
            continue
        blo, bhi = lo[batch], hi[batch]
        fetches = [(a, run_chunks(blo, bhi, layout.chunks[name])) for name, a in arrays.items()]
        for k, ((array, ids), table) in enumerate(zip(fetches, read_joined(fetches), strict=True)):
            if k == len(results):
                results.append(np.empty(total, dtype=table.dtype))
            chunk = int(array.chunks[0])
            # A run's chunks are consecutive in ``ids`` (every chunk it touches was fetched),
            # so each run is one contiguous stretch of ``table``: locate runs, not values.
            start = np.searchsorted(ids, blo // chunk) * chunk + blo % chunk
            gather_runs(table, start, counts[batch], results[k], at[batch])
    return results


class _Pieces(NamedTuple):
    """The runs' parts inside each zarr chunk of one array: chunk ``ids[k]`` holds the pieces
    ``bounds[k]:bounds[k + 1]``, each ``[starts, stops)`` of the chunk going to ``places`` on."""

    ids: npt.NDArray[np.int64]
    bounds: npt.NDArray[np.int64]
    starts: npt.NDArray[np.int64]
    stops: npt.NDArray[np.int64]
    places: npt.NDArray[np.int64]


def _pieces(brackets: Brackets, places: npt.NDArray[np.int64], chunk: int) -> _Pieces:
    """Each run ``[lo, hi)`` going to ``places``, cut at the boundaries of ``chunk`` elements and
    grouped by chunk (a run's pieces in order)."""
    lo, hi = brackets
    live = hi > lo
    lo, hi, places = lo[live], hi[live], places[live]
    first = lo // chunk
    spans = (hi - 1) // chunk - first + 1
    run = np.repeat(np.arange(lo.size, dtype=np.int64), spans)
    ids = (
        first[run]
        + np.arange(run.size, dtype=np.int64)
        - np.repeat(np.cumsum(spans) - spans, spans)
    )
    begin = np.maximum(lo[run], ids * chunk)
    end = np.minimum(hi[run], (ids + 1) * chunk)
    at = places[run] + begin - lo[run]
    if ids.size > 1 and not bool(np.all(ids[1:] >= ids[:-1])):
        order = np.argsort(ids, kind="stable")
        ids, begin, end, at = ids[order], begin[order], end[order], at[order]
    new = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1]))) if ids.size else ids
    bounds = np.append(new, ids.size).astype(np.int64)
    base = ids * chunk
    return _Pieces(ids[new], bounds, begin - base, end - base, at)


def fetch_runs_in_place(
    layout: LayoutDescription,
    arrays: tuple[zarr.Array[Any], zarr.Array[Any]],
    brackets: Brackets,
    location: str,
) -> tuple[npt.NDArray[np.integer[Any]], npt.NDArray[Any]]:
    """Wave two for runs in any order, repeats allowed: the indices (stored dtype, checked) and
    values of run after run, as :func:`fetch_runs` gives them, holding only what is taken.

    :func:`fetch_runs` joins every chunk the runs touch and gathers from the join: for runs
    scattered over many chunks (random cells, a few values each of 128 KB chunks) the join is
    most of the read's memory and a second copy. Here each chunk is decoded by a thread into a
    chunk it reuses, and the pieces of runs it holds are copied straight into their places in
    the result (:func:`~sporadik_dask.store.chunks.read_visited`); each chunk is still fetched
    and decoded once, however many runs it serves.
    """
    counts = brackets[1] - brackets[0]
    places = np.cumsum(counts) - counts
    total = int(counts.sum())
    outs = [np.empty(total, dtype=array.dtype) for array in arrays]
    if total == 0:
        return outs[0], outs[1]
    cuts = [_pieces(brackets, places, layout.chunks[name]) for name in ("indices", "data")]

    def visit(request: int, k: int, values: npt.NDArray[Any]) -> None:
        cut = cuts[request]
        b0, b1 = int(cut.bounds[k]), int(cut.bounds[k + 1])
        copy_pieces(values, cut.starts[b0:b1], cut.stops[b0:b1], cut.places[b0:b1], outs[request])

    read_visited([(array, cut.ids) for array, cut in zip(arrays, cuts, strict=True)], visit)
    check_indices(outs[0], layout.extent, f"Layout {layout.path!r} in {location}")
    return outs[0], outs[1]
