"""A quantised layer's tail, 128 x 64 x 96: int8 GEMM into int32, plus a bias per output
column, ReLU, then narrowed to int8 with saturation.

On the NPU the whole chain runs in one program: the bias add and the ReLU on the vector
unit, in place on the accumulator tile, and the narrowing in the store.
"""

import numpy as np

from ir import script as T


@T.prim_func
def gemm_bias_relu_int8(A: T.Buffer((128, 96), "int8"), B: T.Buffer((96, 64), "int8"),
                        bias: T.Buffer((64,), "int32"), out: T.Buffer((128, 64), "int8")):
    acc = T.alloc_buffer((128, 64), "int32")
    biased = T.alloc_buffer((128, 64), "int32")
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
        with T.block("relu"):
            vi, vj = T.axis.remap("SS", [i, j])
            relu[vi, vj] = T.max(biased[vi, vj], 0)
    for i, j in T.grid(128, 64):
        with T.block("out"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = T.cast(T.min(T.max(relu[vi, vj], -128), 127), "int8")


def reference(A, B, bias):
    """The same in numpy, exactly."""
    # float64's matmul (BLAS) is exact for int8 operands while K < 2**38: every partial sum
    # is an integer below 2**53 (numpy's integer matmul is exact too, but has no BLAS path).
    product = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.int64).astype(np.int32)
    acc = product + bias
    return np.clip(np.maximum(acc, 0), -128, 127).astype(np.int8)
