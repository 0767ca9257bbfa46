"""float16 dense layer: Y = X @ W^T with W stored as [N, K], accumulated in float32.

X is 64 x 256, W is 128 x 256 (one row per output feature), as a fully connected layer stores
them: ``tensorize run examples/script/dense_fp16.py --target cuda`` (WMMA or ``mma.sync``), or
``--target arm --features +fp16fml`` (FMLAL).
"""

import numpy as np

from ir import script as T


@T.prim_func
def dense_fp16(X: T.Buffer((64, 256), "float16"), W: T.Buffer((128, 256), "float16"),
               Y: T.Buffer((64, 128), "float32")):
    for i, j, k in T.grid(64, 128, 256):
        with T.block("dense"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                Y[vi, vj] = T.float32(0)
            Y[vi, vj] += T.cast(X[vi, vk], "float32") * T.cast(W[vj, vk], "float32")


def reference(X, W):
    """Y = X @ W.T in float64 (every f16 product is exact there), rounded to float32."""
    return (X.astype(np.float64) @ W.T.astype(np.float64)).astype(np.float32)
