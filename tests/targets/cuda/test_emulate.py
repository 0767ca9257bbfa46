"""targets.cuda.emulate: the emitted source, compiled for the host against the WMMA and
thread-model emulation, against the reference executor."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from ir import script as T
from targets import cuda, host
from tensorize.engine import auto_tensorize
from tests.targets.cuda.helpers import TENSORIZED, emitted, random_inputs, sized
from tests.tensorize.engine.suite import suite

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="no host C++ compiler to build the emulation")


def _check(name: str, reverse: bool = False) -> None:
    original = suite()[name]
    inputs = random_inputs(original, seed=3)
    expected = host.run(original, inputs)
    actual = cuda.emulate(emitted(name), inputs, reverse=reverse)
    assert set(actual) == set(expected)
    for key, value in expected.items():
        if value.dtype.kind == "f":
            np.testing.assert_allclose(actual[key], value, rtol=1e-3, atol=1e-3)
        else:
            np.testing.assert_array_equal(actual[key], value)


@pytest.mark.parametrize("name", TENSORIZED)
def test_emulated_kernel_matches_the_reference(name):
    _check(name)


@pytest.mark.parametrize("name", ["gemm_fp16", "conv2d_nchw_int8"])
def test_threads_in_reverse_order_agree(name):
    _check(name, reverse=True)


def _without_barrier(kernel: cuda.CudaKernel, nth: int) -> cuda.CudaKernel:
    """``kernel`` without its ``nth`` barrier."""
    parts = kernel.source.split("__syncthreads();")
    source = "__syncthreads();".join(parts[:nth + 1]) + "__syncthreads();".join(parts[nth + 1:])
    return dataclasses.replace(kernel, source=source)


@pytest.mark.parametrize("nth", [0, 1])
def test_a_missing_barrier_shows(nth):
    kernel = emitted("gemm_int8", pipeline=False)
    inputs = random_inputs(suite()["gemm_int8"], seed=5)
    expected = host.run(suite()["gemm_int8"], inputs)["C"]
    broken = _without_barrier(kernel, nth)
    assert broken.source.count("__syncthreads();") == kernel.source.count("__syncthreads();") - 1
    results = [cuda.emulate(broken, inputs, reverse=r)["C"] for r in (False, True)]
    assert any(not np.array_equal(r, expected) for r in results)


def test_a_missing_warp_barrier_after_the_epilogue_shows():
    # 64 x 64: each of the 2 x 2 warps stores 2 x 2 fragments through one staging tile.
    func = sized("matmul_relu_fp16", m=64, n=64, k=32)
    kernel = cuda.emit(auto_tensorize(func, "cuda").func)
    inputs = random_inputs(func, seed=2)
    expected = host.run(func, inputs)["C"]
    np.testing.assert_allclose(cuda.emulate(kernel, inputs)["C"], expected, rtol=1e-3,
                               atol=1e-3)
    parts = kernel.source.split("__syncwarp();")
    assert len(parts) == 3
    broken = dataclasses.replace(kernel, source="__syncwarp();".join(parts[:2]) + parts[2])
    results = [cuda.emulate(broken, inputs, reverse=r)["C"] for r in (False, True)]
    assert any(not np.allclose(r, expected, rtol=1e-3, atol=1e-3) for r in results)


def test_misaligned_fragment_pointer_is_reported():
    kernel = emitted("gemm_int8")
    broken = dataclasses.replace(kernel, source=kernel.source.replace(
        ", (&A_shared[", ", (&A_shared[8 + ", 1))
    with pytest.raises(cuda.EmulationError, match="not 32-byte aligned"):
        cuda.emulate(broken, random_inputs(suite()["gemm_int8"]))


@pytest.mark.parametrize("pipeline", [False, True])
def test_misaligned_vector_copy_is_reported(pipeline):
    kernel = emitted("gemm_int8", pipeline)
    move = "tz_cp_async16" if pipeline else "tz_copy16"
    broken = dataclasses.replace(kernel, source=kernel.source.replace(
        f"{move}(&A_shared[", f"{move}(&A_shared[4 + ", 1))
    with pytest.raises(cuda.EmulationError, match="not 16-byte aligned"):
        cuda.emulate(broken, random_inputs(suite()["gemm_int8"]))


@pytest.mark.parametrize("name", ["gemm_fp16", "matmul_requant_int8"])
def test_kernels_without_double_buffering_match_too(name):
    original = suite()[name]
    inputs = random_inputs(original, seed=4)
    expected = host.run(original, inputs)
    for key, value in cuda.emulate(emitted(name, pipeline=False), inputs).items():
        np.testing.assert_allclose(value, expected[key], rtol=1e-3, atol=1e-3)


def _pipelined_gemm() -> tuple[cuda.CudaKernel, dict, np.ndarray]:
    kernel = emitted("gemm_int8")
    inputs = random_inputs(suite()["gemm_int8"], seed=6)
    return kernel, inputs, host.run(suite()["gemm_int8"], inputs)["C"]


def _wrong_in_some_order(kernel: cuda.CudaKernel, inputs: dict, expected: np.ndarray) -> bool:
    results = [cuda.emulate(kernel, inputs, reverse=r)["C"] for r in (False, True)]
    return any(not np.array_equal(r, expected) for r in results)


def test_double_buffered_gemm_is_exact_in_both_thread_orders():
    kernel, inputs, expected = _pipelined_gemm()
    assert "tz_cp_async16(&" in kernel.source
    assert not _wrong_in_some_order(kernel, inputs, expected)


def test_a_missing_barrier_after_the_wait_shows():
    kernel, inputs, expected = _pipelined_gemm()
    text = "tz_cp_async_wait_all();\n    __syncthreads();"
    assert kernel.source.count(text) == 1
    broken = dataclasses.replace(kernel, source=kernel.source.replace(
        text, "tz_cp_async_wait_all();"))
    assert _wrong_in_some_order(broken, inputs, expected)


def test_a_missing_wait_is_reported():
    kernel, inputs, _ = _pipelined_gemm()
    broken = dataclasses.replace(kernel, source=kernel.source.replace(
        "    tz_cp_async_wait_all();\n", ""))
    with pytest.raises(cuda.EmulationError, match="asynchronous copies were never waited for"):
        cuda.emulate(broken, inputs)


def test_a_wait_at_the_end_of_the_step_shows():
    # The copies land after the compute: the first step reads a stage nobody has filled.
    kernel, inputs, expected = _pipelined_gemm()
    assert _wrong_in_some_order(_wait_at_step_end(kernel), inputs, expected)


def _wait_at_step_end(kernel: cuda.CudaKernel) -> cuda.CudaKernel:
    """``kernel`` with each step's wait moved from its start to its end."""
    source = kernel.source.replace("    tz_cp_async_wait_all();\n", "", 1)
    head, loop = source.split("for (int k_0", 1)
    body_end = loop.index("\n  }\n")
    loop = loop[:body_end] + "\n    tz_cp_async_wait_all();" + loop[body_end:]
    return dataclasses.replace(kernel, source=head + "for (int k_0" + loop)


