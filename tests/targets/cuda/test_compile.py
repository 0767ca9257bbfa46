"""targets.cuda.compile: every suite kernel tensorized for cuda compiles with nvcc."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from targets import cuda
from targets.cuda.pipeline import software_pipeline
from tests.targets.cuda.helpers import TENSORIZED, WMMA, emitted, tensorized

# nvcc builds of every suite kernel: CI's slow pass (the default run still compiles through
# the run command's tests, tests/tensorize/cli/test_run_cuda.py).
pytestmark = [pytest.mark.skipif(cuda.nvcc_path() is None, reason="nvcc not installed"),
              pytest.mark.slow]


@pytest.mark.slow
def test_every_tensorized_suite_kernel_compiles_for_sm80_and_sm90():
    jobs = [(name, arch) for name in TENSORIZED for arch in ("sm_80", "sm_90")]
    kernels = {name: emitted(name) for name in TENSORIZED}
    with ThreadPoolExecutor(4) as pool:
        ptx = list(pool.map(lambda job: cuda.compile(kernels[job[0]], job[1]).decode(), jobs))
    for (name, arch), text in zip(jobs, ptx):
        assert f".target {arch}" in text, name
        # WMMA, or mma.sync where the engine takes it (the 8-bit GEMMs, helpers.WMMA).
        assert ("mma.sync.aligned.m16n8k32" if name in WMMA else "wmma.mma.sync") in text, name
        # Fragment arrays indexed by unrolled loops stay in registers.
        assert ".local" not in text, name


@pytest.mark.parametrize("name", ["gemm_fp16", "gemm_int8"])
def test_copies_into_shared_memory_are_128_bit_loads_and_stores(name):
    ptx = cuda.compile(emitted(name, pipeline=False), "sm_80").decode()
    assert re.search(r"ld\.global(\.nc)?\.v4\.u32", ptx)
    assert "st.shared.v4.u32" in ptx


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", ["gemm_fp16", "gemm_int8", "conv2d_nhwc_int8"])
def test_staged_buffers_are_filled_by_cp_async(name, arch):
    ptx = cuda.compile(emitted(name), arch).decode()
    assert re.search(r"cp\.async\.cg\.shared\.global \[%r\d+\], \[%rd\d+\], 16;", ptx)
    assert "cp.async.commit_group;" in ptx
    # N stages (3, or the loop's steps when fewer): each step waits for all but N - 2 groups.
    (stages,) = software_pipeline(tensorized(name)).stages.values()
    assert f"cp.async.wait_group {stages - 2};" in ptx


def test_cubin_output():
    cubin = cuda.compile(emitted("gemm_int8"), "sm_80", "cubin")
    assert cubin[:4] == b"\x7fELF"


def test_nvcc_errors_are_reported_with_its_diagnostics():
    kernel = emitted("gemm_int8")
    broken = cuda.CudaKernel(kernel.name, kernel.source + "\nnot C++;\n", kernel.launches,
                             kernel.params, kernel.buffers, kernel.outputs)
    with pytest.raises(cuda.CompileError, match="nvcc -arch=sm_80 failed on gemm_int8"):
        cuda.compile(broken, "sm_80")


@pytest.mark.parametrize("name", ["matmul_relu_fp16", "matmul_requant_int8"])
def test_fused_epilogues_store_16_bytes_at_once(name):
    # Each lane computes 16 bytes of the output (4 floats, 16 int8) into registers and
    # stores them with one 128-bit store; the register array stays out of local memory.
    kernel = emitted(name, intrinsic=WMMA.get(name))
    assert re.search(r"tz_store16\(&\w+\[", kernel.source)
    ptx = cuda.compile(kernel, "sm_80").decode()
    assert "st.global.v4" in ptx and ".local" not in ptx
