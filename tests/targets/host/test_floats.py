"""Floating-point semantics: per-operation rounding of the 16-bit floats, conversions, NaN,
math functions, against numpy and ml_dtypes."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import ir
from targets import host
from tests.targets.host.kernels import elementwise

RNG = np.random.default_rng(11)
BF16 = np.dtype(ml_dtypes.bfloat16)
NUMPY = {"float16": np.dtype(np.float16), "bfloat16": BF16, "float32": np.dtype(np.float32),
         "float64": np.dtype(np.float64)}


def _floats(dt: str, n: int, scale: float = 50.0) -> np.ndarray:
    with np.errstate(over="ignore"):  # the tail beyond float16's range becomes infinity
        return (RNG.standard_normal(n) * scale).astype(NUMPY[dt])


def _run(func: ir.PrimFunc, *inputs: np.ndarray) -> np.ndarray:
    return host.run(func, list(inputs))["C"]


def _same_bits(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype
    width = f"uint{got.dtype.itemsize * 8}"
    np.testing.assert_array_equal(got.view(width), expected.view(width))


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_16_bit_arithmetic_rounds_after_every_operation(dt: str) -> None:
    a, b, c, d = (_floats(dt, 2000) for _ in range(4))
    func = elementwise(lambda w, x, y, z: (w * x + y) / z - w, [dt] * 4, 2000)
    with np.errstate(all="ignore"):
        expected = (a * b + c) / d - a
    _same_bits(_run(func, a, b, c, d), expected)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_16_bit_overflow_gives_infinity(dt: str) -> None:
    big = np.full(4, 60000.0 if dt == "float16" else 3e38, NUMPY[dt])
    with np.errstate(over="ignore"):
        _same_bits(_run(elementwise(lambda x, y: x * y, [dt, dt], 4), big, big), big * big)


@pytest.mark.parametrize(("src", "dst"), [
    ("float32", "float16"), ("float32", "bfloat16"), ("float64", "float16"),
    ("float64", "bfloat16"), ("float16", "float32"), ("bfloat16", "float32"),
    ("float16", "bfloat16"), ("bfloat16", "float16"), ("float32", "float64"),
    ("float64", "float32"), ("int32", "float16"), ("int32", "bfloat16"), ("int8", "float32"),
    ("uint32", "float32"), ("int64", "float64"),
])
def test_conversions_round_like_numpy_and_ml_dtypes(src: str, dst: str) -> None:
    if src in NUMPY:
        values = np.concatenate([_floats(src, 3000, 1.0), _floats(src, 3000, 30000.0)])
    else:
        info = np.iinfo(src)
        values = RNG.integers(info.min, info.max, 6000, endpoint=True).astype(src)
        values[:6] = np.array([2049, 2051, 65519, 65520, 2**24 + 3, (1 << 30) + (1 << 22) + 1],
                              dtype=np.int64).astype(src)
    out = _run(elementwise(lambda x: ir.cast(dst, x), [src], values.size), values)
    with np.errstate(over="ignore"):
        _same_bits(out, values.astype(NUMPY[dst]))


def test_double_to_half_rounds_once_at_ties() -> None:
    # Values just above a half tie: rounding through float32 to nearest would land on the tie
    # and then round to even, one ulp short.
    ulp = 2.0 ** -10
    values = np.array([1 + ulp / 2 + 2.0 ** -40, 1 + 3 * ulp / 2 - 2.0 ** -40,
                       -(1 + ulp / 2 + 2.0 ** -40), 2.0 ** -24 * 1.5 + 2.0 ** -60])
    out = _run(elementwise(lambda x: ir.cast("float16", x), ["float64"], 4), values)
    _same_bits(out, values.astype(np.float16))


def test_bfloat16_nan_stays_nan_with_its_sign() -> None:
    values = np.array([np.nan, -np.nan, np.inf, -np.inf], np.float32)
    out = _run(elementwise(lambda x: ir.cast("bfloat16", x), ["float32"], 4), values)
    _same_bits(out, values.astype(BF16))


def test_float_min_max_propagate_nan() -> None:
    a = np.array([np.nan, 1.0, 2.0, np.nan], np.float32)
    b = np.array([0.0, np.nan, 3.0, np.nan], np.float32)
    smallest = _run(elementwise(lambda x, y: ir.min_(x, y), ["float32"] * 2, 4), a, b)
    largest = _run(elementwise(lambda x, y: ir.max_(x, y), ["float32"] * 2, 4), a, b)
    np.testing.assert_array_equal(smallest, np.minimum(a, b))
    np.testing.assert_array_equal(largest, np.maximum(a, b))


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons_with_nan_follow_ieee(op: str) -> None:
    a = np.array([np.nan, 1.0, 2.0, np.nan, 2.0], np.float32)
    b = np.array([0.0, np.nan, 2.0, np.nan, 1.0], np.float32)
    func = elementwise(lambda x, y: ir.BinOp(op, x, y), ["float32"] * 2, 5)
    reference = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                 "gt": np.greater, "ge": np.greater_equal}[op]
    np.testing.assert_array_equal(_run(func, a, b), reference(a, b))


def test_float_to_bool_is_true_for_nonzero_and_nan() -> None:
    a = np.array([0.0, -0.0, 1.5, np.nan], np.float32)
    out = _run(elementwise(lambda x: ir.cast("bool", x), ["float32"], 4), a)
    np.testing.assert_array_equal(out, a.astype(bool))


_MATH = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "abs": np.abs,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "erf": np.vectorize(math.erf),
}


@pytest.mark.parametrize("name", sorted(_MATH))
@pytest.mark.parametrize("dt", ["float32", "float64", "float16"])
def test_math_functions_match_numpy(name: str, dt: str) -> None:
    signs = 1 if name in ("log", "sqrt") else RNG.choice([-1, 1], 300)
    values = (RNG.uniform(0.01, 4.0, 300) * signs).astype(NUMPY[dt])
    func = elementwise(lambda x: ir.Call(name, (x,), x.dtype), [dt], 300)
    expected = _MATH[name](values.astype(np.float64))
    tolerance = {"float16": 1e-3, "float32": 1e-6, "float64": 1e-12}[dt]
    np.testing.assert_allclose(_run(func, values).astype(np.float64), expected, rtol=tolerance,
                               atol=tolerance)


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_rint_rounds_ties_to_even_exactly_as_numpy(dt: str) -> None:
    ties = np.array([-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 2 ** 23 + 0.5], NUMPY[dt])
    values = np.concatenate([ties, (RNG.standard_normal(200) * 1000).astype(NUMPY[dt])])
    func = elementwise(lambda x: ir.Call("rint", (x,), x.dtype), [dt], values.size)
    got = _run(func, values)
    _same_bits(got, np.rint(values))
    np.testing.assert_array_equal(got[:8], [-4, -2, -2, -0.0, 0, 2, 2, 4])
