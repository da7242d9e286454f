"""A ``sparse.COO`` sent between processes keeps its fill value.

distributed's serializer of ``sparse.COO`` (``distributed/protocol/sparse.py``) sends its
coordinates, values and shape, and the receiver makes a ``sparse.COO`` of fill 0: a block of
``X.where(X > 0)`` (absent cells NaN) comes back from a worker with 0 where NaN was, a wrong
answer with no error, and blocks of both fills then fail to join (``sparse.concatenate``). So
this registers, through distributed's dispatch (its plug-in point for a type's serialization),
a serializer that hands a block of fill 0 to distributed's own, byte for byte, and refuses any
other, which distributed then sends by pickle, fill value and all. The receiver needs nothing of
this package: pickle is understood everywhere.

Registered in each process that reads a store once ``distributed`` is imported (a worker
unpickling a read task; a client opening a store): :func:`keep_fill_values_in_transit`. It acts
for every ``sparse.COO`` of the process, not only the store's, and changes only what was lost.
``dask.config`` ``sporadik.patches: False`` hands every block to distributed's own serializer.
``tests/read/test_transport.py`` fails once distributed's own keeps the fill value, so this can go
(docs/upstream.md).
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["keep_fill_values_in_transit"]


def keep_fill_values_in_transit() -> bool:
    """Register the serializer of ``sparse.COO`` that keeps a fill value other than 0, in this
    process, when ``distributed`` is imported; idempotent. Whether it is registered."""
    if "distributed" not in sys.modules:  # nothing is sent between processes yet
        return False
    import sparse
    from distributed.protocol import sparse as distributed_sparse
    from distributed.protocol.serialize import dask_serialize

    theirs = distributed_sparse.serialize_sparse  # imported: distributed's own is registered

    def serialize_keeping_fill(x: Any) -> tuple[dict[str, Any], list[Any]]:
        import dask.config

        if dask.config.get("sporadik.patches", True) and not _zero(x.fill_value):
            raise NotImplementedError("distributed's serializer drops a fill value: pickle it")
        header, frames = theirs(x)
        return header, frames

    serialize_keeping_fill.keeps_fill = True  # type: ignore[attr-defined]
    if not getattr(dask_serialize.dispatch(sparse.COO), "keeps_fill", False):
        dask_serialize.register(sparse.COO)(serialize_keeping_fill)
    return True


def _zero(fill: Any) -> bool:
    """Whether ``fill`` is the 0 distributed's deserializer gives back (not -0.0, not NaN, not a
    value numpy cannot compare with 0: those go by pickle, which keeps anything)."""
    import numpy as np

    try:
        return bool(np.ndim(fill) == 0 and fill == 0 and not np.signbit(np.real(fill)))
    except (TypeError, ValueError):
        return False
