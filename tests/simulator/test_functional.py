"""Values computed by each instruction, against numpy references computed independently."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from simulator import assemble, simulate
from tests.simulator.helpers import dram_with, small_machine

I32 = np.iinfo(np.int32)


def run(text: str, dram: np.ndarray):
    return simulate(assemble(text), small_machine(), dram)


def read_i32(dram: np.ndarray, addr: int, rows: int, cols: int, stride: int) -> np.ndarray:
    """rows x cols int32 read back from ``dram`` with a byte stride."""
    return np.stack([dram[addr + r * stride:addr + r * stride + 4 * cols].view("<i4")
                     for r in range(rows)])


def test_load_and_store_move_strided_int32_tiles():
    rng = np.random.default_rng(1)
    src = rng.integers(I32.min, I32.max, (5, 6), dtype=np.int32, endpoint=True)
    # Rows of 3 elements, from a 6-wide matrix (stride 24 B) into a 10-wide one (40 B).
    text = """
    load acc[8], dram[0x0], rows=5, cols=3, stride=24 | push_next
    nop.compute | pop_prev, push_next
    store dram[0x100], acc[8], rows=5, cols=3, stride=40 | pop_prev
    finish
    """
    result = run(text, dram_with(1024, src=(0, src)))
    assert np.array_equal(read_i32(result.dram, 0x100, 5, 3, 40), src[:, :3])
    # Bytes between the stored rows are untouched.
    assert not result.dram[0x100 + 12:0x100 + 40].any()


def test_store_narrows_with_saturation():
    values = np.array([[-(2 ** 31), -129, -128, 5], [127, 128, 70000, -1]], np.int32)
    text = """
    load acc[0], dram[0x0], rows=2, cols=4, stride=16 | push_next
    nop.compute | pop_prev, push_next
    store dram[0x80], acc[0], rows=2, cols=4, stride=4, int8 | pop_prev
    finish
    """
    result = run(text, dram_with(256, v=(0, values)))
    out = result.dram[0x80:0x88].view(np.int8).reshape(2, 4)
    assert out.tolist() == [[-128, -128, -128, 5], [127, 127, 127, -1]]


GEMM = """
load inp[0], dram[0x0], rows={m}, cols={k}, stride={k}
load wgt[0], dram[0x100], rows={k}, cols=4, stride=4 | push_next
gemm acc[0], inp[0], wgt[0], rows={m}, k={k}{reset} | pop_prev, push_next
store dram[0x200], acc[0], rows={m}, cols=4, stride=16 | pop_prev
finish
"""


def gemm_case(a: np.ndarray, b: np.ndarray, acc: np.ndarray | None) -> np.ndarray:
    """Run GEMM (accumulating onto ``acc`` if given) and return the stored int32 result."""
    m, k = a.shape
    program = GEMM.format(m=m, k=k, reset="" if acc is not None else ", reset")
    regions = {"a": (0, a.astype(np.int8)), "b": (0x100, b.astype(np.int8))}
    if acc is not None:
        # Preload the accumulator from DRAM at 0x300 before the gemm.
        program = (f"load acc[0], dram[0x300], rows={m}, cols=4, stride=16\n" + program)
        regions["acc"] = (0x300, acc.astype(np.int32))
    result = run(program, dram_with(1024, **regions))
    return read_i32(result.dram, 0x200, m, 4, 16)


def test_gemm_reset_with_int8_extremes():
    a = np.array([[-128, -128, -128, -128], [127, -128, 127, -128], [127, 127, 127, 127]])
    b = np.array([[-128] * 4, [127] * 4, [-128, 127, 0, 1], [1, 2, 3, -128]])
    expected = a.astype(np.int64) @ b.astype(np.int64)
    assert np.array_equal(gemm_case(a, b, None), expected)


def test_gemm_with_k_below_r_ignores_zero_filled_columns():
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (6, 3))
    b = rng.integers(-128, 128, (3, 4))
    assert np.array_equal(gemm_case(a, b, None), a @ b)


def test_gemm_accumulates_with_int32_wraparound():
    a = np.full((2, 4), -128)
    b = np.full((4, 4), -128)
    acc = np.array([[I32.max] * 4, [I32.min] * 4])
    # 4 * 16384 = 65536 added to INT32_MAX wraps to INT32_MIN + 65535.
    expected = ((acc.astype(np.int64) + a @ b + 2 ** 31) % 2 ** 32 - 2 ** 31)
    assert np.array_equal(gemm_case(a, b, acc), expected)
    assert gemm_case(a, b, acc)[0, 0] == I32.min + 65535


def vec_case(op_line: str, x: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
    """Load x (rows x 4 int32) into acc[0] and y into acc[16], run ``op_line``, store acc[0]."""
    rows = x.shape[0]
    regions = {"x": (0, x.astype(np.int32))}
    loads = f"load acc[0], dram[0x0], rows={rows}, cols=4, stride=16"
    if y is not None:
        regions["y"] = (0x200, y.astype(np.int32))
        loads += f"\nload acc[16], dram[0x200], rows={y.shape[0]}, cols=4, stride=16"
    text = f"""{loads} | push_next
    {op_line} | pop_prev, push_next
    store dram[0x400], acc[0], rows={rows}, cols=4, stride=16 | pop_prev
    finish
    """
    return read_i32(run(text, dram_with(2048, **regions)).dram, 0x400, rows, 4, 16)


X = np.array([[I32.max, I32.min, -7, 7], [0, 1, -1, 100], [5, -5, 3, -3]])
Y = np.array([[1, -1, 8, -8], [0, 0, 0, 0], [-6, 6, 2, -2]])


def wrap(v: np.ndarray) -> np.ndarray:
    return (v.astype(np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31


def test_vec_add_tile_row_and_immediate():
    assert np.array_equal(vec_case("vec.add acc[0], acc[16], rows=3", X, Y), wrap(X + Y))
    assert np.array_equal(vec_case("vec.add acc[0], acc[16], rows=3, bcast", X, Y[:1]),
                          wrap(X + Y[0]))
    assert np.array_equal(vec_case("vec.add acc[0], rows=3, imm=-9", X), wrap(X - 9))


def test_vec_min_max_clip_relu():
    assert np.array_equal(vec_case("vec.min acc[0], acc[16], rows=3", X, Y), np.minimum(X, Y))
    assert np.array_equal(vec_case("vec.max acc[0], rows=3, imm=2", X), np.maximum(X, 2))
    assert np.array_equal(vec_case("vec.max acc[0], acc[16], rows=3, bcast", X, Y[2:]),
                          np.maximum(X, Y[2]))
    assert np.array_equal(vec_case("vec.clip acc[0], rows=3, lo=-6, hi=50", X),
                          np.clip(X, -6, 50))
    assert np.array_equal(vec_case("vec.relu acc[0], rows=3", X), np.maximum(X, 0))


def reference_mulshift(x: int, mult: int, shift: int) -> int:
    """round(x * mult / 2**shift), ties away from zero, saturated to int32, by fractions."""
    exact = Fraction(x * mult, 2 ** shift)
    magnitude = int(abs(exact) + Fraction(1, 2))
    value = magnitude if exact >= 0 else -magnitude
    return max(I32.min, min(I32.max, value))


def test_vec_mulshift_rounds_ties_away_from_zero():
    x = np.array([[5, -5, 7, -7], [3, -3, 1, -1], [0, 4, -4, 6]])
    out = vec_case("vec.mulshift acc[0], rows=3, mult=1, shift=1", x)
    # 2.5 -> 3, -2.5 -> -3, 3.5 -> 4, -3.5 -> -4, 1.5 -> 2, ..., 0.5 -> 1, -0.5 -> -1
    assert out.tolist() == [[3, -3, 4, -4], [2, -2, 1, -1], [0, 2, -2, 3]]


@given(st.lists(st.integers(I32.min, I32.max), min_size=4, max_size=4),
       st.integers(I32.min, I32.max), st.integers(0, 62))
def test_vec_mulshift_matches_exact_rational_rounding(row, mult, shift):
    x = np.array([row])
    out = vec_case(f"vec.mulshift acc[0], rows=1, mult={mult}, shift={shift}", x)
    assert out[0].tolist() == [reference_mulshift(v, mult, shift) for v in row]


def test_tile_products_run_on_one_blas_thread(monkeypatch):
    from threadpoolctl import threadpool_info

    from simulator import datapath

    seen = []
    exact = datapath.TileProduct.__call__

    def recording(self, acc, inp, wgt, reset):
        seen.extend(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")
        exact(self, acc, inp, wgt, reset)

    monkeypatch.setattr(datapath.TileProduct, "__call__", recording)
    a = np.arange(12).reshape(3, 4) - 6
    b = np.arange(16).reshape(4, 4) - 8
    assert np.array_equal(gemm_case(a, b, None), a @ b)
    assert seen and set(seen) == {1}
