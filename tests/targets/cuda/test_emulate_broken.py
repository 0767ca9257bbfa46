"""targets.cuda.emulate against deliberately broken kernels: the multistage int8 GEMM in the
simple form with one bug injected into its emitted source, each caught with its message whether
asynchronous copies land at their wait or at their issue; and the bounds checks."""

from __future__ import annotations

import dataclasses
import shutil
from functools import cache

import numpy as np
import pytest

from intrinsics import default_registry
from targets import cuda, host
from targets.cuda.emulate import COPY_MODES
from tensorize.engine import auto_tensorize
from tests.targets.cuda.helpers import WMMA_INT8, emitted, random_inputs, sized, tensorized
from tests.targets.cuda.test_emulate import THREAD, WARP, WRITE_AFTER_READ, _race_kernel
from tests.tensorize.engine.suite import suite

# Each case builds an emulation with g++: the injected-bug suite runs in CI's slow pass.
pytestmark = [pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                 reason="no host C++ compiler to build the emulation"),
              pytest.mark.slow]

WAIT_AND_BARRIER = "tz_cp_async_wait_group<1>();\n    __syncthreads();"
# The step's compute starts after the prefetch is committed.
COMPUTE = "    tz_cp_async_commit();\n    { const int i_1"
A_PREFETCH = "&A[(ax0_9) * 64 + (((k_0 + 2) % 4) * 16)]"
A_FRAGMENT_LDM = "((v0_o * 16)) * 16 + (0)]), 16);"


@cache
def _simple_form() -> cuda.CudaKernel:
    return cuda.emit(tensorized("gemm_int8", WMMA_INT8), default_registry(),
                     double_fragments=False)


def _gemm() -> tuple[cuda.CudaKernel, dict[str, np.ndarray]]:
    """The pipelined int8 GEMM in the simple form (each step opens with its wait and
    barrier, then loads its fragments); test_fragment_buffers injects bugs into the
    double-buffered one."""
    return _simple_form(), random_inputs(suite()["gemm_int8"], seed=6)


def _edited(kernel: cuda.CudaKernel, *edits: tuple[str, str]) -> cuda.CudaKernel:
    """``kernel`` with each (old, new) edit applied to its one occurrence of ``old``."""
    source = kernel.source
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return dataclasses.replace(kernel, source=source)


def _caught(kernel: cuda.CudaKernel, inputs: dict, pattern: str, reverse: bool = False,
            copies: str = "at_wait") -> None:
    with pytest.raises(cuda.EmulationError, match=pattern):
        cuda.emulate(kernel, inputs, reverse=reverse, copies=copies)


@pytest.mark.parametrize("copies", COPY_MODES)
def test_the_intact_gemm_is_exact_in_both_copy_modes(copies):
    kernel, inputs = _gemm()
    expected = host.run(suite()["gemm_int8"], inputs)["C"]
    for reverse in (False, True):
        actual = cuda.emulate(kernel, inputs, reverse=reverse, copies=copies)["C"]
        np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("copies", COPY_MODES)
def test_a_barrier_after_the_prefetch_is_reported(copies):
    # The prefetch then overwrites the stage that warps later in the order have yet to read
    # in the step before: a write after their fragment loads' read.
    kernel, inputs = _gemm()
    broken = _edited(kernel, (WAIT_AND_BARRIER, "tz_cp_async_wait_group<1>();"),
                     (COMPUTE, COMPUTE.replace("\n", "\n    __syncthreads();\n", 1)))
    pattern = WRITE_AFTER_READ.format(buffer="A_shared", writer=THREAD, reader=WARP)
    for reverse in (False, True):
        _caught(broken, inputs, pattern, reverse, copies)


@pytest.mark.parametrize("copies", COPY_MODES)
def test_a_tile_offset_one_tile_off_is_reported_out_of_bounds(copies):
    # The last step's prefetch of A starts one k tile further: past the end of A's last row.
    kernel, inputs = _gemm()
    broken = _edited(kernel, (A_PREFETCH, A_PREFETCH.replace("* 16)]", "* 16 + 16)]")))
    _caught(broken, inputs, r"thread \(\d+, \d+, \d+\): global A\[4096\.\.4111\] out of bounds: "
                            r"read outside its 4096 elements", copies=copies)


