"""``expand_dims`` and ``xr.broadcast`` of lazily opened sporadik variables: each reads it first.

Both add dimensions through ``Variable.set_dims``, which broadcasts the variable's lazy wrapper
with ``np.broadcast_to`` when a new dimension is longer than 1: numpy asks the wrapper for dense
values, and a backend array holding ``sparse.COO`` raises there ("Cannot convert a sparse array
to dense automatically"), where the same variable loaded broadcasts as sparse. xarray reads the
values of any other backend at that point too (its wrapper gives numpy its values), so reading
first keeps nothing lazy that was lazy before. The same holds once xarray has cached the values
under its wrappers (any earlier access to ``.data``): numpy then asks the cache. Every other
variable, and a call that adds no dimension, is handed over as it was.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from sporadik_dask.backend.accessor import READER_KEY
from sporadik_dask.backend.array import backend_under

__all__ = ["reading_first"]


def reading_first(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Variable.set_dims``, with a lazily opened sporadik variable read before dimensions are
    added to it."""

    @functools.wraps(original)
    def set_dims(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _wrapped_sporadik(self):  # another's variable goes to xarray's as it came
            dim = args[0] if args else kwargs.get("dim", kwargs.get("dims", ()))
            names = [dim] if isinstance(dim, str) else list(dim)
            if set(names) - set(self.dims):
                self = self.copy(deep=False, data=self.data)
        return original(self, *args, **kwargs)

    return set_dims


def _wrapped_sporadik(variable: Any) -> bool:
    """Whether ``variable`` was opened from a store and its data is still behind xarray's lazy
    wrappers, read into their cache or not."""
    from xarray.namedarray.utils import is_duck_array

    if is_duck_array(variable._data):
        return False
    return backend_under(variable._data).backend is not None or READER_KEY in variable.encoding
