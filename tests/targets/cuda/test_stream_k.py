"""The stream-K hybrid: the tile rows of the whole waves run as one GEMM launch, the rest's K
split in a second and its parts added in a third (``tensorize/engine/cuda_stream_k.py``),
chosen by the cost model where it beats both the unsplit GEMM and split-K
(``tensorize/engine/cuda_split.py``). Kernels run under the host emulation against the
reference executor: exactly for integers, within the float32 bound for fp16."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from targets import cuda, host
from targets.cuda.compile import nvcc_path, resource_usage
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_schedule import CudaTiling, choose_tiling, estimate
from tensorize.engine.cuda_split import MIN_GAIN, SplitModel, SplitPlan, choose_grid
from tensorize.engine.cuda_stream_k import data_parallel_rows
from tensorize.schedule import tree
from tests.targets.cuda.helpers import random_inputs, sized

needs_compiler = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                    reason="no host C++ compiler to build the emulation")
needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found")

# 16 x 32 blocks of one warp's two m16n8k32 fragments, two 32-deep fragment steps a stage.
SMALL = CudaTiling((1, 2), (1, 2), 2)


@pytest.mark.parametrize(("rows", "per_row", "wave", "expected"), [
    (32, 4, 108, [27]),      # 128 tiles: one whole wave of 108, 27 rows of 4
    (10, 30, 108, [7, 3]),   # 300 tiles: two whole waves (7 rows), or one (3 rows)
    (4, 20, 108, []),        # 80 tiles: no whole wave to run data-parallel
    (9, 12, 108, []),        # exactly one wave: no rows left to split
])
def test_the_data_parallel_rows_are_whole_waves_rounded_down_to_rows(rows, per_row, wave,
                                                                     expected):
    assert data_parallel_rows(rows, per_row, wave) == expected


def test_the_model_takes_the_hybrid_where_it_beats_unsplit_and_split_k(registry):
    # 1024 x 1792 int8 in 128 x 128 tiles: 112 tiles, 1 block an SM, 108 SMs; a wave and 4.
    intrinsic = registry.get("mma_m16n8k32_s8s8_s32")
    shape = tuple(intrinsic.extents)
    extents = (1024, 1792, 4096)
    default = choose_tiling(extents, shape, 1)
    grid = choose_grid(extents, 1, intrinsic, registry, default, hybrid_launches=2)
    chosen = grid.chosen
    assert chosen.mode == "stream-K"
    assert chosen.cycles < grid.best["split-K"].cycles
    assert chosen.cycles <= (1 - MIN_GAIN) * min(grid.default.cycles,
                                                 grid.best["unsplit"].cycles)
    bm, bn, _ = chosen.plan.tiling.block_tile(*shape)
    model = SplitModel.of(intrinsic, registry)
    figures = estimate(chosen.plan.tiling, model.stages, model.shape, model.elem)
    wave = model.wave(chosen.plan.tiling, figures)
    per_row = extents[1] // bn
    data_parallel = chosen.plan.rows * per_row
    assert -data_parallel % wave < per_row, "whole waves, rounded down to rows of tiles"
    assert 0 < chosen.plan.rows < extents[0] // bm
    assert grid.describe().startswith(f"stream-K hybrid, block {bm}x{bn}: rows below "
                                      f"{chosen.plan.rows * bm} data-parallel")


def test_without_the_hybrid_the_same_gemm_is_priced_unsplit_or_split_k(registry):
    intrinsic = registry.get("mma_m16n8k32_s8s8_s32")
    extents = (1024, 1792, 4096)
    default = choose_tiling(extents, tuple(intrinsic.extents), 1)
    grid = choose_grid(extents, 1, intrinsic, registry, default, hybrid_launches=0)
    assert "stream-K" not in grid.best
    assert grid.chosen.mode != "stream-K"


def test_the_engine_runs_the_hybrid_it_chose_as_two_gemm_launches_and_a_sum(registry):
    func = sized("gemm_fp16", m=3584, n=512, k=1024)
    result = auto_tensorize(func, "cuda", registry=registry)
    (outcome,) = result.tensorized
    assert "stream-K hybrid, block 128x128: rows below 3456 data-parallel" in outcome.mapping
    # The tensorized GEMM blocks are the outer blocks of their tiles (``_o``).
    assert {"C_o", "C_rest_o", "C_rest_sum"} <= set(tree.block_names(result.func))
    kernel = cuda.emit(result.func, registry)
    gemms = [launch for launch in kernel.launches if launch.tensorized]
    # 27 rows of 4 tiles (one wave of 108), then the last row's 4 tiles in 4 parts.
    assert [launch.grid for launch in gemms] == [(4, 27, 1), (4, 1, 4)]
    assert not kernel.launches[-1].tensorized, "the parts are summed after both"


@pytest.mark.slow
@needs_compiler
def test_a_small_int8_hybrid_is_exact_under_the_emulation(registry):
    func = sized("gemm_int8", m=32, n=32, k=384)
    result = auto_tensorize(func, "cuda", registry=registry, tiling=SplitPlan(SMALL, 2, 1))
    (outcome,) = result.tensorized
    assert outcome.intrinsic == "mma_m16n8k32_s8s8_s32"
    kernel = cuda.emit(result.func, registry)
    assert [l.grid for l in kernel.launches if l.tensorized] == [(1, 1, 1), (1, 1, 2)]
    inputs = random_inputs(func, seed=11)
    inputs["A"][:, :64] = -128
    inputs["B"][:64, :] = -128
    np.testing.assert_array_equal(cuda.emulate(kernel, inputs)["C"], host.run(func, inputs)["C"])


@pytest.mark.parametrize(("name", "sizes", "plan", "reason"), [
    ("gemm_int8", {"m": 32, "n": 32, "k": 384}, SplitPlan(SMALL, 4, 1),
     "requires parts dividing its 6 k steps of 64, got 4"),
    ("gemm_int8", {"m": 32, "n": 32, "k": 384}, SplitPlan(SMALL, 2, 2),
     "data-parallel rows between 1 and 1 tiles of 16, got 2 rows in 2 parts"),
    ("gemm_int8", {"m": 37, "n": 20, "k": 250}, SplitPlan(CudaTiling((1, 1), (1, 1), 1), 2, 1),
     "its 8-bit B, B_pad, is written by the kernel for one GEMM's layout"),
])
def test_a_plan_the_gemm_cannot_run_is_refused_with_the_reason(name, sizes, plan, reason,
                                                               registry):
    result = auto_tensorize(sized(name, **sizes), "cuda", registry=registry, tiling=plan)
    (block,) = [b for b in result.blocks if b.block == "C"]
    assert block.intrinsic is None and reason in block.reason


@needs_compiler
@pytest.mark.slow  # each a few seconds of emulation; the int8 hybrid above is in the default run
@pytest.mark.parametrize(("name", "sizes", "plan"), [
    # Odd M: rows padded to the 8-row fragment, the padding's copy back after the sum.
    ("gemm_int8", {"m": 37, "n": 32, "k": 256}, SplitPlan(CudaTiling((1, 1), (1, 1), 1), 2, 1)),
    # The requantisation's chain runs once, after both GEMM launches and the sum.
    ("matmul_requant_int8", {"m": 48, "n": 32, "k": 768}, SplitPlan(SMALL, 4, 2)),
])
def test_an_int8_hybrid_is_exact_on_odd_sizes_and_with_an_epilogue(name, sizes, plan, registry):
    func = sized(name, **sizes)
    result = auto_tensorize(func, "cuda", registry=registry, tiling=plan)
    (outcome,) = result.tensorized
    assert "stream-K hybrid" in outcome.mapping
    inputs = random_inputs(func, seed=13)
    output = func.params[-1].name
    got = cuda.emulate(cuda.emit(result.func, registry), inputs)[output]
    np.testing.assert_array_equal(got, host.run(func, inputs)[output])


@needs_compiler
@pytest.mark.slow
def test_an_odd_fp16_hybrid_agrees_with_the_float64_product(registry):
    func = sized("gemm_fp16", m=40, n=24, k=250)
    plan = SplitPlan(CudaTiling((1, 1), (1, 1), 1), 2, 1)
    result = auto_tensorize(func, "cuda", registry=registry, tiling=plan)
    (outcome,) = result.tensorized
    assert "stream-K hybrid" in outcome.mapping
    inputs = random_inputs(func, seed=17)
    got = cuda.emulate(cuda.emit(result.func, registry), inputs)["C"]
    a, b = (inputs[x].astype(np.float64) for x in "AB")
    # float32 sums of exact fp16 products: within K float32 roundings of the sum of magnitudes.
    bound = 250 * 2.0**-24 * (np.abs(a) @ np.abs(b))
    assert np.all(np.abs(got - a @ b) <= bound)



@needs_nvcc
@pytest.mark.slow  # two nvcc compiles of each kernel
@pytest.mark.parametrize(("name", "sizes"), [
    ("gemm_fp16", {"m": 3584, "n": 512, "k": 1024}),
    ("gemm_int8", {"m": 1024, "n": 1792, "k": 4096})])
def test_the_hybrid_the_model_chose_compiles_without_spills(name, sizes, registry):
    result = auto_tensorize(sized(name, **sizes), "cuda", registry=registry)
    (outcome,) = result.tensorized
    assert "stream-K hybrid" in outcome.mapping
    kernel = cuda.emit(result.func, registry)
    gemms = {launch.kernel for launch in kernel.launches if launch.tensorized}
    assert len(gemms) == 2
    for arch in ("sm_80", "sm_90"):
        used = [u for u in resource_usage(kernel, arch) if u.kernel in gemms]
        assert len(used) == 2 and all(u.spill_stores == u.spill_loads == 0 for u in used)
