"""Products: ``xr.dot`` (and ``@``) of a sparse variable with a dense one, as a matrix product.

``xr.dot`` hands its operands to ``einsum``, and ``sparse.einsum`` multiplies them out into the
"minimal outer product" before it sums: every stored value times every column of the dense operand:
cells x genes against genes x 50 holds 50 values per stored value, for a result the size of cells x
50, and a whole matrix does not fit (docs/benchmarks.md, "Numbers behind the code's choices"). A
product of one sparse operand (fill value 0) with a dense one, each index either summed over by both
or kept from one, is a ``tensordot``: here the sparse operand is turned so that its kept axes lead,
made a ``scipy.sparse`` CSR matrix, and multiplied with the dense one, which scipy does several
times faster than ``sparse``'s own ``tensordot`` or ``@`` (same section). Under dask each pair of
blocks is multiplied so, and the partial products summed as dask's ``tensordot`` does, so no task
holds more than its blocks. Only a product of a store's data is taken so
(:mod:`~sporadik_dask.backend.ours`): a user's own ``sparse.COO`` times a dense array stays
``sparse.einsum``'s. A product whose dense result would outgrow the sparse one (nothing summed, as
in an outer product or a scaling, or a short axis summed) stays sparse, as does any other ``einsum``
(batch dims, both operands sparse or both dense, a fill value that is not 0): xarray's own.
``dask.config`` ``sporadik.pushdown: False`` hands every product back. A product of three or more
operands is xarray's too: ``xr.dot(xr.dot(X, W), v)`` takes the route above, one at a time.
Under dask's expression model, which has no ``einsum``, a product of a store's dask read that
xarray would hand to dask's is built as the graph model's ``einsum`` builds it
(:mod:`~sporadik_dask.backend.einsum`), with ``sporadik.pushdown`` on or off.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np

from sporadik_dask.backend.einsum import einsum_of_blocks, parse_subscripts
from sporadik_dask.backend.ours import is_read
from sporadik_dask.read.dask_model import EXPRESSIONS

__all__ = ["contract", "contracting"]

#: Under dask, a product summing at least this many positions of the sparse operand is made
#: dense (see :func:`_denser_than_summed`): a sum over genes or cells, not over a short axis.
SUMMED_UNDER_DASK = 64


def contracting(original: Callable[..., Any]) -> Callable[..., Any]:
    """xarray's ``einsum``, with a product of a store's sparse data and a dense operand taken
    by :func:`contract`; under dask's expression model, any other product of a store's dask read
    by :func:`~sporadik_dask.backend.einsum.einsum_of_blocks`; every other ``einsum``
    unchanged."""

    @functools.wraps(original)
    def einsum(*args: Any, **kwargs: Any) -> Any:
        if not any(is_read(operand) for operand in args[1:]):  # another's product: einsum's own
            return original(*args, **kwargs)
        if not kwargs and len(args) == 3 and dask.config.get("sporadik.pushdown", True):
            product = _as_matrix_product(*args)
            if product is not None:
                return product
        if EXPRESSIONS and any(isinstance(operand, da.Array) for operand in args[1:]):
            parsed = parse_subscripts(args[0], [_ndim(operand) for operand in args[1:]])
            if parsed is not None:
                return einsum_of_blocks(*parsed, args[1:], **kwargs)
        return original(*args, **kwargs)

    return einsum


def _as_matrix_product(subscripts: Any, left: Any, right: Any) -> Any:
    """``einsum(subscripts, left, right)`` by :func:`contract`, or None where that is not a
    product of one sparse and one dense operand whose dense result is no larger."""
    if not isinstance(subscripts, str):
        return None
    axes = _tensordot_axes(subscripts, left.ndim, right.ndim)
    kinds = (_kind(left), _kind(right))
    if axes is None or kinds[0] == kinds[1] or "other" in kinds:
        return None
    sparse_side = (left, axes.left) if kinds[0] == "sparse" else (right, axes.right)
    if not _denser_than_summed(*sparse_side):
        return None
    product = contract(left, right, axes)
    return product if _in_order(axes.order) else product.transpose(axes.order)


class _Axes:
    """Which axes of each operand are summed over, and how ``tensordot``'s result (the left
    operand's kept axes, then the right's) is turned to the order ``einsum`` asked for."""

    def __init__(self, left: tuple[int, ...], right: tuple[int, ...], order: tuple[int, ...]):
        self.left = left
        self.right = right
        self.order = order


def _tensordot_axes(subscripts: str, left_ndim: int, right_ndim: int) -> _Axes | None:
    """The ``tensordot`` that computes ``subscripts`` for two operands, or None if none does.

    xarray writes ``...ab,...bc->...ac``: the ellipsis holds dims both operands share and keep
    (batch dims), which a ``tensordot`` has not, so it must be empty here.
    """
    if "->" not in subscripts or subscripts.count(",") != 1:
        return None
    inputs, out = subscripts.replace(" ", "").split("->")
    terms = inputs.split(",")
    if out.startswith("..."):
        out = out[3:]
    cores = []
    for term, ndim in zip(terms, (left_ndim, right_ndim), strict=True):
        core = term[3:] if term.startswith("...") else term
        if "." in core or len(core) != ndim or len(set(core)) != len(core):
            return None
        cores.append(core)
    left, right = cores
    if "." in out or len(set(out)) != len(out):
        return None
    summed = [index for index in left if index in right]
    if any(index in out for index in summed):  # kept by both: a batch index
        return None
    kept = [index for index in left if index not in summed] + [
        index for index in right if index not in summed
    ]
    if sorted(kept) != sorted(out):  # an index summed over within one operand
        return None
    return _Axes(
        tuple(left.index(index) for index in summed),
        tuple(right.index(index) for index in summed),
        tuple(kept.index(index) for index in out),
    )


def _kind(array: Any) -> str:
    """``sparse`` (a ``sparse.COO`` of fill value 0, or dask blocks of them), ``dense`` (numpy,
    or dask blocks of it) or ``other``."""
    import sys

    dask_array = sys.modules.get("dask.array")
    if dask_array is not None and isinstance(array, dask_array.Array):
        array = array._meta
    sparse = sys.modules.get("sparse")
    if sparse is not None and type(array) is sparse.COO:
        return "sparse" if _is_zero(array.fill_value) else "other"
    return "dense" if type(array) is np.ndarray else "other"


def _denser_than_summed(array: Any, summed: Sequence[int]) -> bool:
    """Whether the sparse operand holds at least one value per position it sums over, so a
    dense result is no larger than the sparse one ``sparse.einsum`` would give.

    The dense result has ``array.size / S`` cells per column of the dense operand (``S``: the
    summed positions), ``sparse``'s about one per stored value: dense wins when the density is at
    least ``1 / S``. A product that sums nothing (an outer product, a scaling), or sums a short
    axis of a sparse variable (the third axis of cells x genes x 4), stays sparse. The stored
    values of dask blocks are not known without reading them: there a sum over at least
    :data:`SUMMED_UNDER_DASK` positions is taken to pass.
    """
    positions = int(np.prod([array.shape[axis] for axis in summed], dtype=np.int64))
    if not summed or positions == 0:
        return False
    nnz = getattr(array, "nnz", None)
    if not isinstance(nnz, (int, np.integer)):  # dask blocks
        return positions >= SUMMED_UNDER_DASK
    return int(nnz) * positions >= int(np.prod(array.shape, dtype=np.int64))


def _ndim(array: Any) -> int:
    """The operand's rank, not asked of numpy (the expression model's arrays refuse NEP-18)."""
    ndim = getattr(array, "ndim", None)
    return int(ndim) if ndim is not None else int(np.ndim(array))


def _in_order(axes: Sequence[int]) -> bool:
    return list(axes) == list(range(len(axes)))


def _is_zero(value: Any) -> bool:
    return bool(np.asarray(value) == 0)


def contract(left: Any, right: Any, axes: _Axes) -> Any:
    """``tensordot(left, right, (axes.left, axes.right))`` for one sparse and one dense operand,
    dense; under dask as dask's ``tensordot`` lays it out, with each partial product kept
    (one length-1 axis per summed index) and summed after."""
    import dask.array as da

    if not isinstance(left, da.Array) and not isinstance(right, da.Array):
        return _matrix_product(left, right, axes.left, axes.right)
    left, right = da.asarray(left), da.asarray(right)
    dtype = np.promote_types(left.dtype, right.dtype)
    left_index = list(range(left.ndim))
    right_index = list(range(left.ndim, left.ndim + right.ndim))
    out_index = left_index + right_index
    for at_left, at_right in zip(axes.left, axes.right, strict=True):
        out_index.remove(right_index[at_right])
        right_index[at_right] = left_index[at_left]
    partial = da.blockwise(
        _partial_product,
        out_index,
        left,
        left_index,
        right,
        right_index,
        dtype=dtype,
        concatenate=False,
        adjust_chunks={left_index[at]: lambda _: 1 for at in axes.left},
        meta=np.empty((0,) * len(out_index), dtype=dtype),
        summed=(axes.left, axes.right),
    )
    return partial.sum(axis=list(axes.left)) if axes.left else partial


def _partial_product(left: Any, right: Any, summed: tuple[Sequence[int], Sequence[int]]) -> Any:
    """One pair of blocks' product, with a length-1 axis where each summed axis was."""
    product = _matrix_product(left, right, summed[0], summed[1])
    return np.expand_dims(product, tuple(sorted(summed[0]))) if summed[0] else product


