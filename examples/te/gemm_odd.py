"""Integer GEMM with sizes no tile divides, (100 x 36) int8 @ (36 x 60) int8 -> int32, built
with the TE builder: the same kernel as ``examples/script/gemm_odd.py``."""

import ir
from ir import te


def build(m: int = 100, n: int = 60, k: int = 36) -> ir.PrimFunc:
    """The (m x k) @ (k x n) product of int8 matrices, in int32."""
    A = te.placeholder((m, k), "int8", "A")
    B = te.placeholder((k, n), "int8", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(
        ir.cast("int32", A[i, rk]) * ir.cast("int32", B[rk, j]), axis=rk), "C")
    return te.create_prim_func([A, B, C], "gemm_odd")
