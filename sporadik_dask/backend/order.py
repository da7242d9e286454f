"""``quantile``, ``median``, ``argmax`` and ``argmin`` of sporadik variables, from the stored
values; ``cumsum`` and ``cumprod`` refused in words that say what to do.

xarray hands a quantile to numpy's ``nanquantile``, a median to ``nanmedian`` and a position to
``nanargmax``, which ``sparse`` does not implement, and under dask sorts each line's blocks
densely, which ``sparse``'s blocks refuse. A line's quantile is an order statistic of its stored
values and its absent zeros, and its extreme's position is a stored value's or its first absent
cell's: answered here per batch of a layout's runs (:mod:`~sporadik_dask.reduce.quantiles`).
``Variable.quantile`` is wrapped (installed by :mod:`~sporadik_dask.backend.patches`); the rest
come through ``Variable.reduce`` (:mod:`~sporadik_dask.backend.pushdown`). Every other variable
goes to xarray unchanged.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from sporadik_dask.backend.array import backend_under, read_not_kept
from sporadik_dask.backend.ours import is_read_dask, is_sporadik_variable
from sporadik_dask.format.errors import SporadikError
from sporadik_dask.reduce.quantiles import (
    Ordered,
    Position,
    Statistic,
    order_blocks,
    order_coo,
    order_store,
    order_store_dask,
    store_layout,
)

__all__ = [
    "DenseResultError",
    "order_data",
    "positions_of",
    "quantile_pushing_down",
    "refuse_dense",
]


class DenseResultError(SporadikError, TypeError):
    """An operation of a store's variable that its stored values alone cannot answer."""


#: Why each refused reduction's answer is not computed from the stored values (``argmax`` and
#: ``argmin`` along one dim or all are: :func:`positions_of`).
_REFUSED = {
    "cumsum": "a running sum is dense (every cell after a line's first value is set), and "
    "sparse arrays have no cumsum",
    "cumprod": "a running product is dense (every cell before a line's first zero is set), and "
    "sparse arrays have no cumprod",
}


def refuse_dense(variable: Any, func: Callable[..., Any], dim: Any) -> None:
    """Raise :class:`DenseResultError` for a refused reduction of a store's variable, naming the
    dense selection to take first; nothing for any other."""
    from xarray.core import duck_array_ops

    found = next((n for n in _REFUSED if func is getattr(duck_array_ops, n, None)), None)
    if found is None or isinstance(variable._data, np.ndarray):  # made dense: numpy's to do
        return
    if not is_sporadik_variable(variable):
        return
    along = f"({dim!r})" if dim is not None else "()"
    raise DenseResultError(
        f"{found} along {dim!r} of a sporadik variable of shape {variable.shape}: "
        f"{_REFUSED[found]}. Select what fits in memory and make it dense first: "
        f"`X.isel(...).as_numpy().{found}{along}`."
    )


def positions_of(
    variable: Any, func: Callable[..., Any], axes: tuple[int, ...] | None, kwargs: dict[str, Any]
) -> Any:
    """``argmax`` or ``argmin`` of a store's variable along one axis ``axes`` or all (numpy's
    flat position), from the stored values and their positions
    (:class:`~sporadik_dask.reduce.quantiles.Position`); None for any other reduction, some
    axes but not all, or data held as anything but sparse."""
    import dask
    from xarray.core import duck_array_ops

    largest = {duck_array_ops.argmax: True, duck_array_ops.argmin: False}.get(func)
    extra = set(kwargs) - {"skipna"}
    if largest is None or axes is None or extra or len(axes) not in (1, variable.ndim):
        return None
    if not dask.config.get("sporadik.pushdown", True) or variable.dtype.kind not in "biuf":
        return None
    skipna = kwargs.get("skipna")
    if skipna is None:
        skipna = variable.dtype.kind in "cfO"
    kept = tuple(a for a in range(variable.ndim) if a not in axes)
    return order_data(variable, kept, Position(largest, bool(skipna)))


