"""float16 GEMM, 256 x 256 x 256: float16 inputs, products accumulated in float32.

The operand types of WMMA's f16 -> f32 and of Arm's FMLAL (FEAT_FHM), whose every fp16 product
is exact in float32:
``tensorize run examples/script/gemm_fp16.py --target arm --features +fp16fml``.
"""

import numpy as np

from ir import script as T


@T.prim_func
def gemm_fp16(A: T.Buffer((256, 256), "float16"), B: T.Buffer((256, 256), "float16"),
              C: T.Buffer((256, 256), "float32")):
    for i, j, k in T.grid(256, 256, 256):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0.0
            C[vi, vj] += T.cast(A[vi, vk], "float32") * T.cast(B[vk, vj], "float32")


def reference(A, B):
    """C = A @ B in float64 (every float16 product is exact there), rounded to float32."""
    return (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
