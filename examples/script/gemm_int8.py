"""Integer GEMM, 256 x 256 x 256: int8 operands, products accumulated in int32.

Both operands are widened before the multiply, the shape of the int8 dot-product and tensor
core instructions.
"""

import numpy as np

from ir import script as T


@T.prim_func
def gemm_int8(A: T.Buffer((256, 256), "int8"), B: T.Buffer((256, 256), "int8"),
              C: T.Buffer((256, 256), "int32")):
    for i, j, k in T.grid(256, 256, 256):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")


def reference(A, B):
    """C = A @ B, exact in int32."""
    return A.astype(np.int32) @ B.astype(np.int32)
