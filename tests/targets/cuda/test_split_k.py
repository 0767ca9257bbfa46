"""Split-K: a GEMM whose grid of output tiles leaves SMs idle runs its K in parts, each a
block of its own, and one more launch adds the parts up; the cost model chooses the parts
(``tensorize/engine/cuda_split.py``). Each kernel runs under the host emulation against the
reference executor."""

from __future__ import annotations

import shutil
from dataclasses import replace

import numpy as np
import pytest

from targets import cuda, host
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_schedule import choose_tiling, estimate
from tensorize.engine.cuda_split import (MAX_PARTS, MIN_GAIN, SplitPlan, choose_grid, choose_split,
                                         split_tilings)
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


def test_a_tiling_worse_unsplit_can_win_split(registry):
    # int8 1 x 4096 x 4096: unsplit, 8 x 128 blocks model fewest cycles; 8 x 64 blocks
    # model more (twice the blocks, each with fewer MMAs to hide latency) but in 8 parts
    # fill the SMs better than any split of the wider blocks.
    intrinsic = registry.get("wmma_m8n32k16_s8_s32")
    shape = tuple(intrinsic.extents)
    extents = (8, 4096, 4096)
    default = choose_tiling(extents, shape, 1)
    grid = choose_grid(extents, 1, intrinsic, registry, default)
    chosen = grid.chosen.plan
    assert chosen.parts > 1 and chosen.tiling != default
    alone = choose_grid(extents, 1, intrinsic, registry, default, tilings=[chosen.tiling])
    assert alone.best["unsplit"].cycles > grid.best["unsplit"].cycles
    assert grid.best["unsplit"].plan.tiling != chosen.tiling
    assert grid.chosen.cycles <= (1 - MIN_GAIN) * grid.best["unsplit"].cycles
    bm, bn, _ = chosen.tiling.block_tile(*shape)
    assert grid.describe().startswith(f"split-K in {chosen.parts} parts, block {bm}x{bn} "
                                      "(modelled on sm_80:")


def test_the_note_names_an_unsplit_tiling_the_model_prices_lower(registry):
    # 2048 x 3584 x 4096 int8: the hybrid models 18% under the default 128 x 256 tiling and
    # is taken; 128 x 128 blocks unsplit model 1% more than it, and the note says so
    # (retiling alone is the tiling search's to choose).
    intrinsic = registry.get("mma_m16n8k32_s8s8_s32")
    extents = (2048, 3584, 4096)
    default = choose_tiling(extents, tuple(intrinsic.extents), 1)
    grid = choose_grid(extents, 1, intrinsic, registry, default, hybrid_launches=2)
    assert grid.chosen.mode == "stream-K"
    assert grid.chosen.cycles <= (1 - MIN_GAIN) * grid.default.cycles
    unsplit = grid.best["unsplit"]
    assert unsplit.plan != SplitPlan(default) and unsplit.cycles < grid.default.cycles
    assert grid.describe().endswith(f"; best unsplit {unsplit.cycles:,.0f}, unsplit, block "
                                    "128x128)")


def test_another_tiling_comes_with_a_split_only_where_the_split_is_the_gain(registry):
    # fp16 256^3: 64 x 128 blocks in 2 parts model 29% under the default 128 x 256 blocks
    # unsplit, but the same blocks unsplit model half that again: the gain is the
    # retiling's (the tiling search's to take), and the default tiling alone gains nothing
    # split, so the GEMM runs as before, unsplit (its float sums in k order).
    intrinsic = registry.get("wmma_m16n16k16_f16_f32")
    extents = (256, 256, 256)
    default = choose_tiling(extents, tuple(intrinsic.extents), 2)
    grid = choose_grid(extents, 1, intrinsic, registry, default)
    assert grid.best["split-K"].cycles <= (1 - MIN_GAIN) * grid.default.cycles
    assert grid.best["unsplit"].cycles < grid.best["split-K"].cycles
    assert grid.chosen.plan == SplitPlan(default)


def test_a_tiling_whose_figures_spill_is_refused_split_or_not(registry):
    intrinsic = registry.get("wmma_m8n32k16_s8_s32")
    shape = tuple(intrinsic.extents)
    extents = (8, 4096, 4096)
    default = choose_tiling(extents, shape, 1)
    first = choose_grid(extents, 1, intrinsic, registry, default).chosen.plan.tiling

    def measured(tiling):
        figures = estimate(tiling, 3, shape, 1)
        return replace(figures, spills=64) if tiling == first else figures

    grid = choose_grid(extents, 1, intrinsic, registry, default, figures=measured)
    assert grid.chosen.plan.tiling != first
    spilling = choose_grid(extents, 1, intrinsic, registry, default, tilings=[first],
                           figures=measured)
    assert all(t.cycles == float("inf") for t in spilling.best.values())


def test_a_narrow_input_is_priced_only_with_warp_tiles_that_do_not_spill(registry):
    intrinsic = registry.get("mma_m16n8k64_s4s4_s32")
    shape = tuple(intrinsic.extents)
    tilings = split_tilings((256, 256, 4096), intrinsic, choose_tiling(
        (256, 256, 4096), shape, 0, narrow=True))
    assert len(tilings) > 1
    assert all(t.fragments[0] * shape[0] <= 64 and t.fragments[1] * shape[1] <= 32
               for t in tilings)


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
