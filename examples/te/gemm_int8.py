"""Integer GEMM with int8 operands accumulated in int32, built with the TE builder.

The same kernel as ``examples/script/gemm_int8.py``: both operands are widened before the
multiply.
"""

import ir
from ir import te


def build(m: int = 256, n: int = 256, k: int = 256) -> ir.PrimFunc:
    """The (m x k) @ (k x n) product of int8 matrices, in int32."""
    A = te.placeholder((m, k), "int8", "A")
    B = te.placeholder((k, n), "int8", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(
        ir.cast("int32", A[i, rk]) * ir.cast("int32", B[rk, j]), axis=rk), "C")
    return te.create_prim_func([A, B, C], "gemm_int8")
