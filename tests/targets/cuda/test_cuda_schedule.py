"""tensorize.engine.cuda_schedule: the block-tiled, warp-tiled WMMA schedule."""

from __future__ import annotations

import numpy as np
import pytest

import intrinsics
from intrinsics import default_registry
from ir import Block, For, ForKind, IntrinsicCall, post_order_visit
from ir.verify import verify
from targets import host
from tensorize.engine.cuda_schedule import CudaTiling, choose_tiling, narrow_inputs
from tests.default_run import first_by_default
from tests.targets.cuda.helpers import TENSORIZED, WMMA_INT8, random_inputs, tensorized
from tests.tensorize.engine.suite import suite


def _calls(func) -> list[str]:
    found: list[str] = []
    post_order_visit(func.body, lambda n: found.append(n.intrinsic)
                     if isinstance(n, IntrinsicCall) else None)
    return found


def test_tiling_for_a_large_gemm_is_two_by_four_warps_of_64_by_64():
    assert choose_tiling((4096, 4096, 4096), (16, 16, 16), 2) == CudaTiling((2, 4), (4, 4), 2)
    assert choose_tiling((4096, 4096, 4096), (16, 16, 16), 1) == CudaTiling((2, 4), (4, 4), 2)
    # mma.sync's 16 x 8 fragments: still 64 x 64 a warp, so 4 x 8 of them.
    assert choose_tiling((4096, 4096, 4096), (16, 8, 32), 1) == CudaTiling((2, 4), (4, 8), 2)


def test_narrow_inputs_take_warps_of_64_by_32(registry):
    # int4 and fp8 mma.sync: 4 x 4 fragments of 16 x 8 a warp, a 128 x 128 block.
    assert choose_tiling((256, 256, 256), (16, 8, 64), 0, narrow=True) == \
        CudaTiling((2, 4), (4, 4), 1)
    assert choose_tiling((256, 256, 256), (16, 8, 32), 1, narrow=True) == \
        CudaTiling((2, 4), (4, 4), 2)
    narrow = {name for name in ("mma_m16n8k64_s4s4_s32", "mma_m16n8k64_u4s4_s32",
                                "mma_m16n8k32_e4m3e4m3_f32", "mma_m16n8k32_e5m2e4m3_f32",
                                "mma_m16n8k32_s8s8_s32", "mma_m16n8k16_f16f16_f32",
                                "wmma_m16n16k16_s8_s32") if narrow_inputs(registry.get(name))}
    assert narrow == {"mma_m16n8k64_s4s4_s32", "mma_m16n8k64_u4s4_s32",
                      "mma_m16n8k32_e4m3e4m3_f32", "mma_m16n8k32_e5m2e4m3_f32"}


def test_tiling_below_256_columns_is_two_by_four_warps_of_four_by_two_fragments():
    assert choose_tiling((128, 128, 64), (16, 16, 16), 2) == CudaTiling((2, 4), (4, 2), 2)


def test_tiling_for_int8_keeps_one_fragment_step_per_stage():
    assert choose_tiling((64, 64, 64), (16, 16, 16), 1) == CudaTiling((2, 2), (2, 2), 1)


def test_gemm_is_bound_staged_and_uses_every_wmma_kind():
    func = tensorized("gemm_fp16")
    verify(func)
    threads = set()
    post_order_visit(func.body, lambda n: threads.add(n.thread) if isinstance(n, For)
                     and n.kind is ForKind.THREAD_BINDING else None)
    assert threads == {"blockIdx.x", "blockIdx.y", "threadIdx.y", "threadIdx.z"}
    scopes = {b.scope for b in func.allocs}
    assert scopes == {"shared", "wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator"}
    kinds = {default_registry().get(name).kind for name in _calls(func)}
    assert kinds == {"compute", "load", "store", "fill"}


@pytest.mark.parametrize("name", first_by_default(TENSORIZED, 3))
def test_tensorized_kernel_matches_the_untouched_one(name):
    original = suite()[name]
    inputs = random_inputs(original)
    expected = host.run(original, inputs)
    actual = host.run(tensorized(name), inputs, intrinsics.lowerer(default_registry().get))
    for key, value in expected.items():
        if value.dtype.kind == "f":
            np.testing.assert_allclose(actual[key], value, rtol=1e-3, atol=1e-3)
        else:
            np.testing.assert_array_equal(actual[key], value)


def test_epilogue_chain_is_one_block_under_each_fragment_store():
    func = tensorized("matmul_requant_int8", WMMA_INT8)
    verify(func)
    # bias, scale and clip read the accumulator tile in shared memory; no global
    # intermediate is left between the GEMM and the int8 output (the one global buffer is
    # the int8 B operand, transposed before the GEMM).
    assert {b.name: b.scope for b in func.allocs}["acc_shared"] == "shared"
    assert [b.name for b in func.allocs if b.scope == "global"] == ["B_global"]
    stores = []
    post_order_visit(func.body, lambda n: stores.append(n) if isinstance(n, For)
                     and "out" in _block_names(n) and "acc_shared_wmma_accumulator_o"
                     in _block_names(n) and n.kind is ForKind.UNROLLED else None)
    assert stores, "the epilogue is not under the store's fragment loops"


def _block_names(stmt) -> set[str]:
    names: set[str] = set()
    post_order_visit(stmt, lambda n: names.add(n.name) if isinstance(n, Block) else None)
    return names
