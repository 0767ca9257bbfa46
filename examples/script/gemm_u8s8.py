"""Integer GEMM, 256 x 256 x 256: uint8 activations times int8 weights, accumulated in int32.

The operand types of x86's VPDPBUSD (AVX-512 VNNI, AVX-VNNI) and of quantized inference with
asymmetric activations: ``tensorize run examples/script/gemm_u8s8.py --target x86``.
"""

import numpy as np

from ir import script as T


@T.prim_func
def gemm_u8s8(A: T.Buffer((256, 256), "uint8"), B: T.Buffer((256, 256), "int8"),
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
