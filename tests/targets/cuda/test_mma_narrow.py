"""The narrow mma.sync families of intrinsics/cuda_mma.yaml: 4-bit integers (m16n8k64 s4/u4,
sm_80) and 8-bit floats (m16n8k32 e4m3/e5m2 -> f32, sm_89). GEMMs tensorized with them are
exact under the per-lane emulation (integers against numpy's int32 product; floats against
float32 sums in k order, the order the emulation states, and close to float64), and nvcc
compiles them for their architectures without spills (slow)."""

from __future__ import annotations

import dataclasses
import shutil
from functools import cache
from pathlib import Path

import numpy as np
import pytest

import ir
from intrinsics import default_registry
from ir import dtypes, te
from targets import cuda
from targets.cuda.compile import CompileError, nvcc_path, resource_usage
from targets.cuda.emulate import COPY_MODES
from targets.cuda.errors import EmitError
from tensorize.cli import main
from tensorize.engine import auto_tensorize, count_calls

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="no host C++ compiler to build the emulation")
needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found")

SHORT = {"int4": "s4", "uint4": "u4", "float8_e4m3": "e4m3", "float8_e5m2": "e5m2"}


def _gemm(a: str, b: str, size: int) -> ir.PrimFunc:
    acc = "int32" if dtypes.dtype(a).is_int else "float32"
    A = te.placeholder((size, size), a, "A")
    B = te.placeholder((size, size), b, "B")
    rk = te.reduce_axis(size, "k")
    C = te.compute((size, size), lambda i, j: te.sum(
        ir.cast(acc, A[i, rk]) * ir.cast(acc, B[rk, j]), axis=rk), "C")
    return te.create_prim_func([A, B, C], f"gemm_{SHORT[a]}{SHORT[b]}")


def _intrinsic(a: str, b: str) -> str:
    if dtypes.dtype(a).is_int:
        return f"mma_m16n8k64_{SHORT[a]}{SHORT[b]}_s32"
    return f"mma_m16n8k32_{SHORT[a]}{SHORT[b]}_f32"


