"""Float GEMM, 256 x 256 x 256: float8 e4m3 operands, products accumulated in float32.

The shape of the 8-bit float tensor-core instruction (PTX ``mma.sync.m16n8k32`` e4m3, sm_89
and later, so compile it for sm_89 or sm_90). Every product of two e4m3 values is exact in
float32; only the sums round.
"""

import numpy as np

from ir import script as T


@T.prim_func
def gemm_fp8(A: T.Buffer((256, 256), "float8_e4m3"), B: T.Buffer((256, 256), "float8_e4m3"),
             C: T.Buffer((256, 256), "float32")):
    for i, j, k in T.grid(256, 256, 256):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] += T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")


def reference(A, B):
    """C = A @ B in float64, rounded once to float32 (the exact sum; the kernel's float32
    additions differ from it by a few units in the last place of the terms' magnitudes)."""
    return (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
