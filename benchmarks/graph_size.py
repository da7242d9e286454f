"""The size of the graph a write of 1x, 2x, 4x, 8x the benchmark data sends from the client.

    .venv/bin/python benchmarks/graph_size.py --factors 1 2 4 8

Builds each write without computing anything: no value is generated or read. The count pass is
replaced by each gene's expected count under ``sporadik_dask.synthetic``'s generator (cells' counts
even), which is what the plan's partitions and regions follow from; the arrays are created empty
in a memory store. The size is measured as ``distributed`` measures it before its "Sending large
graph" warning: the serialized expression ``dask.compute`` hands to the scheduler.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import numpy.typing as npt

#: Cells of the benchmark data at 1x (``benchmarks/scaling.py``).
CELLS = 300_000


def expected_counts(
    cells: int, genes: int = 20_000, density: float = 0.015, seed: int = 0
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Values per cell and per gene that ``synthetic.counts_matrix`` draws, on average.

    A cell draws Poisson(``density * genes * 1.32``) genes from the lookup table, so gene ``g``
    is in it with probability ``1 - exp(-lam * p_g)`` after repeats collapse.
    """
    from sporadik_dask.synthetic import TABLE_SIZE, _gene_table

    table = _gene_table(genes, seed)
    share = np.bincount(table, minlength=genes) / TABLE_SIZE
    present = -np.expm1(-density * genes * 1.32 * share)
    per_gene = np.rint(cells * present).astype(np.int64)
    nnz = int(per_gene.sum())
    per_cell = np.full(cells, nnz // cells, dtype=np.int64)
    per_cell[: nnz - int(per_cell.sum())] += 1
    return per_cell, per_gene


def serialized_bytes(collection: Any) -> int:
    """Bytes of the expression ``dask.compute(collection)`` sends to a distributed scheduler."""
    from dask._expr import FinalizeCompute
    from dask.base import collections_to_expr
    from distributed.protocol.serialize import Serialized, serialize, to_serialize
    from distributed.utils import nbytes

    expr = FinalizeCompute(collections_to_expr([collection], True)).optimize()
    sent = Serialized(*serialize(to_serialize(expr), on_error="raise"))
    return sum(map(nbytes, [sent.header, *sent.frames]))


def measure(factor: int) -> dict[str, Any]:
    """Build (not compute) the write of ``factor`` times the benchmark data; its graph's size."""
    import zarr
    from zarr.storage import MemoryStore

    from sporadik_dask.planning.budgets import partition_values
    from sporadik_dask.planning.plan import plan_layout
    from sporadik_dask.synthetic import counts_matrix
    from sporadik_dask.write.array_refs import ArrayRef
    from sporadik_dask.write.graph import write_graph
    from sporadik_dask.write.piece_graphs import pieces_of_blocks
    from sporadik_dask.write.skeleton import create_layout
    from sporadik_dask.write.store_write import StoreWrite

    started = time.perf_counter()
    x = counts_matrix(cells=CELLS * factor)
    counts = expected_counts(x.shape[0], x.shape[1])
    target = partition_values(x.dtype, None)
    plans = {
        axis: plan_layout(
            x.shape, axis, (1 - axis,), counts[axis], x.dtype, partition_values=target
        )
        for axis in (0, 1)
    }
    layouts = zarr.open_group(MemoryStore(), mode="w", zarr_format=3).create_group("layouts")
    made = {axis: create_layout(layouts, plan, False, "zstd") for axis, plan in plans.items()}
    arrays = {axis: {name: ArrayRef.of(a) for name, a in m.items()} for axis, m in made.items()}
    graph, keys, _ = write_graph(pieces_of_blocks(x), plans, arrays)
    write = StoreWrite(graph, keys, layouts.store, None, "memory")  # type: ignore[arg-type]
    size = serialized_bytes(write.written())  # before anything here reads the layers
    tasks = len(dict(graph))
    return {
        "factor": factor,
        "nnz": int(counts[1].sum()),
        "pieces": x.numblocks[0],
        "partitions": {axis: plan.partitions for axis, plan in plans.items()},
        "tasks": tasks,
        "graph_mib": size / 2**20,
        "build_s": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--factors", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()
    print("| factor | nonzeros | pieces | partitions (axis 0, 1) | tasks | graph MiB |")
    print("|---|---|---|---|---|---|")
    for factor in args.factors:
        r = measure(factor)
        parts = ", ".join(str(n) for n in r["partitions"].values())
        print(
            f"| {r['factor']}x | {r['nnz']:,} | {r['pieces']} | {parts} | {r['tasks']:,} | "
            f"{r['graph_mib']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
