"""A quantised layer as onnxruntime's QGemm / QLinearConv computes it, 128 x 64 x 96: int8
GEMM into int32, plus a bias per output column, requantised by a float32 scale per output
column (per-channel weights), plus the output zero point, ReLU, narrowed to int8.

On the NPU the whole chain runs in one program: the GEMM on the array, the bias add, the
requantisation (``vec.requant``, its row of scales loaded beside the bias) and the ReLU on
the vector unit, in place on the accumulator tile, and the narrowing in the store.

The requantisation block is onnxruntime's exact order (``MlasRequantizeOutput``): the int32
value to float32, times the scale (one float32 rounding), clamped, rounded half to even,
plus the zero point. The language's float-to-int conversion truncates, so the block rounds
as MLAS does, by adding and subtracting 1.5 * 2**23 once the value is clamped to +-2**22
(where float32 holds every integer, so the sum rounds to the nearest even integer).
"""

import numpy as np

from ir import script as T

ZERO_POINT = 5


@T.prim_func
def gemm_requant_int8(A: T.Buffer((128, 96), "int8"), B: T.Buffer((96, 64), "int8"),
                      bias: T.Buffer((64,), "int32"), scale: T.Buffer((64,), "float32"),
                      out: T.Buffer((128, 64), "int8")):
    acc = T.alloc_buffer((128, 64), "int32")
    biased = T.alloc_buffer((128, 64), "int32")
    quant = T.alloc_buffer((128, 64), "int32")
    relu = T.alloc_buffer((128, 64), "int32")
    for i, j, k in T.grid(128, 64, 96):
        with T.block("acc"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                acc[vi, vj] = 0
            acc[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
    for i, j in T.grid(128, 64):
        with T.block("biased"):
            vi, vj = T.axis.remap("SS", [i, j])
            biased[vi, vj] = acc[vi, vj] + bias[vj]
    for i, j in T.grid(128, 64):
        with T.block("quant"):
            vi, vj = T.axis.remap("SS", [i, j])
            quant[vi, vj] = T.min(T.max(T.cast(
                T.min(T.max(T.cast(biased[vi, vj], "float32") * scale[vj],
                            T.float32(-4194304.0)), T.float32(4194304.0))
                + T.float32(12582912.0) - T.float32(12582912.0), "int32") + 5, -128), 127)
    for i, j in T.grid(128, 64):
        with T.block("relu"):
            vi, vj = T.axis.remap("SS", [i, j])
            relu[vi, vj] = T.max(quant[vi, vj], 5)
    for i, j in T.grid(128, 64):
        with T.block("out"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = T.cast(T.min(T.max(relu[vi, vj], -128), 127), "int8")


def reference(A, B, bias, scale):
    """The same in numpy, in MLAS's order: float32 product, clamp to the output range less
    the zero point, round half to even, plus the zero point; then ReLU (max with the zero
    point)."""
    # float64's matmul (BLAS) is exact for int8 operands while K < 2**38.
    product = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.int64).astype(np.int32)
    acc = product + bias  # int32, wrapping as the kernel's int32 add does
    value = acc.astype(np.float32) * scale.astype(np.float32)
    value = np.clip(value, np.float32(-128 - ZERO_POINT), np.float32(127 - ZERO_POINT))
    quant = np.rint(value).astype(np.int32) + ZERO_POINT
    return np.maximum(quant, ZERO_POINT).astype(np.int8)
