"""Batched matrix multiply in float32, built with the TE builder: the same kernel as
``examples/script/batch_matmul.py``."""

import ir
from ir import te


def build(batch: int = 4, m: int = 64, n: int = 64, k: int = 64) -> ir.PrimFunc:
    """``batch`` independent (m x k) @ (k x n) products."""
    A = te.placeholder((batch, m, k), "float32", "A")
    B = te.placeholder((batch, k, n), "float32", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((batch, m, n), lambda b, i, j: te.sum(A[b, i, rk] * B[b, rk, j], axis=rk),
                   "C")
    return te.create_prim_func([A, B, C], "batch_matmul")
