"""Dense layer with bias in float32, Y = X @ W^T + b with W stored as [N, K], built with the
TE builder: the same kernel as ``examples/script/dense_bias.py``.

Blocks are named after their computes, so the output parameter is called ``bias`` here.
"""

import ir
from ir import te


def build(m: int = 64, n: int = 128, k: int = 256) -> ir.PrimFunc:
    """X (m x k) times W (n x k) transposed, plus b (n)."""
    X = te.placeholder((m, k), "float32", "X")
    W = te.placeholder((n, k), "float32", "W")
    b = te.placeholder((n,), "float32", "b")
    rk = te.reduce_axis(k, "k")
    D = te.compute((m, n), lambda i, j: te.sum(X[i, rk] * W[j, rk], axis=rk), "dense")
    Y = te.compute((m, n), lambda i, j: D[i, j] + b[j], "bias")
    return te.create_prim_func([X, W, b, Y], "dense_bias")