@cache
def _kernel(a: str, b: str, size: int) -> cuda.CudaKernel:
    registry = default_registry()
    func = auto_tensorize(_gemm(a, b, size), "cuda", registry=registry).func
    m, n, k = registry.get(_intrinsic(a, b)).extents
    padded = [-(-size // t) * t for t in (m, n, k)]
    assert count_calls(func)[_intrinsic(a, b)] == np.prod(padded) // (m * n * k)
    return cuda.emit(func, registry)


def _inputs(a: str, b: str, size: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, dt in (("A", dtypes.dtype(a)), ("B", dtypes.dtype(b))):
        if dt.is_int:
            # Both ends of the range always in, where a sign or nibble mix-up shows.
            values = rng.integers(dt.min, dt.max + 1, (size, size))
            values.flat[:2] = dt.min, dt.max
        else:
            values = rng.standard_normal((size, size)) * 4
        out[name] = dtypes.narrow_array(values, dt)
    return out


def _float32_in_k_order(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The emulation's accumulation: each C element a float32 sum of exact products, in
    increasing k."""
    total = np.zeros((a.shape[0], b.shape[1]), np.float32)
    wide_a, wide_b = a.astype(np.float32), b.astype(np.float32)
    for k in range(a.shape[1]):
        total += wide_a[:, k:k + 1] * wide_b[k:k + 1, :]
    return total


def _check(a: str, b: str, size: int, seed: int = 3) -> None:
    kernel = _kernel(a, b, size)
    inputs = _inputs(a, b, size, seed)
    x, y = inputs["A"], inputs["B"]
    for copies in COPY_MODES:
        out = cuda.emulate(kernel, inputs, copies=copies)["C"]
        if dtypes.dtype(a).is_int:
            np.testing.assert_array_equal(out, x.astype(np.int32) @ y.astype(np.int32))
            continue
        np.testing.assert_array_equal(out, _float32_in_k_order(x, y))
        exact = x.astype(np.float64) @ y.astype(np.float64)
        magnitude = np.abs(x.astype(np.float64)) @ np.abs(y.astype(np.float64))
        assert np.all(np.abs(out - exact) <= size * 2.0 ** -24 * magnitude)


@pytest.mark.parametrize("a, b", [("int4", "int4"), pytest.param(
    "float8_e4m3", "float8_e4m3", marks=pytest.mark.slow)])
def test_gemm_is_exact_under_the_per_lane_emulation(a, b):
    _check(a, b, 64)


@pytest.mark.slow
@pytest.mark.parametrize("a, b, size", [
    ("uint4", "uint4", 64), ("int4", "uint4", 64), ("uint4", "int4", 96),
    ("float8_e5m2", "float8_e5m2", 64), ("float8_e4m3", "float8_e5m2", 64),
    ("float8_e5m2", "float8_e4m3", 80),
    # The examples' size, in the narrow types' 128 x 128 block (warps of 64 x 32).
    ("int4", "int4", 256), ("float8_e4m3", "float8_e4m3", 256)])
def test_every_pair_and_padded_sizes_are_exact(a, b, size):
    _check(a, b, size)


def test_the_fragments_are_loaded_per_lane_and_packed():
    body = _kernel("int4", "int4", 64).source
    assert "tz_lds_a_m16k64_4bit(" in body and "tz_lds_b_k64n8_4bit(" in body
    assert "tz_mma_m16n8k64_s4_s4_s32(" in body and "ldmatrix" not in body.split("__global__")[1]
    fp8 = _kernel("float8_e4m3", "float8_e4m3", 64).source
    assert "#include <cuda_fp8.h>" in fp8 and "tz_mma_m16n8k32_e4m3_e4m3_f32(" in fp8


@pytest.mark.slow
@pytest.mark.parametrize("right, wrong", [
    # The nibbles of a register in the other order (the higher k in the low nibble).
    ("(tz_shared_load(column, (32 * r + s) * ld_bytes) & 0xfu) << 4 * s",
     "(tz_shared_load(column, (32 * r + s) * ld_bytes) & 0xfu) << 4 * (7 - s)"),
    # A's second and third registers swapped (rows 8-15 taken for the next 32 of k).
    ("row + r % 2 * 8 * ld_bytes + r / 2 * 32", "row + r / 2 * 8 * ld_bytes + r % 2 * 32"),
])
def test_a_wrong_packing_or_lane_mapping_gives_wrong_numbers(right, wrong):
    kernel = _kernel("int4", "int4", 64)
    assert kernel.source.count(right) == 1
    broken = dataclasses.replace(kernel, source=kernel.source.replace(right, wrong))
    inputs = _inputs("int4", "int4", 64, seed=5)
    expected = inputs["A"].astype(np.int32) @ inputs["B"].astype(np.int32)
    assert not np.array_equal(cuda.emulate(broken, inputs)["C"], expected)


def test_arithmetic_in_a_narrow_type_is_refused():
    X = te.placeholder((32,), "int4", "X")
    Y = te.compute((32,), lambda i: X[i] + X[i], "Y")
    with pytest.raises(EmitError, match="does not compute in int4"):
        cuda.emit(te.create_prim_func([X, Y], "add_int4"), default_registry())


# (dtypes, architectures it runs natively on, the PTX instruction)
COMPILED = [
    (("int4", "int4"), ("sm_80", "sm_89"), "mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32"),
    (("uint4", "int4"), ("sm_80",), "mma.sync.aligned.m16n8k64.row.col.s32.u4.s4.s32"),
    (("float8_e4m3", "float8_e4m3"), ("sm_89", "sm_90"),
     "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"),
    (("float8_e5m2", "float8_e4m3"), ("sm_89",),
     "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e4m3.f32"),
]


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize("pair, archs, instruction", COMPILED)
def test_compiles_without_spills(pair, archs, instruction):
    kernel = _kernel(*pair, 64)
    for arch in archs:
        assert instruction in cuda.compile(kernel, arch).decode()
        for r in resource_usage(kernel, arch):
            assert (r.spill_stores, r.spill_loads, r.stack_frame) == (0, 0, 0), r


@pytest.mark.slow
@needs_nvcc
def test_fp8_does_not_compile_before_sm_89():
    with pytest.raises(CompileError, match="tz_mma_m16n8k32_e4m3_e4m3_f32"):
        cuda.compile(_kernel("float8_e4m3", "float8_e4m3", 64), "sm_80")


@pytest.mark.slow
@needs_nvcc
def test_a_run_skips_the_architectures_an_intrinsic_is_too_new_for(capsys):
    example = Path(__file__).resolve().parents[3] / "examples" / "script" / "gemm_fp8.py"
    assert main(["run", str(example), "--target", "cuda", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "skip compile     nvcc -arch=sm_80: mma_m16n8k32_e4m3e4m3_f32 needs sm_89" in out
    assert "ok   compile     nvcc -arch=sm_90" in out
