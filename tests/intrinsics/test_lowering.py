"""lower_call: an IntrinsicCall on kernel regions becomes loops computing the semantics."""

import re

import numpy as np
import pytest

import ir
from intrinsics import Registry, lower_call, lowerer
from tests.intrinsics.conftest import needs_host


def _region(buffer: ir.Buffer, *ranges: tuple[ir.Expr | int, int]) -> ir.BufferRegion:
    return ir.BufferRegion(buffer, tuple(ir.Range(ir.as_expr(s), ir.IntImm(n))
                                         for s, n in ranges))


def test_lowered_loops_index_the_regions(registry: Registry) -> None:
    sdot = registry.get("arm_sdot_lane")
    a = ir.Buffer("a", (8,), "int8")
    b = ir.Buffer("b", (4, 8), "int8")
    c = ir.Buffer("c", (4,), "int32")
    call = ir.IntrinsicCall("arm_sdot_lane", (_region(a, (4, 4)), _region(b, (0, 4), (4, 4)),
                                              _region(c, (0, 4))))
    i, k = ir.Var("i"), ir.Var("k")
    value = c[i] + ir.Cast(ir.dtypes.int32, a[4 + k]) * ir.Cast(ir.dtypes.int32, b[i, 4 + k])
    expected = ir.For(i, 4, ir.For(k, 4, ir.BufferStore(c, value, (i,))))
    assert ir.structural_equal(lower_call(call, sdot), expected)


def test_unit_dimensions_of_a_region_index_at_their_start(registry: Registry) -> None:
    load = registry.get("npu_load_inp")
    src = ir.Buffer("x", (2, 32, 3, 32), "int8")
    dst = ir.Buffer("inp", (64, 16), "int8", "npu.inp")
    n = ir.Var("n")
    call = ir.IntrinsicCall("npu_load_inp", (_region(dst, (16, 16), (0, 16)),
                                             _region(src, (n, 1), (16, 16), (2, 1), (0, 16))))
    i, j = ir.Var("i"), ir.Var("j")
    expected = ir.For(i, 16, ir.For(j, 16, ir.BufferStore(
        dst, src[n, 16 + i, 2, j], (16 + i, j))))
    assert ir.structural_equal(lower_call(call, load), expected)


def test_scalar_operands_take_the_call_expressions(registry: Registry) -> None:
    clip = registry.get("npu_vec_clip")
    d = ir.Buffer("acc", (16, 16), "int32", "npu.acc")
    call = ir.IntrinsicCall("npu_vec_clip", (ir.BufferRegion.full(d), ir.const(-3, "int32"),
                                             ir.const(7, "int32")))
    i, j = ir.Var("i"), ir.Var("j")
    expected = ir.For(i, 16, ir.For(j, 16, ir.BufferStore(
        d, ir.min_(ir.max_(d[i, j], ir.const(-3, "int32")), ir.const(7, "int32")), (i, j))))
    assert ir.structural_equal(lower_call(call, clip), expected)


def test_a_resetting_intrinsic_zeroes_its_output_first(registry: Registry) -> None:
    gemm = registry.get("npu_gemm_reset")
    bufs = [ir.Buffer(n, (16, 16), dt, s) for n, dt, s in
            (("a", "int8", "npu.inp"), ("b", "int8", "npu.wgt"), ("c", "int32", "npu.acc"))]
    lowered = lower_call(ir.IntrinsicCall("npu_gemm_reset",
                                          tuple(ir.BufferRegion.full(b) for b in bufs)), gemm)
    assert isinstance(lowered, ir.SeqStmt)
    zero, nest = lowered.stmts
    i, j = ir.Var("i"), ir.Var("j")
    c = bufs[2]
    assert ir.structural_equal(zero, ir.For(i, 16, ir.For(j, 16, ir.BufferStore(
        c, ir.const(0, "int32"), (i, j)))))
    assert isinstance(nest, ir.For) and isinstance(nest.body.body, ir.For)


