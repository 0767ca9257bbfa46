"""Integer semantics: wrapping arithmetic, floor division, casts, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from ir import te
from targets import host
from tests.targets.host.kernels import elementwise, te_builder

RNG = np.random.default_rng(7)


def _ints(dt: str, n: int) -> np.ndarray:
    info = np.iinfo(dt)
    values = RNG.integers(info.min, info.max, n, endpoint=True).astype(dt)
    values[:4] = [info.min, info.max, 0, info.min + 1]
    return values


def _run(func: ir.PrimFunc, *inputs: np.ndarray) -> np.ndarray:
    return host.run(func, list(inputs))["C"]


def test_int8_extremes_accumulate_exactly_into_int32_over_long_k() -> None:
    k = 4096
    A = np.full((2, k), -128, np.int8)
    A[1, ::2] = 127
    B = np.full((k, 3), -128, np.int8)
    B[::3, 1] = 127
    out = host.run(te_builder("gemm_int8")(m=2, n=3, k=k), [A, B])["C"]
    np.testing.assert_array_equal(out, A.astype(np.int64) @ B.astype(np.int64))


def test_int32_accumulation_wraps_like_numpy() -> None:
    A = te.placeholder((4, 300), "int32", "A")
    k = te.reduce_axis(300, "k")
    C = te.compute((4,), lambda i: te.sum(A[i, k] * 3, axis=k), "C")
    a = RNG.integers(2**29, 2**31 - 1, (4, 300)).astype(np.int32)
    out = _run(te.create_prim_func([A, C]), a)
    np.testing.assert_array_equal(out, (a * np.int32(3)).sum(axis=1, dtype=np.int32))


@pytest.mark.parametrize("dt", ["int8", "int16", "uint8", "int32"])
def test_add_sub_mul_wrap_in_their_dtype(dt: str) -> None:
    a, b, c = _ints(dt, 500), _ints(dt, 500), _ints(dt, 500)
    out = _run(elementwise(lambda x, y, z: x * y - z + x, [dt, dt, dt], 500), a, b, c)
    np.testing.assert_array_equal(out, a * b - c + a)


@pytest.mark.parametrize("dt", ["int8", "int16", "int32", "uint8", "uint16"])
def test_floordiv_and_floormod_round_toward_negative_infinity(dt: str) -> None:
    a, b = _ints(dt, 600), _ints(dt, 600)
    info = np.iinfo(dt)
    b[:8] = [1, 0, 3, 7, info.max, 2, 0, info.max]
    if info.min < 0:
        b[8:12] = [-1, -1, -3, -7]
        a[8] = info.min  # MIN // -1 wraps back to MIN in numpy
    with np.errstate(divide="ignore", over="ignore"):
        expected_q, expected_r = a // b, a % b
    np.testing.assert_array_equal(_run(elementwise(lambda x, y: x // y, [dt, dt], 600), a, b),
                                  expected_q)
    np.testing.assert_array_equal(_run(elementwise(lambda x, y: x % y, [dt, dt], 600), a, b),
                                  expected_r)


def test_floordiv_by_negative_constant() -> None:
    a = np.arange(-20, 20, dtype=np.int32)
    quotient = _run(elementwise(lambda x: x // -3, ["int32"], 40), a)
    remainder = _run(elementwise(lambda x: x % -3, ["int32"], 40), a)
    np.testing.assert_array_equal(quotient, a // -3)
    np.testing.assert_array_equal(remainder, a % -3)


@pytest.mark.parametrize(("src", "dst"), [
    ("int32", "int8"), ("int32", "uint8"), ("int16", "int8"), ("int8", "int32"),
    ("uint8", "int32"), ("int8", "uint16"), ("uint16", "int16"), ("int32", "int64"),
    ("int64", "int16"), ("uint32", "int8"), ("int8", "bool"), ("bool", "int32"),
])
def test_integer_casts_wrap_and_extend_like_numpy(src: str, dst: str) -> None:
    values = RNG.integers(0, 2, 300).astype(bool) if src == "bool" else _ints(src, 300)
    out = _run(elementwise(lambda x: ir.cast(dst, x), [src], 300), values)
    np.testing.assert_array_equal(out, values.astype(dst))


@pytest.mark.parametrize("dst", ["int8", "uint8", "int16", "int32", "int64"])
def test_float_to_int_truncates_toward_zero_then_wraps(dst: str) -> None:
    values = np.concatenate([RNG.uniform(-1000, 1000, 300),
                             [2.5, -2.5, 0.99, -0.99, 127.9, -128.9, 255.5, 300.7, -129.5]])
    values = values.astype(np.float32)
    out = _run(elementwise(lambda x: ir.cast(dst, x), ["float32"], values.size), values)
    np.testing.assert_array_equal(out, np.trunc(values).astype(np.int64).astype(dst))


@pytest.mark.parametrize("dt", ["int8", "uint8", "int32", "uint32"])
def test_min_max_and_comparisons_respect_signedness(dt: str) -> None:
    a, b = _ints(dt, 400), _ints(dt, 400)
    smallest = _run(elementwise(lambda x, y: ir.min_(x, y), [dt, dt], 400), a, b)
    largest = _run(elementwise(lambda x, y: ir.max_(x, y), [dt, dt], 400), a, b)
    less = _run(elementwise(lambda x, y: x < y, [dt, dt], 400), a, b)
    np.testing.assert_array_equal(smallest, np.minimum(a, b))
    np.testing.assert_array_equal(largest, np.maximum(a, b))
    np.testing.assert_array_equal(less, a < b)


def test_select_and_logic_on_integers() -> None:
    a, b = _ints("int16", 300), _ints("int16", 300)
    func = elementwise(lambda x, y: ir.select(ir.or_(ir.and_(x > 0, y < 0), ir.Not(x < y)),
                                              x - y, y), ["int16", "int16"], 300)
    expected = np.where(((a > 0) & (b < 0)) | ~(a < b), a - b, b)
    np.testing.assert_array_equal(_run(func, a, b), expected)


def test_signed_abs_wraps_at_minimum() -> None:
    a = _ints("int8", 100)
    out = _run(elementwise(lambda x: ir.Call("abs", (x,), x.dtype), ["int8"], 100), a)
    np.testing.assert_array_equal(out, np.abs(a))
