"""How big each piece of work is: read blocks, write partitions, and the batches of a pass.

Every size the package picks by itself is set here, so one file answers "why is this block this
big". Read blocks are sized by what they hold in memory as ``sparse.COO`` (the values plus one
int64 coordinate per axis each), not by the cells they span: a single-cell matrix is 99 % zeros,
and dask's own ``"auto"`` (dense bytes) would cut it into blocks of a few MB of values across
both axes. The measurements behind each default are in docs/benchmarks.md, "How the budgets were
chosen".
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from sporadik_dask.planning.plan import LayoutPlan
    from sporadik_dask.store.describe import LayoutDescription

__all__ = [
    "BATCH_BYTES",
    "BATCH_VALUES",
    "BLOCKS_PER_CORE",
    "BRACKET_POSITIONS",
    "CHUNKS_AT_ONCE",
    "DENSE_POSITIONS",
    "ESTIMATE_HEADROOM",
    "GROUP_TABLE_BYTES",
    "MIN_BLOCK_BYTES",
    "PARTITION_BYTES",
    "SELECTION_READ_VALUES",
    "SPARSE_BATCH_CELLS",
    "TOTALS_BATCH",
    "WINDOW_VALUES",
    "balanced_blocks",
    "batches_per_window",
    "block_count",
    "block_values",
    "partition_values",
    "positions_per_block",
    "sparse_bytes_per_value",
]

#: Blocks per core a read is cut into when the store is big enough, so every core has work and
#: a slow block does not leave the others idle: more than one block gained up to 1.4x, 2 to 16
#: differed by less than the noise, and four a core bounds the tail a skewed block leaves
#: (docs/benchmarks.md, "How the budgets were chosen").
BLOCKS_PER_CORE = 4

#: The smallest read block, in sparse bytes, whatever the core count, so per-task overhead
#: (2-3 ms a block) stays small beside the block's work (docs/benchmarks.md, "How the budgets
#: were chosen").
MIN_BLOCK_BYTES = 4 * 2**20

#: Bytes a write partition's sort may hold (positions, indices and values together): a sort
#: task then peaks near 0.4 GB, so two threads and their inputs fit under 1.5 GB.
PARTITION_BYTES = 2**27

#: Bytes of dense partial results a chunked reduction may hold at once: each span of a dense
#: grouped reduction fills fields of the whole result, and their merge holds every span's
#: (docs/benchmarks.md, "How the budgets were chosen").
DENSE_PARTIALS_BYTES = 2**30

#: Positions a read brackets in one layout (16 bytes each, 256 MiB): a selection narrowing an
#: axis by fewer (a region of 2**31 positions of a genome, say) reads through another layout,
#: whose runs cost what its values hold, when one is bracketed in fewer.
BRACKET_POSITIONS = 2**24

#: Positions a write partition's sort counts in arrays as long as its span (24 bytes each), when
#: it holds fewer values than that; past it, only the positions holding values are counted.
DENSE_POSITIONS = 2**20

#: Chunks of ``data`` :func:`~sporadik_dask.read.statistics.totals` decodes at a time (2 Mi
#: values at 128 KB chunks).
TOTALS_BATCH = 64

#: Zarr chunks :func:`~sporadik_dask.read.validate.validate` decodes per batch: memory stays at a
#: few tens of MB.
CHUNKS_AT_ONCE = 64

#: Values :func:`~sporadik_dask.reduce.store.reduce_store` reads per batch of runs: a few tens
#: of MB with their coordinates.
BATCH_VALUES = 2**21

#: Bytes of values and indices a batch of a reduction's pass holds (2 Mi float32 values alone):
#: a pass that needs each value's index (a filter, a group per index) takes half the values per
#: batch of one that needs only the runs, so a filtered reduction holds what the unfiltered one
#: does.
BATCH_BYTES = 2**23

#: Bytes of int64 up to which the positions a selection picked for a reduction's pass are made a
#: table of every position's group, as a groupby's codes are, which the pass's kernels look up: a
#: cell mask's sum over 40,000 x 2,000 (3.2 M values) traced 13.4 MB with the table, 45.0 MB
#: with a binary search per value, so a table is the lighter up to about 32 MB. Past it the
#: kernels look positions up in windows of the table, of at most this many bytes of narrowed
#: codes each (``reduce/codes.py``): a half mask's sum over 5 M cells x 200 genes (55.8 M values)
#: took 1.07 CPU s and traced 87 MiB with windows, 1.11 s and 126 MiB with the table (the same
#: tree), where a binary search per value outside the kernel took 3.7 CPU s more than the table
#: (docs/benchmarks.md, "A cell mask's sums over 5 M cells"). Only a batch whose picked positions
#: span more than a window (a genome's) has each value's group found on its own.
GROUP_TABLE_BYTES = 2**25

#: Values (estimated) under which a lazy selection is read, then reduced, rather than reduced in
#: the store's pass: reading holds about what a batch of the pass holds, and reads only the
#: selection.
SELECTION_READ_VALUES = BATCH_VALUES

#: Cells of the accumulator a sum or mean with a sparse result adds each run into (64 MiB of
#: float64): a run of an ungrouped kept axis reaches only its own position's output cells, so
#: adding it into a reused dense row replaces a sort of its values. Past it, runs are sorted.
SPARSE_BATCH_CELLS = 2**23

#: The share of ``array.chunk-size`` a block sized from a layout's mean values per position aims
#: at, so positions denser than the mean do not push it over: blocks of 1,000+ positions with
#: Poisson counts stray by about 1 % from the mean, skewed ones by more.
ESTIMATE_HEADROOM = 0.8

#: Values a minibatch window (its batches, read together) aims at: every zarr chunk the window's
#: positions touch is decoded once for all its batches, so a bigger window decodes fewer chunks
#: per batch, and the loader holds its prefetch depth plus one of them (128 MiB each, of float32
#: and int32). An epoch of uniform batches of 100,000 cells (30 M values) took a third less CPU
#: time in windows of 16 Mi values than of 8 Mi (docs/benchmarks.md, "Minibatches for training").
WINDOW_VALUES = 2**24

#: Bytes of one coordinate of one value in a ``sparse.COO`` (int64).
COORDINATE_BYTES = 8


def sparse_bytes_per_value(dtype: np.dtype[Any], rank: int) -> int:
    """What one value costs in a ``sparse.COO`` block: itself and a coordinate per axis."""
    return int(np.dtype(dtype).itemsize) + COORDINATE_BYTES * rank


def _chunk_size_bytes() -> int:
    import dask.config
    from dask.utils import parse_bytes

    return int(parse_bytes(dask.config.get("array.chunk-size")))


def _cores() -> int:
    from dask.system import CPU_COUNT

    return max(int(CPU_COUNT), 1)


def block_count(nnz: int, dtype: np.dtype[Any], rank: int, *, headroom: float = 1.0) -> int:
    """How many read blocks ``nnz`` values make: enough to keep every core busy, none too small
    or too big.

    1. Aim for :data:`BLOCKS_PER_CORE` blocks per core of ``dask.system.CPU_COUNT``.
    2. Fewer if blocks would hold under :data:`MIN_BLOCK_BYTES` of sparse bytes (a small store is
       one block).
    3. More if blocks would hold over ``headroom`` of dask's ``array.chunk-size`` in sparse
       bytes; this wins over step 2.
    """
    per_value = sparse_bytes_per_value(dtype, rank)
    most = max(int(_chunk_size_bytes() * headroom) // per_value, 1)
    least = min(max(MIN_BLOCK_BYTES // per_value, 1), most)
    wanted = min(BLOCKS_PER_CORE * _cores(), nnz // least)
    return max(wanted, math.ceil(nnz / most), 1)


def block_values(nnz: int, dtype: np.dtype[Any], rank: int, *, headroom: float = 1.0) -> int:
    """Values per read block: ``nnz`` shared evenly by :func:`block_count` blocks."""
    return max(math.ceil(nnz / block_count(nnz, dtype, rank, headroom=headroom)), 1)


def positions_per_block(layout: LayoutDescription) -> int:
    """Positions along ``layout``'s indexed axis per read block, from its description alone.

    Opening a store reads metadata documents only, so this assumes the layout's mean values per
    position, with :data:`ESTIMATE_HEADROOM`; :func:`balanced_blocks` cuts by the real counts
    when ``indptr`` is at hand.
    """
    positions = max(layout.positions, 1)
    per_position = max(layout.nnz / positions, 1.0)
    rank = len(layout.shape)
    values = block_values(layout.nnz, layout.dtype, rank, headroom=ESTIMATE_HEADROOM)
    return int(min(max(values // per_position, 1), positions))


def balanced_blocks(layout: LayoutDescription, indptr: npt.NDArray[np.int64]) -> tuple[int, ...]:
    """Block sizes along ``layout``'s indexed axis, cut where ``indptr`` says the values fall.

    Each block holds :func:`block_values` values give or take a position; a single position
    holding more is a block of its own.
    """
    from sporadik_dask.planning.plan import partition_bounds

    bounds = partition_bounds(indptr, block_values(layout.nnz, layout.dtype, len(layout.shape)))
    return tuple(np.diff(bounds).tolist()) or (0,)


#: Bytes of shuffle parts a layout's write may hold on a local scheduler before its parts go to
#: disk (:mod:`sporadik_dask.write.spill`); ``dask.config`` ``sporadik.spill-bytes`` overrides it. A
#: float32 layout of 22 M values, with int32 positions and indices.
SPILL_BYTES = 2**28


def held_pieces(plan: LayoutPlan, pieces: int) -> int:
    """How many of a layout's pieces, first to last, keep their shuffle parts in memory when a
    local scheduler runs its write; the parts of the pieces after them go to disk.

    A partition's parts wait until the last piece it gathers from is split, so a layout holds
    about its parts' bytes times the share of the pieces a partition gathers from: all of them
    for the CSC layout of row blocks, a few for its CSR layout, whose partitions dask sorts as
    their pieces are split. The first pieces keep their parts in memory while what waits stays
    within ``sporadik.spill-bytes`` (:data:`SPILL_BYTES`; 0 spills every piece of a layout with
    values, a negative value none), each taken to hold its share of the values; only what is
    past the budget spills, so the budget is used rather than spent on nothing (what spilling
    costs and saves: docs/benchmarks.md, "How the budgets were chosen").
    """
    import dask.config

    budget = int(dask.config.get("sporadik.spill-bytes", SPILL_BYTES))
    if budget < 0 or not plan.partitions or not pieces or not plan.nnz:
        return pieces
    part = 2 * plan.index_dtype.itemsize + plan.dtype.itemsize
    share = sum(map(len, plan.for_write().sources(pieces))) / (plan.partitions * pieces)
    waiting = plan.nnz * part * share
    return pieces if waiting <= budget else int(pieces * budget // waiting)


def partition_values(dtype: np.dtype[Any], partition_bytes: int | None) -> int:
    """Values a write partition holds: ``partition_bytes``, else ``sporadik.partition-bytes``
    in ``dask.config``, else :data:`PARTITION_BYTES`, at 16 bytes of keys per value."""
    import dask.config

    budget = partition_bytes or int(dask.config.get("sporadik.partition-bytes", PARTITION_BYTES))
    return max(budget // (16 + np.dtype(dtype).itemsize), 1)


def batches_per_window(batch_size: int, values: int, positions: int) -> int:
    """Batches of ``batch_size`` positions read together, so a window holds about
    :data:`WINDOW_VALUES` of a layout's ``values`` over its ``positions`` (at least one batch)."""
    per_batch = batch_size * values / max(positions, 1)
    return max(1, int(WINDOW_VALUES // max(per_batch, 1.0)))
