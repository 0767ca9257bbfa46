"""bfloat16 batch matmul: 4 independent 64 x 64 x 64 products, accumulated in float32.

The batch dimension stays a loop around one GEMM per batch entry, each tensorized onto the
target's bf16 x bf16 -> fp32 instruction: ``tensorize run examples/script/batch_matmul_bf16.py
--target x86`` (VDPBF16PS), ``--target arm --features +bf16`` (BFDOT), or ``--target npu
--machine examples/machines/npu_bf16.yaml`` (the bf16 array).
"""

import numpy as np

from ir import script as T


@T.prim_func
def batch_matmul_bf16(A: T.Buffer((4, 64, 64), "bfloat16"),
                      B: T.Buffer((4, 64, 64), "bfloat16"),
                      C: T.Buffer((4, 64, 64), "float32")):
    for b, i, j, k in T.grid(4, 64, 64, 64):
        with T.block("C"):
            vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
            with T.init():
                C[vb, vi, vj] = T.float32(0)
            C[vb, vi, vj] += T.cast(A[vb, vi, vk], "float32") * T.cast(B[vb, vk, vj], "float32")


def reference(A, B):
    """C[b] = A[b] @ B[b] in float64 (every bf16 product is exact there), rounded to float32."""
    return np.einsum("bik,bkj->bij", A.astype(np.float64), B.astype(np.float64)
                     ).astype(np.float32)
