"""auto_tensorize(..., arch="sm_90a"): a kernel that is one GEMM takes Hopper's wgmma schedule
(tensorize/engine/cuda_hopper.py), its tensorized IR exact on the host against numpy, with
the kernel's own operand layouts; anything else is refused with the reason and scheduled as
without the architecture; the gpu: section's architectures keep every schedule."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from intrinsics import default_registry, lowerer
from ir import dtypes, te
from ir import script as T
from targets import host
from tensorize.engine import auto_tensorize, count_calls
from tensorize.engine.cuda_hopper import HOPPER_ARCH, hopper_schedule, hopper_view
from tests.tensorize.engine.suite import suite

# A GEMM of M x N x K int8 inputs whose operands are indexed as the placeholders say.
TEMPLATE = '''
@T.prim_func
def gemm({a_name}: T.Buffer({a_shape}, "{dtype}"), B: T.Buffer({b_shape}, "{dtype}"),
         C: T.Buffer({c_shape}, "{acc}")):
    for b, i, j, k in T.grid({batch}, {m}, {n}, {k}):
        with T.block("C"):
            vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
            {init}
            {c} += T.cast({a}, "{acc}") * T.cast({b}, "{acc}")
'''
M, N, K = 70, 130, 40


def _kernel(batch: int = 1, dtype: str = "int8", acc: str = "int32", init: bool = True,
            a: str = "A[vi, vk]", b: str = "B[vk, vj]", c: str = "C[vi, vj]",
            a_shape: tuple[int, ...] = (M, K), b_shape: tuple[int, ...] = (K, N),
            c_shape: tuple[int, ...] = (M, N), a_name: str = "A"):
    zero = f"with T.init():\n                {c} = 0" if init else ""
    text = TEMPLATE.format(batch=batch, m=M, n=N, k=K, dtype=dtype, acc=acc, init=zero, a=a,
                           b=b, c=c, a_shape=a_shape, b_shape=b_shape, c_shape=c_shape,
                           a_name=a_name)
    return T.parse(text, filename="<hopper kernel>")


def _exact_on_the_host(func, result, registry) -> None:
    rng = np.random.default_rng(5)
    inputs = {p.name: rng.integers(-128, 128, p.shape).astype(p.dtype.numpy)
              for p in func.params}
    got = host.run(result.func, inputs, lowerer(registry.get))["C"]
    np.testing.assert_array_equal(got, host.run(func, inputs)["C"])


@pytest.mark.parametrize("layout, a_transposed, b_transposed", [
    ({}, False, False),
    # A dense layer's weight: N rows of K, read in place by the kernel.
    ({"b": "B[vj, vk]", "b_shape": (N, K)}, False, True),
    ({"a": "A[vk, vi]", "a_shape": (K, M)}, True, False),
    # A batch of one: unit dimensions anywhere in the buffers.
    ({"a": "A[vb, vi, vk]", "a_shape": (1, M, K), "c": "C[vb, vi, vj]",
      "c_shape": (1, M, N)}, False, False),
])
def test_a_gemm_on_sm_90a_takes_the_hopper_schedule_exactly(layout, a_transposed,
                                                            b_transposed):
    registry = default_registry()
    func = _kernel(**layout)
    result = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH)
    gemm = result.hopper.gemm
    assert gemm is not None and (gemm.m, gemm.n, gemm.k) == (M, N, K)
    assert (gemm.operands.a_transposed, gemm.operands.b_transposed) == (a_transposed,
                                                                        b_transposed)
    # N = 130 pads least to 64-wide tiles (192 against 256); 2 x 3 tiles, 2 k steps of 32.
    assert gemm.intrinsic.name == "wgmma_m64n64k32_s8s8_s32"
    (outcome,) = result.blocks
    assert outcome.intrinsic == gemm.intrinsic.name and outcome.extents[-3:] == (128, 192, 64)
    assert count_calls(result.func) == {gemm.intrinsic.name: 2 * 3 * 2}
    _exact_on_the_host(func, result, registry)


ONE_ROW = '''
@T.prim_func
def gemv(A: T.Buffer((1, 64), "int8"), B: T.Buffer((64, 130), "int8"),
         C: T.Buffer((1, 130), "int32")):
    for i, j, k in T.grid(1, 130, 64):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
'''


def test_a_gemm_of_one_row_takes_the_hopper_schedule():
    # M = 1: the row's unit iterator indexes nothing, and A is read as it lies.
    registry = default_registry()
    func = T.parse(ONE_ROW, filename="<one-row gemm>")
    result = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH)
    gemm = result.hopper.gemm
    assert (gemm.m, gemm.n, gemm.k) == (1, N, 64) and not gemm.operands.a_transposed
    _exact_on_the_host(func, result, registry)


def test_a_rewrite_the_schedule_refuses_is_a_reason_not_an_error():
    # Two unit iterators (a batch of one of a one-row GEMM): the GEMM view indexes C by a
    # constant 0, which pad_einsum refuses; the kernel takes the other families instead.
    registry = default_registry()
    func = T.parse(TEMPLATE.format(batch=1, m=1, n=N, k=64, dtype="int8", acc="int32",
                                   init="with T.init():\n                C[vi, vj] = 0",
                                   a="A[vi, vk]", b="B[vk, vj]", c="C[vi, vj]",
                                   a_shape=(1, 64), b_shape=(64, N), c_shape=(1, N),
                                   a_name="A"), filename="<batch of one row>")
    result = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH)
    assert result.hopper.gemm is None
    assert result.hopper.reason.startswith("rewrite refused: pad_einsum: block C indexes C "
                                           "with 0")
    assert result.blocks == auto_tensorize(func, "cuda", registry=registry).blocks


def test_the_tensorized_gemm_agrees_with_numpy():
    registry = default_registry()
    func = _kernel(b="B[vj, vk]", b_shape=(N, K))
    result = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH)
    rng = np.random.default_rng(8)
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    w = rng.integers(-128, 128, (N, K)).astype(np.int8)
    got = host.run(result.func, {"A": a, "B": w, "C": np.zeros((M, N), np.int32)},
                   lowerer(registry.get))["C"]
    np.testing.assert_array_equal(got, (a.astype(np.int64) @ w.T.astype(np.int64))
                                  .astype(np.int32))


@pytest.mark.parametrize("kernel, reason", [
    (lambda: _kernel(batch=2, a="A[vb, vi, vk]", a_shape=(2, M, K), c="C[vb, vi, vj]",
                     c_shape=(2, M, N)),
     "block C requires each operand indexed by its two GEMM iterators, one per dimension"),
    # A's rows are 48 elements apart, not K: no dense M x K matrix.
    (lambda: _kernel(a_shape=(M, K + 8)),
     "block C requires A of 70 x 40 elements (unit dimensions aside), got shape (70, 48)"),
    (lambda: _kernel(init=False),
     "block C requires an init that zeroes its result (the kernel's accumulators start at "
     "zero), got none"),
    (lambda: _kernel(dtype="uint8"), "no wgmma intrinsic matches block C"),
    # B_t is the name of the packed B: A cannot take it.
    (lambda: _kernel(a="B_t[vi, vk]", a_name="B_t"),
     "block C requires parameter names other than its intermediates', got B_t, B, C beside "
     "B_t_k, B_t, C_padded"),
    # A copy before the GEMM (the convolution's padding): only blocks after it are fused.
    (lambda: suite()["conv2d_nhwc_int8"],
     "requires one GEMM block, then only elementwise blocks reading its result where it lies "
     "(fused into the consumers' store), got 2 blocks (pad, conv)"),
])
def test_a_kernel_the_hopper_schedule_cannot_take_keeps_the_other_families(kernel, reason):
    registry = default_registry()
    func = kernel()
    result = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH)
    assert result.hopper.gemm is None
    assert result.hopper.reason.startswith("hopper schedule: ")
    assert reason in result.hopper.reason
    plain = auto_tensorize(func, "cuda", registry=registry)
    assert result.blocks == plain.blocks
    assert result.schedule.replay_trace() == plain.schedule.replay_trace()


def test_a_transposed_result_is_the_gemm_of_the_operands_swapped():
    # C[j, i] = sum A[i, k] B[k, j] is C^T = B^T A^T: M and N swap, and so do A and B.
    registry = default_registry()
    func = _kernel(c="C[vj, vi]", c_shape=(N, M))
    result = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH)
    gemm = result.hopper.gemm
    assert (gemm.m, gemm.n, gemm.k) == (N, M, K)
    ops = gemm.operands
    assert (ops.a.name, ops.a_transposed, ops.b.name, ops.b_transposed) == ("B", True, "A",
                                                                            True)
    _exact_on_the_host(func, result, registry)


def test_a_named_intrinsic_chooses_among_the_wgmma_ones_or_leaves_them():
    registry = default_registry()
    func = _kernel()
    named = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH,
                           intrinsic="wgmma_m64n128k32_s8s8_s32")
    assert named.hopper.gemm.intrinsic.name == "wgmma_m64n128k32_s8s8_s32"
    other = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH,
                           intrinsic="mma_m16n8k32_s8s8_s32")
    assert other.hopper.gemm is None
    assert other.hopper.reason == ("hopper schedule: requires a wgmma intrinsic (feature "
                                   "sm_90a), got mma_m16n8k32_s8s8_s32, not one")
    assert [b.intrinsic for b in other.blocks] == ["mma_m16n8k32_s8s8_s32"]


@pytest.mark.parametrize("name", ["gemm_fp16", "gemm_int8", "conv2d_nhwc_int8", "dense_int8"])
def test_the_gpu_sections_architectures_keep_every_schedule(name):
    registry = default_registry()
    func = suite()[name]
    plain = auto_tensorize(func, "cuda", registry=registry)
    assert plain.hopper is None
    for arch in ("sm_80", "sm_90"):
        result = auto_tensorize(func, "cuda", registry=registry, arch=arch)
        assert result.hopper is None and result.blocks == plain.blocks
        assert result.schedule.replay_trace() == plain.schedule.replay_trace()


def test_an_architecture_for_another_kind_of_target_is_refused():
    with pytest.raises(TypeError, match=r"auto_tensorize\(arch=\.\.\.\) applies to a target of "
                                        r"kind cuda, got target arm of kind cpu"):
        auto_tensorize(_kernel(), "arm", registry=default_registry(), arch=HOPPER_ARCH)


@pytest.mark.parametrize("m, n, batch, consumers", [
    (4096, 4096, 1, 2),   # 1024 blocks of 128 x 128: two warpgroups a block
    (1536, 1408, 1, 2),   # 12 x 11 = 132 blocks: one for each SM of sm_90's 132
    (1536, 1280, 1, 1),   # 120 blocks would leave SMs idle: 240 of 64 x 128 reach them all
    (256, 256, 33, 2),    # 4 blocks a batch, 132 in all
    (4160, 4096, 1, 1),   # 128-row tiles would pad M by 64 more rows than 64-row ones
])
def test_two_consumer_warpgroups_where_their_blocks_fill_the_sms(m, n, batch, consumers):
    registry = default_registry()
    _, tiling = hopper_schedule(m, n, 256, dtypes.float16, registry, batch=batch)
    assert tiling.consumers == consumers
    assert tiling.block_m == 64 * consumers


def test_the_report_line_says_which_warpgroups_a_block_has():
    registry = default_registry()
    big = te_gemm(4096, 4096, 4096)
    assert hopper_view(big, registry).describe() == (
        "block C: 4096 x 4096 x 4096 on 128 x 128 tiles, 4 wgmma k steps x 4 stages, two "
        "consumer warpgroups (setmaxnreg.inc to 232 registers) and one TMA producer "
        "warpgroup (setmaxnreg.dec to 40) per block")
    small = te_gemm(256, 256, 256)
    assert hopper_view(small, registry).describe() == (
        "block C: 256 x 256 x 256 on 64 x 128 tiles, 4 wgmma k steps x 2 stages, one "
        "consumer warpgroup and one TMA producer warp per block")


def te_gemm(m: int, n: int, k: int):
    """An m x n x k int8 GEMM into int32 through the TE builder."""
    A = te.placeholder((m, k), "int8", "A")
    B = te.placeholder((k, n), "int8", "B")
    r = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(
        ir.cast("int32", A[i, r]) * ir.cast("int32", B[r, j]), axis=r), "C")
    return te.create_prim_func([A, B, C], "gemm")
