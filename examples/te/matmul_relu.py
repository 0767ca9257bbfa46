"""Matrix multiply then ReLU in float32, C = max(A @ B, 0), built with the TE builder.

The same kernel as ``examples/script/matmul_relu.py``: block ``Y`` accumulates the product
into an intermediate, block ``C`` clamps it.
"""

import ir
from ir import te


def build(m: int = 128, n: int = 128, k: int = 128) -> ir.PrimFunc:
    """The (m x k) @ (k x n) product followed by ReLU."""
    A = te.placeholder((m, k), "float32", "A")
    B = te.placeholder((k, n), "float32", "B")
    rk = te.reduce_axis(k, "k")
    Y = te.compute((m, n), lambda i, j: te.sum(A[i, rk] * B[rk, j], axis=rk), "Y")
    C = te.compute((m, n), lambda i, j: ir.max_(Y[i, j], 0.0), "C")
    return te.create_prim_func([A, B, C], "matmul_relu")