@pytest.mark.parametrize("copies", COPY_MODES)
def test_a_wrong_ldm_is_reported(copies):
    kernel, inputs = _gemm()
    # Not a multiple of 16 bytes: refused by the operation's own check.
    _caught(_edited(kernel, (A_FRAGMENT_LDM, A_FRAGMENT_LDM.replace("16);", "8);"))), inputs,
            "load_matrix_sync: ldm 8 elements is not a multiple of 16 bytes", copies=copies)
    # Aligned but twice the row pitch: the last fragment of the third stage runs past the
    # end of the array.
    _caught(_edited(kernel, (A_FRAGMENT_LDM, A_FRAGMENT_LDM.replace("16);", "32);"))), inputs,
            r"thread \(\d+, \d+, \d+\): shared A_shared\[2\d\d\d\.\.3\d\d\d\] out of bounds: "
            r"read outside its 3072 elements", copies=copies)


@pytest.mark.parametrize("copies", COPY_MODES)
def test_an_uncommitted_prefetch_is_reported(copies):
    kernel, inputs = _gemm()
    broken = _edited(kernel, (COMPUTE, COMPUTE.replace("    tz_cp_async_commit();\n", "")))
    _caught(broken, inputs, r"\d+ asynchronous copies were never waited for", copies=copies)


def test_a_global_write_under_an_in_flight_copy_differs_between_the_modes():
    # Global memory is not race-checked: a thread that overwrites the source of its own
    # copy before the wait reads the old value when copies land at issue, the new at wait.
    body = ("  if (t < 16) {\n"
            "    tz_cp_async16(&s[4 * t], &C[4 * t]);\n"
            "    tz_cp_async_commit();\n"
            "    C[4 * t] = 7;\n"
            "  }\n"
            "  tz_cp_async_wait_group<0>();\n"
            "  __syncthreads();\n"
            "  if (t < 16) C[4 * t + 1] = tz_shared_load(s, 4 * t);\n")
    kernel = _race_kernel(body)
    inputs = {"C": np.arange(64, dtype=np.int32)}
    at_wait = cuda.emulate(kernel, inputs, copies="at_wait")["C"]
    at_issue = cuda.emulate(kernel, inputs, copies="at_issue")["C"]
    np.testing.assert_array_equal(at_wait[1::4][:16], 7)
    np.testing.assert_array_equal(at_issue[1::4][:16], np.arange(0, 64, 4))


@pytest.mark.parametrize(("body", "report"), [
    ("  tz_shared_store(s, t) = t;\n  __syncthreads();\n  C[t] = tz_shared_load(s, t + 1);\n",
     "thread (63, 0, 0): shared s[64] out of bounds: read outside its 64 elements"),
    ("  tz_shared_store(s, t - 1) = t;\n",
     "thread (0, 0, 0): shared s[-1] out of bounds: written outside its 64 elements"),
])
def test_a_shared_access_out_of_bounds_names_the_array_element_and_thread(body, report):
    with pytest.raises(cuda.EmulationError) as caught:
        cuda.emulate(_race_kernel(body), {})
    assert str(caught.value) == f"race_k0: block (0, 0, 0) {report}"


def test_a_warp_offset_one_staging_tile_off_is_reported_out_of_bounds(registry):
    # Each warp's epilogue reads the next warp's staging tile: the last warp reads past the
    # end of the array.
    func = sized("matmul_relu_fp16", m=64, n=64, k=32)
    kernel = cuda.emit(auto_tensorize(func, "cuda", registry=registry).func, registry)
    broken = _edited(kernel, ("tz_shared_load(Y_shared, tz_warp * 320",
                              "tz_shared_load(Y_shared, (tz_warp + 1) * 320"))
    _caught(broken, random_inputs(func, seed=2),
            r"thread \(\d+, 1, 1\): shared Y_shared\[1[2-5]\d\d\] out of bounds: read outside its "
            r"1280 elements")


def test_a_misaligned_epilogue_store_is_reported():
    # The fused epilogue's 16-byte store one float further on: not 16-byte aligned.
    kernel = emitted("matmul_relu_fp16")
    store = "tz_store16(&C[(((ax0_0_2 * 16) + ax0_5)) * 32 + ((ax1_0_4 * 16) + (ax1_0_5 * 4))]"
    broken = _edited(kernel, (store, store[:-1] + " + 1]"))
    _caught(broken, random_inputs(suite()["matmul_relu_fp16"]),
            r"16-byte store to 0x[0-9a-f]+: the address is not 16-byte aligned")
