"""The static tiling search of tensorize.engine.cuda_schedule: candidates, the cost model, the
ranking, and (slow) a tuned kernel compiled and emulated exactly."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from intrinsics import default_registry
from targets import cuda, host
from targets.cuda.banks import bank_conflicts
from targets.cuda.occupancy import architecture, occupancy
from tensorize.cli.cuda_steps import tune_cuda
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_schedule import (
    CudaTiling,
    TilingFigures,
    choose_tiling,
    model_cycles,
    search_tilings,
    tiling_candidates,
)
from tests.targets.cuda.helpers import random_inputs, sized

SHAPE = (16, 16, 16)
BIG = (4096, 4096, 4096)
SM_80 = architecture("sm_80")


def _fit(registers: int, shared: int, threads: int):
    return occupancy(SM_80, registers, shared, threads)


def test_candidates_divide_the_extents_and_include_the_default_tiling():
    found = tiling_candidates(BIG, SHAPE, 2)
    assert (choose_tiling(BIG, SHAPE, 2), 3) in found
    for tiling, stages in found:
        bm, bn, bk = tiling.block_tile(*SHAPE)
        assert BIG[0] % bm == BIG[1] % bn == BIG[2] % bk == 0
        assert 2 <= stages <= 4


def test_a_short_k_loop_limits_the_stages():
    # k = 64 in 32-deep steps: two steps, so two stages at most.
    found = tiling_candidates((128, 128, 64), SHAPE, 2)
    assert {s for t, s in found if t.k_steps == 2} == {2}


def test_the_model_counts_waves_on_the_sm_count():
    # 128 x 128 tiles of 4096^2: 1024 blocks; 2 per SM on 108 SMs: 5 waves.
    tiling = CudaTiling((2, 4), (4, 2), 2)
    blocks, waves, cycles = model_cycles(tiling, TilingFigures(125, 56832, 0, 1.7, 0.0), BIG,
                                         SHAPE, 2, 1, SM_80, _fit)
    assert (blocks, waves) == (2, 5)
    # Issue-bound: 2 blocks x 8 x 16 x 256 MMAs / 4 sub-partitions x 8 cycles, per wave.
    assert cycles == 5 * 2 * 8 * 16 * 256 / 4 * 8


def test_a_block_that_does_not_fit_or_spills_costs_infinity():
    tiling = CudaTiling((2, 4), (4, 2), 2)
    for figures in (TilingFigures(125, 300 * 1024), TilingFigures(125, 1024, spills=16)):
        assert model_cycles(tiling, figures, BIG, SHAPE, 2, 1, SM_80, _fit) == (
            0, 0, float("inf"))


def test_the_search_measures_the_best_estimates_and_ranks_them_first():
    asked = []

    def measure(tiling, stages):
        asked.append((tiling, stages))
        # The first refuses to compile; the others measure what they estimated, spill-free.
        if len(asked) == 1:
            return None
        return TilingFigures(100, 20000, 0, 1.5, 0.0)

    trials = search_tilings(BIG, SHAPE, 2, 1, SM_80, _fit, measure, measured=4)
    assert len(asked) == 4
    assert [t.measured for t in trials[:3]] == [True, True, True] and not trials[3].measured
    measured = [t for t in trials if t.measured]
    assert [t.cycles for t in measured] == sorted(t.cycles for t in measured)
    assert asked[0] not in {(t.tiling, t.stages) for t in measured}


@pytest.mark.slow
@pytest.mark.skipif(cuda.nvcc_path() is None or shutil.which("g++") is None,
                    reason="nvcc and a host C++ compiler are needed")
def test_a_tuned_kernel_compiles_and_is_exact():
    func = sized("gemm_fp16", m=128, n=128, k=128)
    tensorized, stages, trials = tune_cuda(func, default_registry(), measured=3)
    assert trials and trials[0].measured
    kernel = cuda.emit(tensorized.func, stages=stages)
    inputs = random_inputs(func, seed=8)
    np.testing.assert_allclose(cuda.emulate(kernel, inputs)["C"], host.run(func, inputs)["C"],
                               rtol=1e-3, atol=1e-3)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("name", ["gemm_fp16", "gemm_int8"])
@pytest.mark.parametrize(("warps", "stages"), [((2, 2), 3), ((2, 4), 4)])
def test_64_by_64_warp_tiles_are_exact_and_conflict_free(name, warps, stages):
    # 2 x 2 or 2 x 4 warps of 4 x 4 fragments (128 x 128 or 128 x 256 blocks, the search's
    # favourites), two fragment steps per stage, over 4 k steps.
    func = sized(name, m=128, n=64 * 2 * warps[1], k=128)
    tiling = CudaTiling(warps, (4, 4), 2)
    kernel = cuda.emit(auto_tensorize(func, "cuda", tiling=tiling).func, stages=stages)
    (launch,) = [l for l in kernel.launches if l.tiled]
    assert launch.stages == stages
    inputs = random_inputs(func, seed=9)
    expected = host.run(func, inputs)["C"]
    for copies in ("at_wait", "at_issue"):
        np.testing.assert_allclose(cuda.emulate(kernel, inputs, copies=copies)["C"], expected,
                                   rtol=1e-3, atol=1e-3)
    counts = bank_conflicts(kernel, inputs)[launch.kernel]
    assert counts["fragment_load"].phases > 0 and counts["copy"].phases > 0
    assert counts["fragment_load"].conflicts == counts["copy"].conflicts == 0
