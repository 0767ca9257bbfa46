"""Batched matrix multiply in float32: 4 independent 64 x 64 x 64 products."""

import numpy as np

from ir import script as T


@T.prim_func
def batch_matmul(A: T.Buffer((4, 64, 64), "float32"), B: T.Buffer((4, 64, 64), "float32"),
                 C: T.Buffer((4, 64, 64), "float32")):
    for b, i, j, k in T.grid(4, 64, 64, 64):
        with T.block("C"):
            vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
            with T.init():
                C[vb, vi, vj] = T.float32(0)
            C[vb, vi, vj] += A[vb, vi, vk] * B[vb, vk, vj]


def reference(A, B):
    """C[b] = A[b] @ B[b], computed in float64."""
    return np.einsum("bik,bkj->bij", A.astype(np.float64), B.astype(np.float64))
