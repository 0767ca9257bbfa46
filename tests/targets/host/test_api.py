"""The host backend's entry points: compile, run, emit_llvm, and their argument checks."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from targets import host
from tests.targets.host.kernels import elementwise, te_builder


@pytest.fixture(scope="module")
def gemm() -> ir.PrimFunc:
    return te_builder("gemm_odd")(m=3, n=4, k=5)


def _operands() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    return (rng.integers(-9, 9, (3, 5)).astype(np.int8),
            rng.integers(-9, 9, (5, 4)).astype(np.int8))


def test_compiled_function_runs_in_place(gemm: ir.PrimFunc) -> None:
    a, b = _operands()
    out = np.zeros((3, 4), np.int32)
    host.compile(gemm)(a, b, out)
    np.testing.assert_array_equal(out, a.astype(np.int32) @ b.astype(np.int32))


def test_compiling_the_same_function_again_reuses_the_code(gemm: ir.PrimFunc) -> None:
    assert host.compile(gemm) is host.compile(gemm)


def test_a_different_lowering_hook_compiles_anew(gemm: ir.PrimFunc) -> None:
    assert host.compile(gemm, lower_intrinsic=lambda call: call) is not host.compile(gemm)


def test_run_takes_inputs_by_name_and_returns_what_is_written(gemm: ir.PrimFunc) -> None:
    a, b = _operands()
    results = host.run(gemm, {"B": b, "A": a})
    assert list(results) == ["C"]
    np.testing.assert_array_equal(results["C"], a.astype(np.int32) @ b.astype(np.int32))


def test_run_leaves_its_inputs_alone(gemm: ir.PrimFunc) -> None:
    a, b = _operands()
    c = np.full((3, 4), 5, np.int32)
    host.run(gemm, [a, b, c])
    np.testing.assert_array_equal(c, 5)


def test_run_starts_parameters_not_given_at_zero(gemm: ir.PrimFunc) -> None:
    a, _ = _operands()
    np.testing.assert_array_equal(host.run(gemm, [a])["C"], 0)


@pytest.mark.parametrize(("array", "message"), [
    (np.zeros((3, 5), np.int16), "parameter A requires dtype int8, got int16"),
    (np.zeros((5, 3), np.int8), r"parameter A requires shape \(3, 5\), got \(5, 3\)"),
    ([[0] * 5] * 3, "parameter A requires a numpy array, got list"),
    (np.zeros((5, 3), np.int8).T, r"parameter A requires element strides \(5, 1\)"),
])
def test_compiled_function_refuses_mismatched_arrays_naming_the_parameter(
        gemm: ir.PrimFunc, array: object, message: str) -> None:
    _, b = _operands()
    with pytest.raises(ir.ExecutionError, match=message):
        host.compile(gemm)(array, b, np.zeros((3, 4), np.int32))  # type: ignore[arg-type]


def test_compiled_function_requires_one_array_per_parameter(gemm: ir.PrimFunc) -> None:
    with pytest.raises(ir.ExecutionError, match=r"requires 3 arrays \(A, B, C\), got 1"):
        host.compile(gemm)(np.zeros((3, 5), np.int8))


def test_run_refuses_unknown_parameter_names(gemm: ir.PrimFunc) -> None:
    with pytest.raises(ir.ExecutionError, match="has no parameter D; it has A, B, C"):
        host.run(gemm, {"D": np.zeros(1)})


def test_run_refuses_inputs_of_another_dtype(gemm: ir.PrimFunc) -> None:
    with pytest.raises(ir.ExecutionError, match="input B requires dtype int8, got float64"):
        host.run(gemm, {"B": np.zeros((5, 4))})


def test_emit_llvm_shows_the_function_and_its_wrapping_arithmetic() -> None:
    text = host.emit_llvm(elementwise(lambda x, y: x * y, ["int8", "int8"], 4))
    assert 'define void @"tensorize_elementwise"' in text
    assert "mul i8" in text
    assert "nsw" not in text  # wrapping arithmetic: no no-signed-wrap promise
