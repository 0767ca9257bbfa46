"""Integer GEMM, 256 x 256 x 256: int4 operands, products accumulated in int32.

The shape of the 4-bit tensor-core instruction (PTX ``mma.sync.m16n8k64`` s4, sm_80 and
later): both operands widened before the multiply. numpy holds int4 one value to a byte
(ml_dtypes), and so does device memory; the CUDA backend packs two to a register byte, the
lower k in the low nibble, as it loads each fragment (docs/cuda_backend.md).
"""

import numpy as np

from ir import script as T


@T.prim_func
def gemm_int4(A: T.Buffer((256, 256), "int4"), B: T.Buffer((256, 256), "int4"),
              C: T.Buffer((256, 256), "int32")):
    for i, j, k in T.grid(256, 256, 256):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")


def reference(A, B):
    """C = A @ B, exact in int32: every product is at most 64 in magnitude, so float64's
    matmul is exact (partial sums stay far below 2**53)."""
    return (A.astype(np.float64) @ B.astype(np.float64)).astype(np.int32)
