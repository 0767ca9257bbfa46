"""targets.cuda.pipeline: fragments double-buffered across the barrier of a multistage k
loop. The IR runs to the loop's numbers on the host executor; the emitted kernel is exact
under the emulation; and bugs injected into its barrier and wait are reported by name."""

from __future__ import annotations

import dataclasses
import re
import shutil
from functools import cache

import numpy as np
import pytest

import intrinsics
from intrinsics import default_registry
from ir.verify import verify
from targets import cuda, host
from targets.cuda.pipeline import software_pipeline
from tensorize.engine import auto_tensorize
from tests.targets.cuda.helpers import WMMA_INT8, gemm_source, random_inputs, sized
from tests.targets.cuda.test_emulate import IN_FLIGHT, READ_AFTER_WRITE, THREAD, WARP

NEEDS_GXX = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                               reason="no host C++ compiler to build the emulation")
MMA_F16 = "mma_m16n8k16_f16f16_f32"

# (kernel, sizes, intrinsic, stages): fp16 through mma.sync takes 2 slices of 16 k per
# 32-deep step (K1 even); int8 through WMMA one (K1 odd: the copy alternates with the
# step); the odd GEMM pads every extent to its tile.
CASES = [("gemm_fp16", (64, 64, 128), MMA_F16, 4),
         ("gemm_int8", (32, 32, 64), WMMA_INT8, 3),
         ("gemm_int8", (64, 64, 256), None, 2),
         ("gemm_int8_odd", (100, 60, 200), None, 3),
         ("gemm_fp16", (64, 64, 160), None, 3)]


@cache
def _tensorized(name: str, sizes: tuple[int, int, int], intrinsic: str | None):
    func = sized(name, m=sizes[0], n=sizes[1], k=sizes[2])
    return func, auto_tensorize(func, "cuda", intrinsic=intrinsic,
                                registry=default_registry()).func


def _check(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    for key, value in expected.items():
        if value.dtype.kind == "f":
            np.testing.assert_allclose(actual[key], value, rtol=1e-3, atol=1e-3)
        else:
            np.testing.assert_array_equal(actual[key], value)


# The default run takes K1 odd; test_pipeline's default case runs K1 even (gemm_fp16).
@pytest.mark.parametrize(("name", "sizes", "intrinsic", "stages"),
                         [pytest.param(*CASES[0], marks=pytest.mark.slow), CASES[1]])
def test_double_buffered_fragments_compute_what_the_loop_did(name, sizes, intrinsic, stages):
    func, tensorized = _tensorized(name, sizes, intrinsic)
    pipelined = software_pipeline(tensorized, stages)
    verify(pipelined.func)
    (loop,) = pipelined.registers
    # Each fragment buffer the slices load gains two copies per warp; the head and the
    # last slice open with the wait and barrier; with more than one slice, the prefetch
    # follows the first slice's loads.
    assert pipelined.fragments
    for new, old in pipelined.fragments.items():
        assert new.shape[0] == 2 and new.shape[-2:] == old.shape
    assert [count for _, count in pipelined.waits] == [stages - 2, stages - 2]
    slices = 2 if intrinsic == MMA_F16 else 1
    assert len(pipelined.deferred) == (slices > 1)
    assert pipelined.unroll[loop] == (stages if slices % 2 == 0 or stages % 2 == 0
                                      else 2 * stages)
    inputs = random_inputs(func, seed=11)
    actual = host.run(pipelined.func, inputs, intrinsics.lowerer(default_registry().get))
    _check(actual, host.run(func, inputs))


def test_the_simple_form_is_kept_on_request():
    _, tensorized = _tensorized(*CASES[0][:3])
    pipelined = software_pipeline(tensorized, 4, double_fragments=False)
    assert pipelined.loops and not pipelined.registers and not pipelined.fragments


def _emitted(case: tuple) -> tuple[cuda.CudaKernel, dict, dict]:
    name, sizes, intrinsic, stages = case
    func, tensorized = _tensorized(name, sizes, intrinsic)
    inputs = random_inputs(func, seed=5)
    return (cuda.emit(tensorized, default_registry(), stages=stages), inputs,
            host.run(func, inputs))


@NEEDS_GXX
# In CI's slow pass: the default run's emulated GEMMs (test_emulate) are double-buffered too.
@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_emulated_kernel_is_exact_in_both_thread_orders_and_copy_modes(case):
    kernel, inputs, expected = _emitted(case)
    # The first MMAs after each barrier read fragments loaded before it.
    assert gemm_source(kernel).count("__syncthreads();") == 2
    modes = [("at_wait", False), ("at_wait", True)]
    if case is not CASES[0]:
        modes += [("at_issue", False), ("at_issue", True)]
    for copies, reverse in modes:
        _check(cuda.emulate(kernel, inputs, copies=copies, reverse=reverse), expected)


# The loop's wait and barrier, before the last slice's loads of the next step (4 steps of 4
# stages).
LOOP_WAIT = "    tz_cp_async_wait_group<2>();\n    __syncthreads();\n"
NEXT_LOADS = re.compile(r"    if \(\(\(k_0 \+ 1\) < 4\)\) \{\n.*?\n    \}\n", re.S)


@NEEDS_GXX
@pytest.mark.slow
def test_a_barrier_moved_after_the_next_slices_loads_is_reported():
    kernel, inputs, _ = _emitted(CASES[0])
    source = kernel.source
    assert source.count(LOOP_WAIT) == 1
    source = source.replace(LOOP_WAIT, "    tz_cp_async_wait_group<2>();\n")
    loads = NEXT_LOADS.search(source)
    assert loads is not None
    source = source[:loads.end()] + "    __syncthreads();\n" + source[loads.end():]
    broken = dataclasses.replace(kernel, source=source)
    for copies in ("at_wait", "at_issue"):
        # Warp 0 loads the next stage right after its own threads' wait, with no barrier
        # after the other threads' copies; in reverse order the last warp does, before the
        # first threads (which run later) have waited for theirs.
        _reports(broken, inputs, copies, False,
                 READ_AFTER_WRITE.format(buffer="A_shared", reader=WARP, writer=THREAD))
        _reports(broken, inputs, copies, True, IN_FLIGHT)


def _reports(kernel: cuda.CudaKernel, inputs: dict, copies: str, reverse: bool,
             pattern: str) -> None:
    with pytest.raises(cuda.EmulationError, match=pattern):
        cuda.emulate(kernel, inputs, copies=copies, reverse=reverse)


@NEEDS_GXX
@pytest.mark.slow
def test_a_wait_count_off_by_one_is_reported():
    kernel, inputs, _ = _emitted(CASES[0])
    assert kernel.source.count(LOOP_WAIT) == 1
    broken = dataclasses.replace(kernel, source=kernel.source.replace(
        LOOP_WAIT, LOOP_WAIT.replace("<2>", "<3>")))
    # One group more in flight: the next step's tiles may not have landed when it loads
    # them, whenever copies land and in either thread order.
    for copies in ("at_wait", "at_issue"):
        for reverse in (False, True):
            _reports(broken, inputs, copies, reverse, IN_FLIGHT)
