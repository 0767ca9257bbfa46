"""Integer GEMM with sizes no tile divides: (100 x 36) int8 @ (36 x 60) int8 -> int32.

Mapping it onto a 16 x 16 (or 4 x 4) instruction needs padding or a guarded remainder.
"""

import numpy as np

from ir import script as T


@T.prim_func
def gemm_odd(A: T.Buffer((100, 36), "int8"), B: T.Buffer((36, 60), "int8"),
             C: T.Buffer((100, 60), "int32")):
    for i, j, k in T.grid(100, 60, 36):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")


def reference(A, B):
    """C = A @ B, exact in int32."""
    # numpy's integer matmul has no BLAS path (3 s at 1024^3); float64's takes 0.04 s and is
    # exact here: every product is below 2**15 in magnitude, so every partial sum of K of
    # them is an integer below 2**53 while K < 2**38. The int64 step wraps to int32 as the
    # kernel's int32 accumulator does.
    return (A.astype(np.float64) @ B.astype(np.float64)).astype(np.int64).astype(np.int32)
