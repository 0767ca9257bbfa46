"""A unit (extent-1) iterator spans an intrinsic iterator that no other block iterator can:
the one row of a 1 x N x K GEMM becomes the padded M of the intrinsic's tile, on every
target, and the rewritten kernel computes exactly what the kernel does."""

from __future__ import annotations

import numpy as np
import pytest

import ir
import intrinsics
from intrinsics import lowerer
from ir import te
from targets import host
from tensorize.engine import auto_tensorize
from tensorize.match import Match, Mismatch, match_block
from tests.tensorize.schedule.kernels import gemm_int8, random_inputs

REGISTRY = intrinsics.default_registry()


def i32(x: ir.Expr) -> ir.Expr:
    return ir.cast("int32", x)


def unswapped(func: ir.PrimFunc, intrinsic: str) -> list[Match]:
    """The mappings of block C onto ``intrinsic`` that keep A as A (the commuted ones, B^T
    as A, exist too), cheapest first."""
    found = match_block(func, "C", REGISTRY.get(intrinsic), REGISTRY)
    assert isinstance(found, list), found
    return sorted((m for m in found if m.buffer_map["A"] == "A"), key=lambda m: m.cost)


@pytest.mark.parametrize("intrinsic", ["wmma_m16n16k16_s8_s32", "mma_m16n8k32_s8s8_s32",
                                       "npu_gemm", "arm_smmla"])
def test_the_unit_row_spans_m_padded_to_the_tile(intrinsic):
    rows = REGISTRY.get(intrinsic).extents[0]
    m_name = REGISTRY.get(intrinsic).iter_vars[0].var.name
    (best, *_) = unswapped(gemm_int8(1, 64, 64), intrinsic)
    (full, *_) = unswapped(gemm_int8(rows, 64, 64), intrinsic)
    assert best.iter_map == full.iter_map and best.outer == ()
    assert best.extents[m_name] == 1 and best.padded_extents[m_name] == rows
    assert best.calls == full.calls
    # The padded row tile is laid out as a full one: nothing more to pack.
    assert best.layouts == full.layouts and best.needs_pack == full.needs_pack


def test_a_unit_row_is_not_taken_where_a_live_iterator_spans_m():
    # Two rows: vi is live and spans M by itself, as before.
    (best, *_) = unswapped(gemm_int8(2, 64, 64), "wmma_m16n16k16_s8_s32")
    assert best.iter_map["i"] == ("vi",) and best.extents["i"] == 2


def test_of_two_unit_iterators_the_one_indexing_a_and_c_spans_m():
    # A batch of one: b indexes A, B and C, so only i (A and C) can be M.
    A = te.placeholder((1, 1, 32), "int8", "A")
    B = te.placeholder((1, 32, 48), "int8", "B")
    rk = te.reduce_axis(32, "k")
    C = te.compute((1, 1, 48), lambda b, i, j: te.sum(i32(A[b, i, rk]) * i32(B[b, rk, j]),
                                                      axis=rk), "C")
    found = unswapped(te.create_prim_func([A, B, C]), "wmma_m16n16k16_s8_s32")
    assert found
    for match in found:
        assert match.iter_map["i"] == ("vi",) and match.outer == ()


def test_a_vector_with_no_unit_iterator_still_says_why_not():
    # C[j] = sum_k A[k] B[k, j]: no iterator at all indexes A and C alone.
    A = te.placeholder((32,), "int8", "A")
    B = te.placeholder((32, 48), "int8", "B")
    rk = te.reduce_axis(32, "k")
    C = te.compute((48,), lambda j: te.sum(i32(A[rk]) * i32(B[rk, j]), axis=rk), "C")
    found = match_block(te.create_prim_func([A, B, C]), "C",
                        REGISTRY.get("wmma_m16n16k16_s8_s32"), REGISTRY)
    assert isinstance(found, Mismatch)
    assert "no iterator for an operand dimension" in found.reason


@pytest.mark.parametrize("target", ["cuda", "npu", "arm"])
@pytest.mark.parametrize("shape", [(1, 64, 64), (1, 17, 33), (2, 17, 33)])
def test_one_or_two_rows_tensorize_and_compute_exactly(target, shape, context):
    func = gemm_int8(*shape)
    result = auto_tensorize(func, target, registry=REGISTRY, config=context(target).machine)
    assert result.tensorized, [b.reason for b in result.blocks]
    inputs = random_inputs(func, seed=1)
    want = host.run(func, inputs)
    got = host.run(result.func, inputs, lowerer(REGISTRY.get))
    np.testing.assert_array_equal(got["C"], want["C"])