def _matrix_product(
    left: Any, right: Any, left_axes: Sequence[int], right_axes: Sequence[int]
) -> np.ndarray[Any, Any]:
    """``tensordot`` as one CSR matrix times a dense matrix: each operand's kept axes flattened
    to one, its summed axes (in the paired order) to the other."""
    import sparse

    left_kept = [axis for axis in range(left.ndim) if axis not in left_axes]
    right_kept = [axis for axis in range(right.ndim) if axis not in right_axes]
    shape = tuple(left.shape[a] for a in left_kept) + tuple(right.shape[a] for a in right_kept)
    left_2d = _as_matrix(left, left_kept, list(left_axes))
    right_2d = _as_matrix(right, list(right_axes), right_kept)
    dtype = np.promote_types(left.dtype, right.dtype)
    if isinstance(left, sparse.COO):
        product = left_2d @ right_2d.astype(dtype, copy=False)
    else:  # dense times sparse: (S.T @ D.T).T, scipy's CSR times a dense matrix
        product = (right_2d.T.tocsr() @ left_2d.astype(dtype, copy=False).T).T
    return np.asarray(product, dtype=dtype).reshape(shape)


def _as_matrix(array: Any, first: list[int], second: list[int]) -> Any:
    """The operand as a 2-D matrix: axes ``first`` flattened to rows, ``second`` to columns;
    a ``sparse.COO`` becomes a ``scipy.sparse`` CSR matrix."""
    import sparse

    rows = int(np.prod([array.shape[a] for a in first], dtype=np.int64))
    columns = int(np.prod([array.shape[a] for a in second], dtype=np.int64))
    if isinstance(array, sparse.COO):
        turned = array if _in_order(first + second) else array.transpose(first + second)
        return turned.reshape((rows, columns)).tocsr()
    return np.transpose(array, first + second).reshape(rows, columns)
