"""A quantised ResNet residual block's end, 128 x 64 x 96: an int8 GEMM into int32, plus a
bias per output column, requantised by a float32 scale per column (onnxruntime's QGemm /
QLinearConv), then onnxruntime's QLinearAdd of that int8 output and a skip tensor, then
ReLU, narrowed to int8.

On the NPU the whole chain is one program that never leaves on-chip memory between the
steps: the GEMM on the array; the bias add, the requantisation and the residual add on the
vector unit, in place on the accumulator tile; the narrowing in the store. The skip tile
arrives beside the accumulator tile by a widening load (int8 in DRAM, int32 on chip:
``npu_load_acc_i8``), and the add's three float32 parameter rows by one load.

The add is onnxruntime's QLinearAdd (MLAS): with ``ratio_a = a_scale / y_scale``, ``ratio_b
= b_scale / y_scale`` and ``offset = y_zp - (ratio_a * a_zp + ratio_b * b_zp)`` in float32
(the rows of ``params``: ``ir.onnx.kernels.qadd_parameters`` computes them), the output is
``round_half_even(fma(a, ratio_a, fma(b, ratio_b, offset)))``, clipped. A fused
multiply-add is one float32 rounding of the exact value; the kernel language has no fma, so
the block writes it as the float64 value (exact product, one rounding of the sum) rounded to
float32. ReLU on the quantised output is the lower bound ``Y_ZERO_POINT``.
"""

import numpy as np

from ir import script as T

ZERO_POINT = 5  # the requantised GEMM output's zero point
Y_ZERO_POINT = -3  # the add's output zero point: ReLU clips there


@T.prim_func
def gemm_requant_add_relu_int8(A: T.Buffer((128, 96), "int8"), B: T.Buffer((96, 64), "int8"),
                               bias: T.Buffer((64,), "int32"),
                               scale: T.Buffer((64,), "float32"),
                               skip: T.Buffer((128, 64), "int8"),
                               params: T.Buffer((3, 64), "float32"),
                               out: T.Buffer((128, 64), "int8")):
    acc = T.alloc_buffer((128, 64), "int32")
    biased = T.alloc_buffer((128, 64), "int32")
    quant = T.alloc_buffer((128, 64), "int32")
    added = T.alloc_buffer((128, 64), "int32")
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
        with T.block("added"):
            vi, vj = T.axis.remap("SS", [i, j])
            added[vi, vj] = T.cast(T.min(T.max(T.rint(T.cast(
                T.cast(T.cast(quant[vi, vj], "float32"), "float64")
                * T.cast(params[0, vj], "float64")
                + T.cast(T.cast(T.cast(T.cast(skip[vi, vj], "float32"), "float64")
                                * T.cast(params[1, vj], "float64")
                                + T.cast(params[2, vj], "float64"), "float32"), "float64"),
                "float32")), T.cast(-3, "float32")), T.cast(127, "float32")), "int32")
    for i, j in T.grid(128, 64):
        with T.block("out"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = T.cast(T.min(T.max(added[vi, vj], -128), 127), "int8")


def _fma(x, y, z):
    """float32 ``x * y + z`` rounded once (the float64 product of float32 values is exact)."""
    return (x.astype(np.float64) * y.astype(np.float64) + z.astype(np.float64)).astype(np.float32)


def reference(A, B, bias, scale, skip, params):
    """The same in numpy: the GEMM, MLAS's requantisation (float32 product, clamp to the
    output range less the zero point, round half to even, plus the zero point), then MLAS's
    QLinearAdd with the per-column ratios and offset of ``params``, then ReLU."""
    # float64's matmul (BLAS) is exact for int8 operands while K < 2**38.
    product = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.int64).astype(np.int32)
    value = (product + bias).astype(np.float32) * scale.astype(np.float32)
    value = np.clip(value, np.float32(-128 - ZERO_POINT), np.float32(127 - ZERO_POINT))
    quant = np.rint(value).astype(np.int32) + ZERO_POINT
    ratio_a, ratio_b, offset = params.astype(np.float32)
    total = _fma(quant.astype(np.float32), ratio_a, _fma(skip.astype(np.float32), ratio_b, offset))
    return np.clip(np.rint(total), Y_ZERO_POINT, 127).astype(np.int8)
