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
    return A.astype(np.int32) @ B.astype(np.int32)
