"""Seeded synthetic single-cell-like counts, as a lazy dask array of sparse.COO chunks.

The input of the demo and of the benchmarks: 300,000 cells x 20,000 genes at ~1.5 % density by
default (~90 M nonzeros), float32 counts >= 1,
gene popularity skewed like real genes (a few in nearly every cell, most rare). Each block of rows
is generated from its own seed inside its task, so the input is lazy and costs no client memory.
"""

from __future__ import annotations

import functools
from typing import Any

import dask
import dask.array as da
import numpy as np
import sparse

from sporadik_dask.read.dask_model import from_delayed

__all__ = ["ROWS_PER_CHUNK", "block", "counts_matrix", "gene_weights"]

#: Cells per dask chunk: one block of rows per task.
ROWS_PER_CHUNK = 10_000


def gene_weights(genes: int, seed: int = 0) -> np.ndarray:
    """Per-gene probability of being detected in a cell: a skewed, Zipf-like profile."""
    rng = np.random.default_rng(seed)
    ranks = rng.permutation(genes) + 1
    weights = 1.0 / ranks**0.9
    scaled: np.ndarray = weights / weights.max()
    return scaled


#: Resolution of the table that maps a uniform draw to a gene (inverse-CDF sampling by lookup).
TABLE_SIZE = 2**20


@functools.lru_cache(maxsize=4)
def _gene_table(genes: int, seed: int) -> np.ndarray:
    weights = gene_weights(genes, seed)
    cdf = np.cumsum(weights / weights.sum())
    quantiles = (np.arange(TABLE_SIZE) + 0.5) / TABLE_SIZE
    return np.minimum(np.searchsorted(cdf, quantiles), genes - 1).astype(np.int64)


def block(index: int, rows: int, genes: int, density: float, seed: int) -> sparse.COO:
    """One block of rows, generated from ``(seed, index)`` alone, in C order."""
    rng = np.random.default_rng([seed, index])
    # Scaled so the expected density, after repeats collapse, is near ``density``.
    per_cell = rng.poisson(density * genes * 1.32, size=rows)
    cells = np.repeat(np.arange(rows, dtype=np.int64), per_cell)
    picked = _gene_table(genes, seed)[rng.integers(0, TABLE_SIZE, size=cells.size)]
    keys = np.sort(cells * genes + picked)
    keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    values = rng.geometric(0.3, size=keys.size).astype(np.float32)
    coords = np.stack(np.divmod(keys, genes))
    return sparse.COO(coords, values, shape=(rows, genes), has_duplicates=False, sorted=True)


def counts_matrix(
    cells: int = 300_000,
    genes: int = 20_000,
    density: float = 0.015,
    seed: int = 0,
    rows_per_chunk: int = ROWS_PER_CHUNK,
) -> da.Array:
    """The lazy input: one task per block of ``rows_per_chunk`` cells."""
    starts = range(0, cells, rows_per_chunk)
    blocks = [
        from_delayed(
            _delayed_block(i, min(rows_per_chunk, cells - start), genes, density, seed),
            (min(rows_per_chunk, cells - start), genes),
            sparse.COO.from_numpy(np.zeros((0, 0), dtype=np.float32)),
        )
        for i, start in enumerate(starts)
    ]
    matrix: da.Array = da.concatenate(blocks, axis=0)
    return matrix


def _delayed_block(index: int, rows: int, genes: int, density: float, seed: int) -> Any:
    return dask.delayed(block, pure=True)(index, rows, genes, density, seed)
