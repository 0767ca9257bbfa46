"""The host backend's loop interchange: a reduction's innermost spatial loop moves inside its
reduce loops, and the result is exactly what the written order computes."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from ir import te
from ir.stmt import For
from targets import host
from targets.host.interchange import sink_spatial_loops
from tensorize.schedule import tree


def loop_order(func: ir.PrimFunc) -> list[str]:
    return [stmt.var.name for stmt, _ in tree.walk_stmts(func) if isinstance(stmt, For)]


def gemm(m: int, n: int, k: int, dtype: str, acc: str) -> ir.PrimFunc:
    A = te.placeholder((m, k), dtype, "A")
    B = te.placeholder((k, n), dtype, "B")
    r = te.reduce_axis(k, "r")
    C = te.compute((m, n), lambda i, j: te.sum(
        ir.cast(acc, A[i, r]) * ir.cast(acc, B[r, j]), axis=[r]), "C")
    return te.create_prim_func([A, B, C], "gemm")


def dense(m: int, n: int, k: int) -> ir.PrimFunc:
    """Y = X @ W^T: the spatial loop indexes W's first dimension, so it stays outside."""
    X = te.placeholder((m, k), "int8", "X")
    W = te.placeholder((n, k), "int8", "W")
    r = te.reduce_axis(k, "r")
    Y = te.compute((m, n), lambda i, j: te.sum(
        ir.cast("int32", X[i, r]) * ir.cast("int32", W[j, r]), axis=[r]), "Y")
    return te.create_prim_func([X, W, Y], "dense")


def depthwise(size: int, channels: int) -> ir.PrimFunc:
    I = te.placeholder((1, size + 2, size + 2, channels), "int8", "I")
    W = te.placeholder((3, 3, channels), "int8", "W")
    rh, rw = te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw")
    O = te.compute((1, size, size, channels), lambda n, h, w, c: te.sum(
        ir.cast("int32", I[n, h + rh, w + rw, c]) * ir.cast("int32", W[rh, rw, c]),
        axis=[rh, rw]), "O")
    return te.create_prim_func([I, W, O], "depthwise")


def test_gemm_moves_its_column_loop_inside_the_reduction():
    func = gemm(15, 17, 33, "int8", "int32")
    before = loop_order(func)
    after = loop_order(sink_spatial_loops(func))
    assert after == [before[0], before[2], before[1]]


def test_depthwise_moves_its_channel_loop_inside_both_reduce_loops():
    func = depthwise(5, 16)
    n, h, w, c, rh, rw = loop_order(func)
    assert loop_order(sink_spatial_loops(func)) == [n, h, w, rh, rw, c]


@pytest.mark.parametrize("func", [dense(16, 17, 31)], ids=["dense"])
def test_a_nest_whose_inner_loop_would_stride_is_left_as_it_is(func):
    assert sink_spatial_loops(func) is func


@pytest.mark.parametrize(("m", "n", "k"), [(15, 16, 17), (31, 32, 33), (16, 33, 300)])
def test_int8_gemm_is_exact(m, n, k):
    rng = np.random.default_rng(m * n * k)
    A = rng.integers(-128, 128, (m, k)).astype(np.int8)
    B = rng.integers(-128, 128, (k, n)).astype(np.int8)
    A[0, :], B[:, 0] = -128, -128
    got = host.run(gemm(m, n, k, "int8", "int32"), {"A": A, "B": B})["C"]
    np.testing.assert_array_equal(got, A.astype(np.int64) @ B.astype(np.int64))


def test_int32_gemm_wraps_as_the_written_order_does():
    rng = np.random.default_rng(1)
    A = rng.integers(-2**31, 2**31, (9, 40), dtype=np.int64).astype(np.int32)
    B = rng.integers(-2**31, 2**31, (40, 17), dtype=np.int64).astype(np.int32)
    got = host.run(gemm(9, 17, 40, "int32", "int32"), {"A": A, "B": B})["C"]
    want = ((A.astype(np.int64) @ B.astype(np.int64)) % 2**32).astype(np.uint32)
    np.testing.assert_array_equal(got.view(np.uint32), want)


def test_float_gemm_keeps_each_elements_accumulation_order():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((17, 33)).astype(np.float32) * 1e4
    B = rng.standard_normal((33, 31)).astype(np.float32)
    got = host.run(gemm(17, 31, 33, "float32", "float32"), {"A": A, "B": B})["C"]
    want = np.zeros((17, 31), np.float32)
    for r in range(33):
        want = want + A[:, r, None] * B[None, r, :]
    np.testing.assert_array_equal(got, want)


def test_depthwise_is_exact():
    rng = np.random.default_rng(3)
    I = rng.integers(-128, 128, (1, 9, 9, 17)).astype(np.int8)
    W = rng.integers(-128, 128, (3, 3, 17)).astype(np.int8)
    got = host.run(depthwise(7, 17), {"I": I, "W": W})["O"]
    want = sum(I[:, a:a + 7, b:b + 7, :].astype(np.int64) * W[a, b].astype(np.int64)
               for a in range(3) for b in range(3))
    np.testing.assert_array_equal(got, want)
