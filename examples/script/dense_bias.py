"""Dense layer with bias in float32: Y = X @ W^T + b, with W stored as [N, K].

X is 64 x 256, W is 128 x 256 (one row per output feature), b has 128 entries. The product
goes to an intermediate buffer; a second block adds the bias.
"""

import numpy as np

from ir import script as T


@T.prim_func
def dense_bias(X: T.Buffer((64, 256), "float32"), W: T.Buffer((128, 256), "float32"),
               b: T.Buffer((128,), "float32"), Y: T.Buffer((64, 128), "float32")):
    D = T.alloc_buffer((64, 128), "float32")
    for i, j, k in T.grid(64, 128, 256):
        with T.block("dense"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                D[vi, vj] = T.float32(0)
            D[vi, vj] += X[vi, vk] * W[vj, vk]
    for i, j in T.grid(64, 128):
        with T.block("bias"):
            vi, vj = T.axis.remap("SS", [i, j])
            Y[vi, vj] = D[vi, vj] + b[vj]


def reference(X, W, bias):
    """Y = X @ W.T + bias, computed in float64."""
    return X.astype(np.float64) @ W.T.astype(np.float64) + bias
