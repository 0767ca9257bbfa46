"""Matrix multiply then ReLU, 128 x 128 x 128 in float32: C = max(A @ B, 0).

Two blocks: ``Y`` accumulates the product into an intermediate buffer, ``C`` clamps it.
"""

import numpy as np

from ir import script as T


@T.prim_func
def matmul_relu(A: T.Buffer((128, 128), "float32"), B: T.Buffer((128, 128), "float32"),
                C: T.Buffer((128, 128), "float32")):
    Y = T.alloc_buffer((128, 128), "float32")
    for i, j, k in T.grid(128, 128, 128):
        with T.block("Y"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                Y[vi, vj] = T.float32(0)
            Y[vi, vj] = Y[vi, vj] + A[vi, vk] * B[vk, vj]
    for i, j in T.grid(128, 128):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = T.max(Y[vi, vj], T.float32(0))


def reference(A, B):
    """C = max(A @ B, 0), computed in float64."""
    return np.maximum(A.astype(np.float64) @ B.astype(np.float64), 0)
