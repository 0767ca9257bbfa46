"""Split-K: a GEMM whose grid of output tiles leaves SMs idle runs its K in parts, each a
block of its own, and one more launch adds the parts up; the cost model chooses the parts
(``tensorize/engine/cuda_split.py``). Each kernel runs under the host emulation against the
reference executor."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from targets import cuda, host
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_schedule import choose_tiling
from tensorize.engine.cuda_split import MAX_PARTS, choose_split
from tests.targets.cuda.helpers import random_inputs, sized

needs_compiler = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                    reason="no host C++ compiler to build the emulation")


def _choice(registry, intrinsic: str, m: int, n: int, k: int):
    chosen = registry.get(intrinsic)
    shape = tuple(chosen.extents)
    extents = tuple(-(-e // s) * s for e, s in zip((m, n, k), shape))
    tiling = choose_tiling(extents, shape, chosen.operands[0].dtype.bits // 8)
    return choose_split(extents, 1, chosen, tiling, registry), tiling, extents, shape


def test_a_one_row_gemm_of_a_wide_weight_is_split_to_fill_the_sms(registry):
    choice, tiling, extents, shape = _choice(registry, "wmma_m8n32k16_f16_f32", 1, 4096, 4096)
    bm, bn, _ = tiling.block_tile(*shape)
    blocks = (extents[0] // bm) * (extents[1] // bn)
    sms = registry.gpu("cuda").architecture(choice.arch).sm_count
    assert blocks < sms
    assert 1 < choice.parts <= MAX_PARTS and blocks * choice.parts >= sms
    assert choice.cycles[choice.parts] < choice.cycles[1]
    assert "split-K in" in choice.describe()


def test_a_gemm_whose_grid_fills_the_gpu_is_not_split(registry):
    choice, tiling, extents, shape = _choice(registry, "wmma_m16n16k16_f16_f32", 4096, 4096,
                                             4096)
    bm, bn, _ = tiling.block_tile(*shape)
    assert (extents[0] // bm) * (extents[1] // bn) >= registry.gpu("cuda").architecture(
        choice.arch).sm_count
    assert choice.parts == 1 and choice.describe().startswith("no split-K")


def test_a_run_for_one_architecture_prices_the_split_on_it(registry):
    chosen = registry.get("wmma_m8n32k16_f16_f32")
    extents = (8, 4096, 4096)
    tiling = choose_tiling(extents, tuple(chosen.extents), 2)
    oldest = choose_split(extents, 1, chosen, tiling, registry)
    assert oldest.arch == "sm_80"
    for arch in ("sm_90", "sm_90a"):
        assert choose_split(extents, 1, chosen, tiling, registry, arch=arch).arch == "sm_90"
    func = sized("gemm_fp16", m=1, n=4096, k=4096)
    (outcome,) = auto_tensorize(func, "cuda", registry=registry, arch="sm_90").tensorized
    assert "(modelled on sm_90:" in outcome.mapping


def test_parts_keep_as_many_k_steps_as_the_pipeline_has_stages(registry):
    # 1 x 256 x 192 in 8 x 256 tiles: one block, 6 k steps of 32: at 3 stages, 2 parts at most.
    choice, *_ = _choice(registry, "wmma_m8n32k16_s8_s32", 1, 256, 192)
    assert set(choice.cycles) <= {1, 2}


@needs_compiler
@pytest.mark.slow  # in CI's slow pass: the split itself is proven on the host in the default
# run (tests/tensorize/schedule/test_split_reduction.py)
def test_a_split_int8_gemv_runs_exactly_under_the_emulation(registry):
    func = sized("gemm_int8", m=1, n=64, k=2048)
    result = auto_tensorize(func, "cuda", registry=registry)
    kernel = cuda.emit(result.func, registry)
    (gemm,) = [launch for launch in kernel.launches if launch.tensorized]
    assert gemm.grid[2] > 1, "the GEMM is split: its parts run along blockIdx.z"
    assert any(launch.kernel != gemm.kernel and not launch.tensorized for launch in
               kernel.launches[kernel.launches.index(gemm) + 1:]), "the parts are summed after"
    inputs = random_inputs(func, seed=5)
    inputs["A"][:] = -128
    got = cuda.emulate(kernel, inputs)["C"]
    np.testing.assert_array_equal(got, host.run(func, inputs)["C"])


@needs_compiler
@pytest.mark.slow
def test_a_split_fp16_gemv_agrees_with_the_float64_product(registry):
    func = sized("gemm_fp16", m=1, n=64, k=2048)
    result = auto_tensorize(func, "cuda", registry=registry)
    kernel = cuda.emit(result.func, registry)
    assert any(launch.grid[2] > 1 for launch in kernel.launches if launch.tensorized)
    inputs = random_inputs(func, seed=6)
    got = cuda.emulate(kernel, inputs)["C"]
    exact = inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)
    # float32 partial sums of exact fp16 products: within K float32 roundings of the sum of
    # magnitudes.
    bound = 2048 * 2.0**-24 * (np.abs(inputs["A"].astype(np.float64))
                               @ np.abs(inputs["B"].astype(np.float64)))
    assert np.all(np.abs(got - exact) <= bound)


@needs_compiler
@pytest.mark.slow
@pytest.mark.parametrize(("name", "sizes"), [
    ("matmul_requant_int8", {"m": 16, "n": 64, "k": 8192}),
    ("conv2d_nhwc_int8", {"batch": 1, "height": 7, "width": 7, "in_channels": 1024,
                          "out_channels": 32})])
def test_a_split_gemm_keeps_its_epilogue_exact(name, sizes, registry):
    # The requantisation (a chain of elementwise blocks) and the convolution's transpose
    # back to NHWC run after the parts are summed.
    func = sized(name, **sizes)
    result = auto_tensorize(func, "cuda", registry=registry)
    (outcome,) = result.tensorized
    assert "split-K in" in outcome.mapping
    inputs = random_inputs(func, seed=7)
    output = func.params[-1].name
    got = cuda.emulate(cuda.emit(result.func, registry), inputs)[output]
    np.testing.assert_array_equal(got, host.run(func, inputs)[output])