def quantile_pushing_down(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Variable.quantile``, computed from the store for a sporadik variable."""

    @functools.wraps(original)
    def quantile(
        self: Any,
        q: Any,
        dim: Any = None,
        method: str = "linear",
        keep_attrs: bool | None = None,
        skipna: bool | None = None,
        interpolation: str | None = None,
    ) -> Any:
        import dask

        if (
            interpolation is not None
            or not dask.config.get("sporadik.pushdown", True)
            or isinstance(self._data, np.ndarray)  # made dense: numpy's to do
            or not is_sporadik_variable(self)
        ):
            return original(self, q, dim, method, keep_attrs, skipna, interpolation)
        if self.size == 0:  # xarray's answer (or error): no value to pick
            from xarray.core.variable import Variable

            empty = Variable(self.dims, np.zeros(self.shape, self.dtype), self.attrs)
            return original(empty, q, dim, method, keep_attrs, skipna, interpolation)
        dims = _dims(self, dim)
        if dims is None or self.dtype.kind not in "biuf":
            return original(self, q, dim, method, keep_attrs, skipna, interpolation)
        if method != "linear":
            raise DenseResultError(
                f"quantile method {method!r} of a sporadik variable: only numpy's default, "
                f"'linear', is computed from the stored values. Use method='linear', or select "
                f"what fits in memory and make it dense first: `X.isel(...).as_numpy()`."
            )
        scalar = np.ndim(q) == 0
        quantiles = np.atleast_1d(np.asarray(q, dtype=np.float64))
        if quantiles.ndim != 1 or not np.all((quantiles >= 0) & (quantiles <= 1)):
            raise ValueError("Quantiles must be in the range [0, 1]")  # numpy's words
        if skipna is None:
            skipna = self.dtype.kind in "cfO"
        statistic = Statistic(tuple(quantiles.tolist()), bool(skipna))
        kept = tuple(a for a, d in enumerate(self.dims) if d not in dims)
        data = order_data(self, kept, statistic)
        if data is None:
            return original(self, q, dim, method, keep_attrs, skipna, interpolation)
        return _variable(self, kept, data, keep_attrs, scalar)

    return quantile


def _dims(variable: Any, dim: Any) -> set[Hashable] | None:
    """The dims reduced, or None for a dim the variable lacks (xarray raises its own error)."""
    if dim is None or dim is ...:
        return set(variable.dims)
    dims = [dim] if isinstance(dim, str) or not np.iterable(dim) else list(dim)
    return set(dims) if all(d in variable.dims for d in dims) else None


def _variable(
    variable: Any, kept: tuple[int, ...], data: Any, keep_attrs: bool | None, scalar: bool
) -> Any:
    """The quantiles as xarray's ``Variable.quantile`` gives them: ``quantile`` first, dropped
    for a scalar ``q``."""
    from xarray.core.options import _get_keep_attrs
    from xarray.core.variable import Variable

    from sporadik_dask.backend.chunkmanager import plain_dask_array

    result = Variable(("quantile", *(variable.dims[a] for a in kept)), plain_dask_array(data))
    if scalar:
        result = result.squeeze("quantile")
    keep = _get_keep_attrs(default=True) if keep_attrs is None else keep_attrs
    if keep:
        result.attrs = variable.attrs
    return result


def order_data(variable: Any, kept: Sequence[int], statistic: Ordered) -> Any:
    """``statistic`` of each line of a sporadik variable along its axes ``kept``, shape
    ``(*lead, *kept shape)``: numpy lazily or loaded, dask under ``chunks=``; None for data
    held as anything but ``sparse.COO``.

    1. Chunked, a plain read of the whole store, one kept axis with a layout (or none): one task
       per span of the layout's runs. Any other dask array (a selection, elementwise steps):
       its blocks joined along the reduced axes, then answered block by block.
    2. Lazily, the whole store as opened: one pass over the layout's runs.
    3. Lazily a selection, or a transposed view, or loaded: the ``sparse.COO`` read (the
       selection only), not kept.
    """
    from sporadik_dask.read import StoreReader
    from sporadik_dask.read.blocks import reader_of

    _refuse_long(variable, kept, statistic)
    held = variable._data
    if hasattr(held, "dask") and hasattr(held, "chunks"):
        source = reader_of(held) if is_read_dask(held) else None
        if isinstance(source, StoreReader) and store_layout(source, kept, statistic) is not None:
            return order_store_dask(source, kept, statistic, math.prod(held.numblocks))
        return order_blocks(held, kept, statistic)
    beneath = backend_under(held)
    backend = beneath.backend
    if backend is not None and beneath.whole and beneath.axes == tuple(range(variable.ndim)):
        reader = backend.reader
        if store_layout(reader, kept, statistic) is not None:
            return order_store(reader, kept, statistic)
    selected = read_not_kept(held) if backend is not None else variable.data
    if not hasattr(selected, "coords"):
        return None  # held as another array: xarray's own
    return order_coo(selected, kept, statistic)


def _refuse_long(variable: Any, kept: Sequence[int], statistic: Ordered) -> None:
    """Refuse a statistic whose answer, dense, has more cells than ``sporadik.max-positions``:
    one per position of a genome-length axis is tens of GiB, which would fail deep in a read
    or in numpy, where a selection of the stretch wanted reads only its values."""
    from sporadik_dask.store.describe import max_positions

    limit = max_positions()
    cells = math.prod(variable.shape[a] for a in kept) * math.prod(statistic.lead())
    if cells <= limit:
        return
    if isinstance(statistic, Position):
        name = "argmax" if statistic.largest else "argmin"
    else:
        name = "median" if statistic.q is None else "quantile"
    dims = [variable.dims[a] for a in kept]
    longest = max(kept, key=lambda a: variable.shape[a])
    nbytes = cells * statistic.dtype(variable.dtype).itemsize
    raise DenseResultError(
        f"{name} of a sporadik variable of shape {variable.shape}, one per cell of "
        f"{', '.join(map(repr, dims))}: a dense array of {cells:,} values "
        f"({nbytes / 2**30:,.1f} GiB), past the limit of {limit:,} (sporadik.max-positions). "
        f"Select the stretch you need first, e.g. "
        f"`X.isel({variable.dims[longest]}=slice(a, b)).{name}(...)`, which reads only its "
        "values; or raise dask.config 'sporadik.max-positions' if the dense array fits in memory."
    )
