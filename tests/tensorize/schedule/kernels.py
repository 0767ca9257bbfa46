"""Kernels the schedule tests transform, and the before/after check they all use."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import ir
from ir import te
from targets import host


def gemm_int8(m: int = 32, n: int = 24, k: int = 16) -> ir.PrimFunc:
    """C[i, j] = sum_k int32(A[i, k]) * int32(B[k, j]), one block "C"."""
    A = te.placeholder((m, k), "int8", "A")
    B = te.placeholder((k, n), "int8", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(ir.cast("int32", A[i, rk])
                                               * ir.cast("int32", B[rk, j]), axis=rk), "C")
    return te.create_prim_func([A, B, C], "gemm_int8")


def gemm_bf16(m: int, n: int, k: int) -> ir.PrimFunc:
    """C = A @ B, A and B bfloat16, products accumulated in float32, one block "C"."""
    A = te.placeholder((m, k), "bfloat16", "A")
    B = te.placeholder((k, n), "bfloat16", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(
        ir.cast("float32", A[i, rk]) * ir.cast("float32", B[rk, j]), axis=[rk]), "C")
    return te.create_prim_func([A, B, C], "gemm_bf16")


def bf16_inputs(m: int, n: int, k: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of :func:`gemm_bf16`: normal values, with a few denormals and zeros of each
    sign in both operands."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    for x in (a, b):
        x.flat[:4] = np.array([1e-39, -1e-39, 0.0, -0.0], np.float32).astype(ml_dtypes.bfloat16)
    return {"A": a, "B": b}


def bf16_one_lane(c: float, a: tuple[float, float], b: tuple[float, float], lanes: int
                  ) -> dict[str, np.ndarray]:
    """Inputs of one call of a bf16 pair-dot intrinsic of ``lanes`` fp32 lanes whose lane 0
    holds ``c`` and multiplies the pair ``a`` by the pair ``b``; the other lanes zero."""
    panel = np.zeros((lanes, 2), ml_dtypes.bfloat16)
    panel[0] = np.array(b, np.float32).astype(ml_dtypes.bfloat16)
    acc = np.zeros(lanes, np.float32)
    acc[0] = c
    return {"A": np.array(a, np.float32).astype(ml_dtypes.bfloat16), "B": panel, "C": acc}


def batch_matmul(b: int = 3, m: int = 16, n: int = 12, k: int = 8) -> ir.PrimFunc:
    """C[b, i, j] = sum_k A[b, i, k] * B[b, k, j] in int32, one block "C"."""
    A = te.placeholder((b, m, k), "int32", "A")
    B = te.placeholder((b, k, n), "int32", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((b, m, n), lambda x, i, j: te.sum(A[x, i, rk] * B[x, rk, j], axis=rk), "C")
    return te.create_prim_func([A, B, C], "batch_matmul")


def conv2d_nhwc(h: int = 8, w: int = 8, ci: int = 8, co: int = 16) -> ir.PrimFunc:
    """3x3, stride 1, padding 1, int8 -> int32: blocks "pad" and "conv"."""
    I = te.placeholder((1, h, w, ci), "int8", "I")
    W = te.placeholder((3, 3, ci, co), "int8", "W")
    P = te.compute((1, h + 2, w + 2, ci), lambda n, y, x, c: ir.select(
        ir.and_(ir.and_(y >= 1, y < h + 1), ir.and_(x >= 1, x < w + 1)),
        I[n, ir.min_(ir.max_(y - 1, 0), h - 1), ir.min_(ir.max_(x - 1, 0), w - 1), c],
        ir.const(0, "int8")), "pad")
    rh, rw, rc = te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw"), te.reduce_axis(ci, "rc")
    O = te.compute((1, h, w, co), lambda n, y, x, o: te.sum(
        ir.cast("int32", P[n, y + rh, x + rw, rc]) * ir.cast("int32", W[rh, rw, rc, o]),
        axis=[rh, rw, rc]), "conv")
    return te.create_prim_func([I, W, O], "conv2d_nhwc")


def matmul_relu(m: int = 16, n: int = 16, k: int = 16) -> ir.PrimFunc:
    """Y = A @ B (float32) then C = max(Y, 0): blocks "Y" and "C"."""
    A = te.placeholder((m, k), "float32", "A")
    B = te.placeholder((k, n), "float32", "B")
    rk = te.reduce_axis(k, "k")
    Y = te.compute((m, n), lambda i, j: te.sum(A[i, rk] * B[rk, j], axis=rk), "Y")
    C = te.compute((m, n), lambda i, j: ir.max_(Y[i, j], 0.0), "C")
    return te.create_prim_func([A, B, C], "matmul_relu")


# name -> (builder, the reduction block, its output)
KERNELS = {
    "gemm_int8": (gemm_int8, "C"),
    "batch_matmul": (batch_matmul, "C"),
    "conv2d_nhwc": (conv2d_nhwc, "conv"),
    "matmul_relu": (matmul_relu, "Y"),
}


def random_inputs(func: ir.PrimFunc, seed: int = 0) -> list[np.ndarray]:
    """One random array per parameter: whole-range integers, standard normal floats."""
    rng = np.random.default_rng(seed)
    arrays = []
    for param in func.params:
        dt = param.dtype
        if dt.is_int:
            arrays.append(rng.integers(dt.min, dt.max + 1, param.shape).astype(dt.numpy))
        else:
            arrays.append(rng.standard_normal(param.shape).astype(dt.numpy))
    return arrays


def assert_same_results(before: ir.PrimFunc, after: ir.PrimFunc, seed: int = 0,
                        lower_intrinsic=None) -> None:
    """Run both functions on the same random inputs (outputs start random too, so a missing
    init shows) and compare every output: exactly for integers, to 1e-5 relative for floats."""
    inputs = random_inputs(before, seed)
    want = host.run(before, inputs)
    got = host.run(after, inputs, lower_intrinsic)
    assert set(got) == set(want), (sorted(got), sorted(want))
    for name, expected in want.items():
        if expected.dtype.kind in "iub":
            np.testing.assert_array_equal(got[name], expected, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5, err_msg=name)
