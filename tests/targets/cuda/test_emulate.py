"""targets.cuda.emulate: the emitted source, compiled for the host against the WMMA and
thread-model emulation, against the reference executor."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

import ir
from ir import script as T
from targets import cuda, host
from tensorize.engine import auto_tensorize
from tests.targets.cuda.helpers import (TENSORIZED, WMMA_INT8, emitted, gemm_source,
                                        random_inputs, sized)
from tests.tensorize.engine.suite import suite

# Every suite kernel built and emulated with g++: CI's slow pass (the default run emulates
# through test_mma, test_stages, test_implicit_gemm and the run command's tests).
pytestmark = [pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                 reason="no host C++ compiler to build the emulation"),
              pytest.mark.slow]


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


def _without_barrier(kernel: cuda.CudaKernel, nth: int,
                     barrier: str = "__syncthreads();") -> cuda.CudaKernel:
    """``kernel`` without the ``nth`` ``barrier`` of its GEMM launch."""
    gemm = gemm_source(kernel)
    parts = gemm.split(barrier)
    edited = barrier.join(parts[:nth + 1]) + barrier.join(parts[nth + 1:])
    return dataclasses.replace(kernel, source=kernel.source.replace(gemm, edited))


# The race a missing barrier leaves, as the emulation names it: an element read after
# another thread (or warp) wrote it, or written after another read it.
READ_AFTER_WRITE = (r"race on shared {buffer}\[\d+\]: read by {reader} after {writer} wrote "
                    r"it, without a barrier between")
WRITE_AFTER_READ = (r"race on shared {buffer}\[\d+\]: written by {writer} after {reader} read "
                    r"it, without a barrier between")
THREAD = r"thread \(\d+, \d+, \d+\)"
WARP = r"the wmma operation of warp \d"


def _reports(kernel: cuda.CudaKernel, inputs: dict, reverse: bool, pattern: str) -> None:
    with pytest.raises(cuda.EmulationError, match=pattern):
        cuda.emulate(kernel, inputs, reverse=reverse)


@pytest.mark.parametrize("nth", [0, 1])
def test_a_missing_barrier_is_reported_as_the_race_it_leaves(nth):
    kernel = emitted("gemm_int8", pipeline=False, intrinsic=WMMA_INT8)
    inputs = random_inputs(suite()["gemm_int8"], seed=5)
    broken = _without_barrier(kernel, nth)
    assert broken.source.count("__syncthreads();") == kernel.source.count("__syncthreads();") - 1
    # Threads in order: without the barrier after the copy (0), the first warp's fragment
    # loads read what its threads just copied; without the one after the compute (1), the
    # next step's copy overwrites what the fragment loads read. In reverse order the last
    # threads' copy lands after the other warps' fragment loads read the tile.
    forward = (READ_AFTER_WRITE.format(buffer="A_shared", reader=WARP, writer=THREAD)
               if nth == 0 else
               WRITE_AFTER_READ.format(buffer="A_shared", writer=THREAD, reader=WARP))
    _reports(broken, inputs, False, forward)
    _reports(broken, inputs, True,
             WRITE_AFTER_READ.format(buffer="A_shared", writer=THREAD, reader=WARP))


@pytest.mark.parametrize("nth", [0, 1])
def test_a_missing_warp_barrier_around_the_epilogue_is_reported(nth, registry):
    # 64 x 64: each of the 2 x 2 warps stores 2 x 2 fragments through one staging tile.
    func = sized("matmul_relu_fp16", m=64, n=64, k=32)
    kernel = cuda.emit(auto_tensorize(func, "cuda", registry=registry).func, registry)
    inputs = random_inputs(func, seed=2)
    expected = host.run(func, inputs)["C"]
    np.testing.assert_allclose(cuda.emulate(kernel, inputs)["C"], expected, rtol=1e-3,
                               atol=1e-3)
    assert kernel.source.count("__syncwarp();") == 2
    broken = _without_barrier(kernel, nth, "__syncwarp();")
    assert broken.source.count("__syncwarp();") == 1
    # Without the first, the lanes read the tile the warp's fragment store just wrote;
    # without the second, the next fragment store overwrites what the lanes read.
    pattern = (READ_AFTER_WRITE.format(buffer="Y_shared", reader=THREAD, writer=WARP)
               if nth == 0 else
               WRITE_AFTER_READ.format(buffer="Y_shared", writer=WARP, reader=THREAD))
    for reverse in (False, True):
        _reports(broken, inputs, reverse, pattern)


def test_misaligned_fragment_pointer_is_reported():
    kernel = emitted("gemm_int8", intrinsic=WMMA_INT8)
    broken = dataclasses.replace(kernel, source=kernel.source.replace(
        ", (&A_shared[", ", (&A_shared[8 + ", 1))
    with pytest.raises(cuda.EmulationError, match="not 32-byte aligned"):
        cuda.emulate(broken, random_inputs(suite()["gemm_int8"]))


@pytest.mark.parametrize("pipeline", [False, True])
def test_misaligned_vector_copy_is_reported(pipeline):
    kernel = emitted("gemm_int8", pipeline, WMMA_INT8)
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
    kernel = emitted("gemm_int8", intrinsic=WMMA_INT8)
    inputs = random_inputs(suite()["gemm_int8"], seed=6)
    return kernel, inputs, host.run(suite()["gemm_int8"], inputs)["C"]


# A fragment load of a stage whose asynchronous copy has not been waited for.
IN_FLIGHT = (r"race on shared A_shared\[\d+\]: read by the wmma operation of warp \d while an "
             r"asynchronous copy that thread \(\d+, \d+, \d+\) issued into it is in flight "
             r"\(not yet waited for\)")


def test_double_buffered_gemm_is_exact_in_both_thread_orders():
    kernel, inputs, expected = _pipelined_gemm()
    assert "tz_cp_async16(&" in kernel.source
    for reverse in (False, True):
        np.testing.assert_array_equal(cuda.emulate(kernel, inputs, reverse=reverse)["C"],
                                      expected)


def test_a_missing_barrier_after_the_wait_is_reported():
    kernel, inputs, _ = _pipelined_gemm()
    # The loop's barrier (the head's, before the loop, is indented less).
    text = "tz_cp_async_wait_group<1>();\n    __syncthreads();"
    assert kernel.source.count(text) == 1
    broken = dataclasses.replace(kernel, source=kernel.source.replace(
        text, "tz_cp_async_wait_group<1>();"))
    _reports(broken, inputs, False,
             READ_AFTER_WRITE.format(buffer="A_shared", reader=WARP, writer=THREAD))
    # In reverse order the last warp loads the next stage before the first threads, which
    # run later, have waited for their copies into it.
    _reports(broken, inputs, True, IN_FLIGHT)


def test_a_missing_wait_is_reported():
    kernel, inputs, _ = _pipelined_gemm()
    broken = dataclasses.replace(kernel, source=kernel.source.replace(
        "    tz_cp_async_wait_group<1>();\n", ""))
    with pytest.raises(cuda.EmulationError, match="asynchronous copies were never waited for"):
        cuda.emulate(broken, inputs)


def test_a_wait_at_the_end_of_the_step_is_reported():
    # The copies land after the compute: the first step reads a stage still in flight.
    kernel, inputs, _ = _pipelined_gemm()
    for reverse in (False, True):
        _reports(_wait_at_step_end(kernel), inputs, reverse, IN_FLIGHT)


def _wait_at_step_end(kernel: cuda.CudaKernel) -> cuda.CudaKernel:
    """``kernel`` with each step's wait moved from its start to its end."""
    source = kernel.source.replace("    tz_cp_async_wait_group<1>();\n", "", 1)
    head, loop = source.split("for (int k_0", 1)
    body_end = loop.index("\n  }\n")
    loop = loop[:body_end] + "\n    tz_cp_async_wait_group<1>();" + loop[body_end:]
    return dataclasses.replace(kernel, source=head + "for (int k_0" + loop)


