"""The pieces the count pass read, persisted on a cluster's workers for the write to take.

A file a worker of one host writes is not there for the worker of another host that splits the
piece, so on such a cluster the pieces are kept as ``persist`` keeps any result: each stays on
the worker that read it, which spills it to its own local disk under memory pressure and sends
it to the worker that splits it; should that worker be lost, the scheduler reads the piece again
from the input by its lineage. Each is kept as a file keeps it
(:func:`~sporadik_dask.write.kept.narrowed`: int32 coordinates where they fit, 12 bytes a
float32 value of a rank-2 array rather than 20). The count pass reads the pieces it persists; the
write's tasks name the persisted keys, whose futures the client holds until the write commits or
fails, or a pending write is dropped (:func:`let_go`), and the scheduler then forgets them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dask.base import tokenize
from dask.delayed import Delayed

from sporadik_dask.reduce.graph import Layer
from sporadik_dask.write import spill
from sporadik_dask.write.counting import Tally
from sporadik_dask.write.kept import narrowed
from sporadik_dask.write.piece_graphs import Pieces
from sporadik_dask.write.shuffle import extend

__all__ = ["count_and_persist", "let_go", "release"]


def count_and_persist(count: Delayed, pieces: Pieces, client: Any) -> tuple[Tally, tuple[Any, ...]]:
    """Compute the count pass ``count`` over ``pieces`` on ``client``'s workers, which keep every
    piece it read, narrowed: its :class:`~sporadik_dask.write.counting.Tally`, and a future per
    piece.

    One graph, submitted once: each piece is read by its own task, counted, narrowed and kept
    where it was read. A count pass that fails lets go of every piece.
    """
    name = f"sporadik-narrowed-{tokenize(pieces.keys)}"
    layer: Layer = {(name, i): (narrowed, key) for i, key in enumerate(pieces.keys)}
    graph = extend(count.dask, name, layer)
    futures = client.get(graph, [count.key, *layer], sync=False)
    try:
        tally: Tally = futures[0].result()
    except BaseException:
        release(futures)
        raise
    return tally, tuple(futures[1:])


def release(futures: Sequence[Any]) -> None:
    """Let go of ``futures``: the scheduler forgets each piece no other future or task wants."""
    for future in futures:
        future.release()


def let_go(pieces: Pieces) -> None:
    """Remove the directories of the pieces kept on disk; release those persisted on workers."""
    spill.remove(pieces.kept)
    release(pieces.persisted)