@pytest.mark.parametrize("args, fragment", [
    (lambda a, b, c: (a, b), "requires 3 arguments (A, B, C), got 2"),
    (lambda a, b, c: (a, b, ir.const(0, "int32")), "requires a buffer region for operand C"),
    (lambda a, b, c: (b, a, c), "requires a region of shape [16, 8]"),
])
def test_bad_calls_are_refused(registry: Registry, args: object, fragment: str) -> None:
    mma = registry.get("wmma_m16n16k8_tf32_f32")
    a = ir.BufferRegion.full(ir.Buffer("a", (16, 8), "float32"))
    b = ir.BufferRegion.full(ir.Buffer("b", (8, 16), "float32"))
    c = ir.BufferRegion.full(ir.Buffer("c", (16, 16), "float32"))
    call = ir.IntrinsicCall(mma.name, args(a, b, c))  # type: ignore[operator]
    with pytest.raises(ir.IRError, match=re.escape(fragment)):
        lower_call(call, mma)


def test_a_region_of_another_dtype_is_refused(registry: Registry) -> None:
    mma = registry.get("arm_smmla")
    wrong = ir.BufferRegion.full(ir.Buffer("a", (2, 8), "uint8"))
    ok = ir.BufferRegion.full(ir.Buffer("b", (2, 8), "int8"))
    acc = ir.BufferRegion.full(ir.Buffer("c", (2, 2), "int32"))
    with pytest.raises(ir.IRError, match="requires operand A of int8, got a of uint8"):
        lower_call(ir.IntrinsicCall("arm_smmla", (wrong, ok, acc)), mma)


def _tiled_gemm_kernel(m: int, n: int, k: int) -> ir.PrimFunc:
    """C[m, n] += A[m, k] @ B[k, n], every 16x16x16 tile one npu_gemm call."""
    a = ir.Buffer("A", (m, k), "int8")
    b = ir.Buffer("B", (k, n), "int8")
    c = ir.Buffer("C", (m, n), "int32")
    io, jo, ko = ir.Var("io"), ir.Var("jo"), ir.Var("ko")
    call = ir.IntrinsicCall("npu_gemm", (
        _region(a, (io * 16, 16), (ko * 16, 16)), _region(b, (ko * 16, 16), (jo * 16, 16)),
        _region(c, (io * 16, 16), (jo * 16, 16))))
    body = ir.For(io, m // 16, ir.For(jo, n // 16, ir.For(ko, k // 16, call)))
    return ir.PrimFunc("tiled_gemm", (a, b, c), ir.make_root(body))


@needs_host
def test_tensorized_kernel_runs_by_its_semantics(registry: Registry) -> None:
    from targets import host

    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (32, 48), dtype=np.int8)
    b = rng.integers(-128, 128, (48, 16), dtype=np.int8)
    c = rng.integers(-2**31, 2**31, (32, 16), dtype=np.int64).astype(np.int32)
    out = host.run(_tiled_gemm_kernel(32, 16, 48), {"A": a, "B": b, "C": c},
                   lower_intrinsic=lowerer(registry.get))
    want = (c.astype(np.int64) + a.astype(np.int64) @ b.astype(np.int64))
    want = ((want + 2**31) % 2**32 - 2**31).astype(np.int32)
    np.testing.assert_array_equal(out["C"], want)


@needs_host
def test_lowered_call_computes_what_desc_func_computes(registry: Registry) -> None:
    from targets import host

    mma = registry.get("wmma_m32n8k16_f16_f32")
    rng = np.random.default_rng(1)
    inputs = {"A": rng.uniform(-1, 1, (32, 16)).astype(np.float16),
              "B": rng.uniform(-1, 1, (16, 8)).astype(np.float16),
              "C": rng.uniform(-1, 1, (32, 8)).astype(np.float32)}
    by_semantics = host.run(mma.desc_func(), inputs)["C"]
    a, b, c = (ir.Buffer(n, v.shape, ir.dtype(v.dtype)) for n, v in inputs.items())
    call = ir.IntrinsicCall(mma.name, tuple(ir.BufferRegion.full(x) for x in (a, b, c)))
    kernel = ir.PrimFunc("k", (a, b, c), ir.make_root(call))
    by_lowering = host.run(kernel, inputs, lower_intrinsic=lowerer(registry.get))["C"]
    np.testing.assert_array_equal(by_lowering, by_semantics)
