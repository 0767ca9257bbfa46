"""float16 batch matmul: 4 independent 64 x 64 x 64 products, accumulated in float32.

The batch dimension stays a loop around one GEMM per batch entry, each tensorized onto the
target's f16 x f16 -> f32 instruction: ``tensorize run examples/script/batch_matmul_fp16.py
--target cuda`` (WMMA or ``mma.sync``), or ``--target arm --features +fp16fml`` (FMLAL).
"""

import numpy as np

from ir import script as T


@T.prim_func
def batch_matmul_fp16(A: T.Buffer((4, 64, 64), "float16"),
                      B: T.Buffer((4, 64, 64), "float16"),
                      C: T.Buffer((4, 64, 64), "float32")):
    for b, i, j, k in T.grid(4, 64, 64, 64):
        with T.block("C"):
            vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
            with T.init():
                C[vb, vi, vj] = T.float32(0)
            C[vb, vi, vj] += T.cast(A[vb, vi, vk], "float32") * T.cast(B[vb, vk, vj], "float32")


def reference(A, B):
    """C[b] = A[b] @ B[b] in float64 (every f16 product is exact there), rounded to float32."""
    return np.einsum("bik,bkj->bij", A.astype(np.float64), B.astype(np.float64)
                     ).astype(np.float32)
