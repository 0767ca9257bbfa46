# corpus: names that clash once sanitised, name macros, or name what the emitters introduce
# args: run {file} --func status
# expect: ok   execute
# expect: INT_MAX against numpy reference(...): all 1024 elements equal (exact)
# exit: 0
"""Built with the TE builder, whose names are any strings: ``NULL``, ``INT_MAX``, ``stdin``,
``errno`` and ``EOF`` (macros of the C headers), ``half`` and ``wmma`` (names CUDA kernels
use), ``status`` and ``entry`` (the LLVM emitters' own names), ``tz_tid`` and ``lane`` (the
CUDA emitter's), ``a b`` and ``a_b`` (one identifier once sanitised). ``status`` (int8) runs
on the host, npu, arm and cuda, ``EOF`` (uint8 activations) on x86; see the mangle_clashes_*
cases."""

import numpy as np

import ir
from ir import te


def _gemm(func, a, a_dtype, b, c, k, product):
    A = te.placeholder((32, 32), a_dtype, a)
    B = te.placeholder((32, 32), "int8", b)
    rk = te.reduce_axis(32, k)
    return te.create_prim_func([A, B, te.compute((32, 32), product(A, B, rk), c)], func)


def _product(A, B, rk):
    return lambda stdin, errno: te.sum(
        ir.cast("int32", A[stdin, rk]) * ir.cast("int32", B[rk, errno]), axis=rk)


def _product_u8(A, B, rk):
    return lambda NULL, wmma: te.sum(
        ir.cast("int32", A[NULL, rk]) * ir.cast("int32", B[rk, wmma]), axis=rk)


# The spatial iterators take the lambdas' parameter names: stdin and errno, NULL and wmma.
status = _gemm("status", "NULL", "int8", "half", "INT_MAX", "entry", _product)
EOF_ = _gemm("EOF", "a b", "uint8", "a_b", "tz_tid", "lane", _product_u8)


def reference(a, b):
    """The exact int32 product."""
    return a.astype(np.int32) @ b.astype(np.int32)