def test_a_wrong_stage_index_shows():
    kernel, inputs, expected = _pipelined_gemm()
    # The fragment loads read the stage being prefetched instead of the current one.
    assert kernel.source.count("= (k_0 % 2);") == 2
    broken = dataclasses.replace(kernel, source=kernel.source.replace(
        "= (k_0 % 2);", "= ((k_0 + 1) % 2);"))
    assert _wrong_in_some_order(broken, inputs, expected)


@T.prim_func
def _integer_semantics(A: T.Buffer((64,), "int32"), B: T.Buffer((64,), "int8"),
                       C: T.Buffer((64,), "int32"), D: T.Buffer((64,), "int8"),
                       E: T.Buffer((64,), "float16"), F: T.Buffer((64,), "float16")):
    for i in range(64):
        with T.block("ops"):
            vi = T.axis.spatial(64, i)
            C[vi] = A[vi] // 7 + A[vi] % 5 * 1000 + T.min(A[vi], 3) * 100000
            D[vi] = B[vi] * B[vi] + T.int8(100)
            F[vi] = E[vi] * E[vi] + E[vi] / T.float16(3)


def test_floor_division_wrapping_and_half_rounding_follow_the_ir():
    rng = np.random.default_rng(1)
    inputs = {"A": rng.integers(-1000, 1000, 64).astype(np.int32),
              "B": rng.integers(-128, 128, 64).astype(np.int8),
              "E": rng.standard_normal(64).astype(np.float16)}
    expected = host.run(_integer_semantics, inputs)
    actual = cuda.emulate(cuda.emit(_integer_semantics), inputs)
    for key in ("C", "D", "F"):
        np.testing.assert_array_equal(actual[key], expected[key])


@pytest.mark.parametrize("intrinsic", ["wmma_m32n8k16_s8_s32", "wmma_m8n32k16_f16_f32"])
def test_narrow_fragment_shapes_stay_aligned_in_shared_panels(intrinsic):
    name = "gemm_int8" if "s8" in intrinsic else "gemm_fp16"
    func = auto_tensorize(suite()[name], "cuda", intrinsic=intrinsic).func
    inputs = random_inputs(suite()[name])
    expected = host.run(suite()[name], inputs)["C"]
    np.testing.assert_allclose(cuda.emulate(cuda.emit(func), inputs)["C"], expected,
                               rtol=1e-3, atol=1e-3)