def test_a_wrong_stage_index_is_reported():
    kernel, inputs, _ = _pipelined_gemm()
    # The fragment loads of the next step read the stage being prefetched instead of its
    # own: in either thread order, the copies just issued into it are still in flight.
    assert kernel.source.count("= ((k_0 + 1) % 3);") == 2
    broken = dataclasses.replace(kernel, source=kernel.source.replace(
        "= ((k_0 + 1) % 3);", "= ((k_0 + 2) % 3);"))
    for reverse in (False, True):
        _reports(broken, inputs, reverse, IN_FLIGHT)


# 64 threads (two warps) on one shared array of 64 ints; BODY is what each thread t does.
RACE = """#include <mma.h>
extern "C" __global__ void race_k0(int* __restrict__ C) {
  __shared__ __align__(128) int s[64];
  tz_shared_declare(s, "s");
  const int t = threadIdx.x;
BODY
}
"""


def _race_kernel(body: str) -> cuda.CudaKernel:
    out = ir.Buffer("C", (64,), "int32")
    return cuda.CudaKernel("race", RACE.replace("BODY", body),
                           (cuda.Launch("race_k0", (1, 1, 1), (64, 1, 1)),), ("C",), (out,),
                           ("C",))


INITIALISE = "  tz_shared_store(s, t) = t;\n"
# Each thread reads its right neighbour's element, then overwrites its own.
SHIFT = ("  const int v = tz_shared_load(s, (t + 1) % 64);\n"
         "  tz_shared_store(s, t) = v;\n  C[t] = v;\n")


