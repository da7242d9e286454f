"""``einsum`` of dask arrays built block by block, as dask's graph model builds it: numpy's
values, sparse blocks where an operand's are, in either of dask's array models."""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import pytest
import sparse

from sporadik_dask.backend.einsum import einsum_of_blocks, parse_subscripts
from sporadik_dask.read.dask_model import EXPRESSIONS
from tests.helpers import random_dense

#: (subscripts as xarray writes them, operand shapes): a matrix product, one summing everything,
#: an outer product, a scaling by a 0-d operand, a dim both keep, three operands, and operands
#: whose ellipses differ in length (numpy's broadcasting from the right).
CASES = [
    ("...cg,...gk->...ck", [(12, 10), (10, 3)]),
    ("...cg,...cg->...", [(12, 10), (12, 10)]),
    ("...cg,...k->...cgk", [(12, 10), (2,)]),
    ("...cg,...->...cg", [(12, 10), ()]),
    ("...g,...g->...", [(12, 10), (12, 10)]),
    ("...cg,...g,...c->...", [(12, 10), (10,), (12,)]),
    ("...g,...g->...", [(3, 12, 10), (12, 10)]),
]


def test_subscripts_are_spelled_out_as_numpy_reads_them() -> None:
    parsed = parse_subscripts("...g,...g->...", [3, 2])
    assert parsed is not None
    inputs, output = parsed
    assert [len(term) for term in inputs] == [3, 2]
    assert inputs[0][1:] == inputs[1] and inputs[0][2] == "g"
    assert output == inputs[0][:2]
    assert parse_subscripts("cg,gk->ck", [2, 2]) == (["cg", "gk"], "ck")


@pytest.mark.parametrize(
    ("subscripts", "ndims"),
    [("cg,gk", [2, 2]), ("cg,gk->ck", [3, 2]), ("cg->c", [2, 2]), ("c...g->c", [1])],
    ids=["no output", "a rank unlike its term", "fewer terms", "a term too long"],
)
def test_subscripts_not_of_xarrays_form_are_left_alone(subscripts: str, ndims: list[int]) -> None:
    assert parse_subscripts(subscripts, ndims) is None


@pytest.mark.parametrize(("subscripts", "shapes"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("first", ["sparse", "numpy"])
def test_blocks_einsum_equals_numpys_with_sparse_blocks_where_an_operand_is(
    subscripts: str, shapes: list[tuple[int, ...]], first: str
) -> None:
    rng = np.random.default_rng(len(subscripts))
    dense = [random_dense(rng, shape, 0.3, np.float64) for shape in shapes]
    operands: list[Any] = [
        da.from_array(sparse.COO.from_numpy(dense[0]), chunks=5, asarray=False)
        if first == "sparse"
        else da.from_array(dense[0], chunks=5),
        *(dense[1:]),
    ]
    parsed = parse_subscripts(subscripts, [len(shape) for shape in shapes])
    assert parsed is not None
    result = einsum_of_blocks(*parsed, operands)
    expected = np.einsum(subscripts, *dense)
    assert result.shape == expected.shape
    computed = result.compute()
    if expected.ndim == 0:  # dask's reductions to one value give numpy's scalar or a 0-d array
        computed = computed.todense() if isinstance(computed, sparse.COO) else computed
    elif first == "sparse":
        assert isinstance(result._meta, sparse.COO), type(result._meta)
        assert isinstance(computed, sparse.COO), type(computed)
        computed = computed.todense()
    else:
        assert isinstance(computed, np.ndarray), type(computed)
    np.testing.assert_allclose(computed, expected, rtol=1e-10)


def test_a_dtype_asked_for_is_the_results() -> None:
    x = da.from_array(sparse.COO.from_numpy(np.eye(6)), chunks=4, asarray=False)
    result = einsum_of_blocks(["cg", "g"], "c", [x, np.ones(6)], dtype=np.dtype(np.float32))
    assert result.dtype == np.float32
    assert result.compute().dtype == np.float32
    np.testing.assert_array_equal(result.compute().todense(), np.ones(6))


def test_an_outer_product_cuts_its_operands_as_dasks_graph_model_does() -> None:
    """Blocks of cells x genes times 50 values would be 50 times the operand's: the kept axes
    are cut first, into the chunks dask's graph-model ``einsum`` gives."""
    dense = random_dense(np.random.default_rng(2), (70, 50), 0.2, np.float64)
    x = da.from_array(sparse.COO.from_numpy(dense), chunks=(20, 50), asarray=False)
    k = np.arange(50.0)
    result = einsum_of_blocks(["cg", "k"], "cgk", [x, k])
    assert result.chunks == ((5,) * 14, (13, 13, 12, 12), (13, 13, 12, 12))
    if not EXPRESSIONS:
        assert result.chunks == da.einsum("cg,k->cgk", x, k).chunks
    np.testing.assert_allclose(result.compute().todense(), np.einsum("cg,k->cgk", dense, k))
