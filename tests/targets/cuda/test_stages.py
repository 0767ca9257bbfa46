"""Multi-stage cp.async pipelines and dynamic shared memory: the emitted structure, nvcc's
view of it, and exact results under the emulation in both copy modes."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from intrinsics import default_registry
from targets import cuda, host
from targets.cuda.compile import resource_usage
from targets.cuda.emulate import COPY_MODES
from tensorize.engine import auto_tensorize
from tests.targets.cuda.helpers import WMMA_INT8, random_inputs, sized, tensorized
from tests.tensorize.engine.suite import suite

needs_compiler = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                    reason="no host C++ compiler to build the emulation")


def _large_tile_gemm() -> tuple[cuda.CudaKernel, dict, np.ndarray]:
    # 128 x 128 x 96 fp16: one 128 x 128 block tile of 8 warps, three 32-deep steps.
    func = sized("gemm_fp16", m=128, n=128, k=96)
    registry = default_registry()
    kernel = cuda.emit(auto_tensorize(func, "cuda", registry=registry).func, registry)
    inputs = random_inputs(func, seed=4)
    return kernel, inputs, host.run(func, inputs)["C"]


def test_a_block_over_48_kb_takes_dynamic_shared_memory():
    kernel, _, _ = _large_tile_gemm()
    (launch,) = kernel.launches
    # Per stage A 128 rows of 40 halves (80 bytes) and B 32 rows of 136: 18944 bytes; 3 stages.
    assert launch.dynamic_shared == 3 * (128 * 80 + 32 * 272) == 56832
    assert "TZ_DYNAMIC_SHARED(tz_dynamic_shared, 56832);" in kernel.source
    assert "__shared__ __align__(128)" not in kernel.source.split("gemm_fp16_k0(", 1)[1]
    assert "tz_cp_async_wait_group<1>();" in kernel.source


@pytest.mark.slow
@needs_compiler
@pytest.mark.parametrize("copies", COPY_MODES)
def test_the_dynamic_shared_three_stage_gemm_is_exact(copies):
    kernel, inputs, expected = _large_tile_gemm()
    actual = cuda.emulate(kernel, inputs, copies=copies)["C"]
    np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-3)


@pytest.mark.slow  # in CI's slow pass, for the default run's time
@pytest.mark.skipif(cuda.nvcc_path() is None, reason="nvcc not installed")
def test_ptxas_sees_no_static_shared_memory_and_no_spills():
    kernel, _, _ = _large_tile_gemm()
    (r,) = resource_usage(kernel, "sm_80")
    assert (r.shared_bytes, r.spill_stores, r.spill_loads) == (0, 0, 0)
    ptx = cuda.compile(kernel, "sm_80").decode()
    assert re.search(r"\.extern \.shared \.align 128 \.b8 tz_dynamic_shared\[\];", ptx)
    assert "cp.async.wait_group 1;" in ptx


@pytest.mark.slow  # in CI's slow pass, for the default run's time
@needs_compiler
@pytest.mark.parametrize("stages", [2, 4])
def test_other_stage_counts_wait_for_all_but_n_minus_2_groups(stages, registry):
    # gemm_int8 64^3 has four 16-deep steps.
    kernel = cuda.emit(tensorized("gemm_int8", WMMA_INT8), registry, stages=stages)
    assert f"tz_cp_async_wait_group<{stages - 2}>();" in kernel.source
    assert kernel.source.count("tz_cp_async_commit();") == stages
    inputs = random_inputs(suite()["gemm_int8"], seed=5)
    expected = host.run(suite()["gemm_int8"], inputs)["C"]
    for copies in COPY_MODES:
        np.testing.assert_array_equal(cuda.emulate(kernel, inputs, copies=copies)["C"],
                                      expected)


@pytest.mark.slow  # in CI's slow pass, for the default run's time
@needs_compiler
def test_a_rasterised_grid_computes_every_tile_once(registry):
    # 256 x 384 x 32 int8 in 128 x 128 tiles: a 3 x 2 grid, run in swizzled block order.
    func = sized("gemm_int8", m=256, n=384, k=32)
    kernel = cuda.emit(auto_tensorize(func, "cuda", intrinsic=WMMA_INT8, registry=registry).func,
                       registry)
    (launch,) = [l for l in kernel.launches if l.tensorized]
    assert launch.grid == (3, 2, 1)
    assert "const int tz_block_y = " in kernel.source
    inputs = random_inputs(func, seed=3)
    np.testing.assert_array_equal(cuda.emulate(kernel, inputs)["C"], host.run(func, inputs)["C"])