@pytest.mark.parametrize(("body", "reverse", "report"), [
    # Thread 1 overwrites s[1], which thread 0 read in the same interval between barriers:
    # initialised before the barrier, so a race, not an uninitialised read.
    (INITIALISE + "  __syncthreads();\n" + SHIFT, False,
     "race on shared s[1]: written by thread (1, 0, 0) after thread (0, 0, 0) read it, "
     "without a barrier between"),
    # In reverse order thread 62 reads s[63] after thread 63 overwrote it.
    (INITIALISE + "  __syncthreads();\n" + SHIFT, True,
     "race on shared s[63]: read by thread (62, 0, 0) after thread (63, 0, 0) wrote it, "
     "without a barrier between"),
    # Nothing initialised: thread 0 reads s[1] before thread 1 writes it; the write names it.
    (SHIFT, False,
     "race on shared s[1]: written by thread (1, 0, 0) after thread (0, 0, 0) read it, "
     "without a barrier between"),
    # A warp barrier orders the threads of a warp only: thread 0 (warp 0) reads s[63],
    # which thread 63 (warp 1) wrote.
    (INITIALISE + "  __syncwarp();\n  C[t] = tz_shared_load(s, 63 - t);\n", False,
     "race on shared s[63]: read by thread (0, 0, 0) after thread (63, 0, 0) wrote it, "
     "without a barrier between"),
    # Two threads write one element.
    ("  tz_shared_store(s, t / 2) = t;\n", False,
     "race on shared s[0]: written by thread (1, 0, 0) after thread (0, 0, 0) wrote it, "
     "without a barrier between"),
    ("  C[t] = tz_shared_load(s, t);\n", False,
     "uninitialised read of shared s[0] by thread (0, 0, 0): no thread of the block wrote it"),
])
def test_shared_memory_findings_name_the_buffer_element_and_threads(body, reverse, report):
    with pytest.raises(cuda.EmulationError) as caught:
        cuda.emulate(_race_kernel(body), {}, reverse=reverse)
    assert str(caught.value) == f"race_k0: block (0, 0, 0): {report}"


@pytest.mark.parametrize("barrier", ["__syncthreads();", "__syncwarp();"])
def test_ordered_accesses_are_not_reported(barrier):
    # A thread reads its own warp's neighbour after the barrier: ordered by either barrier.
    neighbour = "  C[t] = tz_shared_load(s, t ^ 1);\n"
    result = cuda.emulate(_race_kernel(INITIALISE + f"  {barrier}\n" + neighbour), {})
    np.testing.assert_array_equal(result["C"], np.arange(64) ^ 1)


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


def test_floor_division_wrapping_and_half_rounding_follow_the_ir(registry):
    rng = np.random.default_rng(1)
    inputs = {"A": rng.integers(-1000, 1000, 64).astype(np.int32),
              "B": rng.integers(-128, 128, 64).astype(np.int8),
              "E": rng.standard_normal(64).astype(np.float16)}
    expected = host.run(_integer_semantics, inputs)
    actual = cuda.emulate(cuda.emit(_integer_semantics, registry), inputs)
    for key in ("C", "D", "F"):
        np.testing.assert_array_equal(actual[key], expected[key])


@pytest.mark.parametrize("intrinsic", ["wmma_m32n8k16_s8_s32", "wmma_m8n32k16_f16_f32"])
def test_narrow_fragment_shapes_stay_aligned_in_shared_panels(intrinsic, registry):
    name = "gemm_int8" if "s8" in intrinsic else "gemm_fp16"
    func = auto_tensorize(suite()[name], "cuda", intrinsic=intrinsic, registry=registry).func
    inputs = random_inputs(suite()[name])
    expected = host.run(suite()[name], inputs)["C"]
    np.testing.assert_allclose(cuda.emulate(cuda.emit(func, registry), inputs)["C"], expected,
                               rtol=1e-3, atol=1e-3)
