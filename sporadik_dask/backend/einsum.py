"""``einsum`` of a store's dask read under dask's expression model, which has none.

A product :mod:`~sporadik_dask.backend.dot` does not take as a matrix product (nothing summed, a
short axis summed, both operands sparse, a dim both keep, three operands) goes to dask's
``einsum`` through xarray; the expression model's arrays refuse NEP-18 and ``dask.array.einsum``
builds graph-model layers, so there every such product raised a bare ``NotImplementedError``.
Here it is built as the graph model's ``einsum`` builds it, from what both models have, so it
gives the same blocks (``sparse.COO`` where an operand is sparse) and values in either. Only a
product of a store's read comes here (:mod:`~sporadik_dask.backend.dot` asks); anyone else's dask
array meets the model's refusal as before.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from typing import Any

import numpy as np

from sporadik_dask.read.dask_model import cut_chunks

__all__ = ["einsum_of_blocks", "parse_subscripts"]


def parse_subscripts(subscripts: Any, ndims: Sequence[int]) -> tuple[list[str], str] | None:
    """Each operand's indices and the result's, an ellipsis spelled out in letters of its own
    (right-aligned, as numpy does), for subscripts of the form ``"...ab,...bc->...ac"``; None
    for any other form (no ``->``, operands given as lists), which is left to dask's refusal."""
    if not isinstance(subscripts, str) or subscripts.count("->") != 1:
        return None
    inputs, output = subscripts.replace(" ", "").split("->")
    terms = inputs.split(",")
    if len(terms) != len(ndims):
        return None
    free = [letter for letter in string.ascii_letters if letter not in subscripts]
    longest = 0
    spelled = []
    for term, ndim in zip(terms, ndims, strict=True):
        if "..." in term:
            width = ndim - (len(term) - 3)
            if width < 0:
                return None
            longest = max(longest, width)
            term = term.replace("...", "".join(free[len(free) - width :]))
        if "." in term or len(term) != ndim:
            return None
        spelled.append(term)
    output = output.replace("...", "".join(free[len(free) - longest :]))
    if "." in output or any(index not in "".join(spelled) for index in output):
        return None
    return spelled, output


def einsum_of_blocks(
    inputs: Sequence[str], output: str, operands: Sequence[Any], **kwargs: Any
) -> Any:
    """dask's graph-model ``einsum`` of ``operands`` (dask arrays or arrays in memory).

    1. Each operand becomes a dask array (``da.asarray``), its chunks along the kept indices cut
       smaller where the result's blocks would outgrow the largest operand's by more than
       ``array.chunk-size-tolerance`` (an outer product).
    2. One ``blockwise`` task per tuple of blocks computes the blocks' ``einsum`` (numpy's, which
       hands a sparse block to ``sparse.einsum``), keeping one length-1 axis for each summed
       index, so no block is joined to another.
    3. A ``sum`` over those axes adds the partial products.
    """
    import dask.array as da

    split_every = kwargs.pop("split_every", None)
    summed = sorted({index for term in inputs for index in term} - set(output))
    kernel_dtype = kwargs.pop("dtype", None)
    arrays = _cut_for_the_result(
        [da.asarray(operand) for operand in operands], inputs, output, summed
    )
    dtypes = [array.dtype for array in arrays] if kernel_dtype is None else [kernel_dtype]
    dtype = np.result_type(*dtypes)
    subscripts = ",".join(inputs) + "->" + output
    pairs = [part for array, term in zip(arrays, inputs, strict=True) for part in (array, term)]
    partial = da.blockwise(
        _block_einsum,
        output + "".join(summed),
        *pairs,
        adjust_chunks=dict.fromkeys(summed, 1),
        dtype=dtype,
        subscripts=subscripts,
        kernel_dtype=kernel_dtype,
        summed=len(summed),
        **kwargs,
    )
    if not summed:
        return partial
    return partial.sum(
        axis=tuple(range(len(output), len(output) + len(summed))), split_every=split_every
    )


def _cut_for_the_result(
    arrays: list[Any], inputs: Sequence[str], output: str, summed: Sequence[str]
) -> list[Any]:
    """The operands, rechunked as the graph model's ``einsum`` rechunks them: each one's kept
    axes cut by an equal share of the factor by which the result's blocks outgrow the largest
    operand's (past ``array.chunk-size-tolerance``)."""
    import dask

    if len(arrays) < 2 or not output:
        return arrays
    largest_operand = max(max(_block_size(array.chunks) for array in arrays), 1)
    kept: dict[str, int] = {}
    for array, term in zip(arrays, inputs, strict=True):
        for chunks, index in zip(array.chunks, term, strict=True):
            if index not in summed:
                kept[index] = max(max(chunks), kept.get(index, 1))
    tolerance = dask.config.get("array.chunk-size-tolerance")
    growth = math.prod(kept.values()) / (largest_operand * tolerance)
    cut = []
    for array, term in zip(arrays, inputs, strict=True):
        axes = {axis for axis, index in enumerate(term) if index in output}
        share = max(growth ** (len(axes) / len(output)), 1)
        chunks = cut_chunks(array.chunks, axes, _block_size(array.chunks) / share)
        cut.append(array.rechunk(tuple(chunks)))
    return cut


def _block_size(chunks: Sequence[tuple[int, ...]]) -> int:
    """Elements of the largest block of ``chunks``."""
    return math.prod(max(sizes, default=0) for sizes in chunks)


def _block_einsum(
    *blocks: Any, subscripts: str, kernel_dtype: Any, summed: int, **kwargs: Any
) -> Any:
    """One tuple of blocks' ``einsum``, with a length-1 axis for each summed index.

    ``sparse`` holds a 0-d result as its fill value, which a reshape keeps: blocks of unlike
    fill values, which ``sparse`` refuses to add up (the graph model's ``einsum`` fails there),
    so such a result is laid down as one stored value instead.
    """
    product = np.einsum(subscripts, *blocks, dtype=kernel_dtype, **kwargs)
    shape = product.shape + (1,) * summed
    fill_value = getattr(product, "fill_value", None)
    if summed and not product.shape and fill_value is not None and fill_value != 0:
        import sparse

        coords = np.zeros((summed, 1), dtype=np.intp)
        return sparse.COO(coords, np.asarray([fill_value], dtype=product.dtype), shape=shape)
    return product.reshape(shape)
