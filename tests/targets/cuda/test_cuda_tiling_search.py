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
from tensorize.runners.cuda import tune_cuda
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_schedule import (
    CudaTiling,
    TilingFigures,
    TilingTrial,
    choose_family,
    choose_tiling,
    instruction_macs,
    model_cycles,
    search_tilings,
    tensor_pipe,
    tiling_candidates,
)
from tests.targets.cuda.helpers import WMMA, random_inputs, sized

SHAPE = (16, 16, 16)
BIG = (4096, 4096, 4096)
SM_80 = architecture("sm_80", default_registry())
REGISTRY = default_registry()
FP16 = tensor_pipe(REGISTRY.get("wmma_m16n16k16_f16_f32"), "sm_80")


def _fit(registers: int, shared: int, threads: int):
    return occupancy(SM_80, registers, shared, threads)


def test_candidates_divide_the_extents_and_include_the_default_tiling():
    found = tiling_candidates(BIG, SHAPE, 2)
    assert (choose_tiling(BIG, SHAPE, 2), 3) in found
    for tiling, stages in found:
        bm, bn, bk = tiling.block_tile(*SHAPE)
        assert BIG[0] % bm == BIG[1] % bn == BIG[2] % bk == 0
        assert 2 <= stages <= 4


def test_narrow_blocks_are_tried_only_where_no_usual_one_divides():
    # BIG: every candidate has at least 2 warps and 2 fragments along each dimension.
    assert all(min(*t.warps, *t.fragments) >= 2 for t, _ in tiling_candidates(BIG, SHAPE, 2))
    # One padded row tile (a 1 x 4096 x 4096 GEMM): one warp and one fragment along M.
    skinny = (16, 4096, 4096)
    found = tiling_candidates(skinny, SHAPE, 2)
    assert found
    for tiling, _ in found:
        bm, bn, bk = tiling.block_tile(*SHAPE)
        assert (tiling.warps[0], tiling.fragments[0]) == (1, 1)
        assert skinny[1] % bn == skinny[2] % bk == 0
    assert {t.warps[1] for t, _ in found} == {1, 2, 4}


def test_a_short_k_loop_limits_the_stages():
    # k = 64 in 32-deep steps: two steps, so two stages at most.
    found = tiling_candidates((128, 128, 64), SHAPE, 2)
    assert {s for t, s in found if t.k_steps == 2} == {2}


def test_the_model_counts_waves_on_the_sm_count():
    # 128 x 128 tiles of 4096^2: 1024 blocks; 2 per SM on 108 SMs: 5 waves.
    tiling = CudaTiling((2, 4), (4, 2), 2)
    blocks, waves, cycles = model_cycles(tiling, TilingFigures(125, 56832, 0, 1.7, 0.0), BIG,
                                         SHAPE, 2, 1, SM_80, _fit, FP16)
    assert (blocks, waves) == (2, 5)
    # Issue-bound: 2 blocks x 8 x 16 x 256 MMAs / 4 sub-partitions x 8 cycles, per wave.
    assert cycles == 5 * 2 * 8 * 16 * 256 / 4 * 8


def test_a_grid_smaller_than_the_sms_costs_the_same_whatever_fits_per_sm():
    # 256^2 in 128 x 128 blocks: 4 blocks on 108 SMs, one each, whether 1 or 4 would fit.
    tiling = CudaTiling((2, 4), (4, 2), 2)
    small = (256, 256, 256)
    fits = {}
    for registers in (64, 200):
        figures = TilingFigures(registers, 20000, 0, 1.0, 0.0)
        fits[registers] = model_cycles(tiling, figures, small, SHAPE, 2, 1, SM_80, _fit, FP16)
    assert (fits[64][0], fits[200][0]) == (4, 1)
    assert fits[64][1:] == fits[200][1:] == (1, 128 * 128 * 256 / 2048 / 4 * 8)


def test_a_block_that_does_not_fit_or_spills_costs_infinity():
    tiling = CudaTiling((2, 4), (4, 2), 2)
    for figures in (TilingFigures(125, 300 * 1024), TilingFigures(125, 1024, spills=16)):
        assert model_cycles(tiling, figures, BIG, SHAPE, 2, 1, SM_80, _fit, FP16) == (
            0, 0, float("inf"))


def test_the_search_measures_the_best_estimates_and_ranks_them_first():
    asked = []

    def measure(tiling, stages):
        asked.append((tiling, stages))
        # The first refuses to compile; the others measure what they estimated, spill-free.
        if len(asked) == 1:
            return None
        return TilingFigures(100, 20000, 0, 1.5, 0.0)

    trials = search_tilings(BIG, SHAPE, 2, 1, SM_80, _fit, FP16, measure, measured=4)
    assert len(asked) == 4
    assert [t.measured for t in trials[:3]] == [True, True, True] and not trials[3].measured
    measured = [t for t in trials if t.measured]
    assert [t.cycles for t in measured] == sorted(t.cycles for t in measured)
    assert asked[0] not in {(t.tiling, t.stages) for t in measured}


def test_the_tensor_pipe_runs_8_bit_work_at_twice_the_16_bit_rate():
    # A100: 312 dense f16 TFLOPS, 624 int8 TOPS; H100 SXM 989 and 1979 (2x per SM and clock).
    per_unit = {(name, arch): tensor_pipe(REGISTRY.get(name), arch)
                for name in ("wmma_m16n16k16_f16_f32", "mma_m16n8k16_f16f16_f32",
                             "wmma_m16n16k16_s8_s32", "mma_m16n8k32_s8s8_s32")
                for arch in ("sm_80", "sm_90")}
    assert {p.cycles for (n, a), p in per_unit.items() if "s8" not in n and a == "sm_80"} == {8}
    assert {p.cycles for (n, a), p in per_unit.items() if "s8" in n and a == "sm_80"} == {4}
    assert all(per_unit[n, "sm_90"].cycles * 2 == per_unit[n, "sm_80"].cycles
               for n, _ in per_unit)
    # One IMMA.16832 does two units of work; a 16x16x16 8-bit WMMA is two IMMA.16816.
    assert instruction_macs(REGISTRY.get("mma_m16n8k32_s8s8_s32")) == 16 * 8 * 32
    assert instruction_macs(REGISTRY.get("wmma_m16n16k16_s8_s32")) == 16 * 8 * 16
    assert per_unit["mma_m16n8k32_s8s8_s32", "sm_80"].instructions == 0.5
    assert per_unit["wmma_m16n16k16_s8_s32", "sm_80"].instructions == 1
    with pytest.raises(ValueError, match="sm_80, sm_90.*got 'sm_61'"):
        tensor_pipe(REGISTRY.get("wmma_m16n16k16_s8_s32"), "sm_61")


def test_the_model_counts_an_imma_16832_as_two_units_of_work():
    # Non-MMA instructions enter the model per unit of work (an m16n8k16): 5 per IMMA.16832
    # are 2.5 per unit, plus half an IMMA: 3 issue slots, under the 4 cycles the tensor pipe
    # takes per 8-bit unit on sm_80, so the block is bound by the tensor pipe. Counted per
    # instruction (1 + 5 per unit) the same kernel would wrongly be issue-bound.
    mma = REGISTRY.get("mma_m16n8k32_s8s8_s32")
    shape = tuple(mma.extents)
    grid = CudaTiling((2, 4), (4, 8), 2)
    pipe = tensor_pipe(mma, "sm_80")

    def cycles(other, pipe):
        figures = TilingFigures(200, 100_000, 0, other, 0.0)
        return model_cycles(grid, figures, BIG, shape, 1, 1, SM_80, _fit, pipe)[2]

    per_unit = 5 * 16 * 8 * 16 / instruction_macs(mma)
    # 1 block per SM (200 registers x 256 threads), 512 blocks of 128 x 256 on 108 SMs: 5
    # waves of 128 x 256 x 4096 / 2048 units / 4 sub-partitions x 4 cycles.
    bound = 5 * 128 * 256 * 4096 / 2048 / 4 * 4
    assert cycles(per_unit, pipe) == bound
    unnormalised = tensor_pipe(REGISTRY.get("wmma_m16n16k16_s8_s32"), "sm_80")
    assert cycles(5.0, unnormalised) == bound * 6 / 4


def _trial(cycles: float, other: float | None, measured: bool = True) -> TilingTrial:
    return TilingTrial(CudaTiling((2, 4), (4, 4), 2), 3, TilingFigures(200, 1000, 0, other),
                       measured, 1, 1, cycles)


def test_the_family_choice_goes_by_cycles_then_instructions_per_unit():
    issued = {"a": 1.0, "b": 1.0}
    assert choose_family({"a": [_trial(100, 1.1)], "b": [_trial(90, 2.0)]}, issued)[0] == "b"
    name, reason = choose_family({"a": [_trial(100, 1.14)], "b": [_trial(100, 1.08)]}, issued)
    assert name == "b" and "cycles tie, fewer non-MMA instructions" in reason
    assert "a: 100 cycles, 1.14 non-MMA per m16n8k16" in reason
    name, reason = choose_family({"a": [_trial(50, None, False)], "b": [_trial(100, 1.0)]},
                                 issued)
    assert name == "b" and "measured, the other only estimated" in reason
    assert choose_family({"a": [], "b": [_trial(1, 1.0)]}, issued)[1].startswith(
        "b: the only family")
    with pytest.raises(ValueError, match="at least one search"):
        choose_family({"a": []}, issued)


def test_without_the_sass_a_tie_goes_to_fewer_tensor_instructions_and_says_so():
    # No cuobjdump: no non-MMA figure for either family. The choice is the same whichever
    # order the families were searched in, and the reason names what decided it.
    searches = {"wmma": [_trial(100, None)], "mma": [_trial(100, None)]}
    issued = {"wmma": 1.0, "mma": 0.5}
    for order in (searches, dict(reversed(searches.items()))):
        name, reason = choose_family(order, issued)
        assert name == "mma"
        assert "without cuobjdump the SASS cannot be read: fewer tensor-core instructions" \
            in reason
        assert "unknown" not in reason
    name, reason = choose_family(searches, {"wmma": 1.0, "mma": 1.0})
    assert name == "wmma" and "the first family searched stays" in reason


@pytest.mark.skipif(cuda.nvcc_path() is None, reason="nvcc is needed to tune")
def test_each_family_is_searched_over_the_extents_it_pads_to():
    # k = 48: WMMA's k16 pads to 48, mma.sync's k32 to 64, where a 64-deep block tile fits.
    # Nothing measured (measured=0): no trial is taken and the engine's tiling stands.
    tuning = tune_cuda(sized("gemm_int8", m=128, n=128, k=48), REGISTRY, measured=0)
    shapes = {name: tuple(REGISTRY.get(name).extents) for name in tuning.searches}
    depths = {name: {t.tiling.block_tile(*shapes[name])[2] for t in trials}
              for name, trials in tuning.searches.items()}
    assert depths == {"wmma_m16n16k16_s8_s32": {16}, "mma_m16n8k32_s8s8_s32": {32, 64}}
    assert tuning.chosen is None and "(estimated)" in tuning.reason


@pytest.mark.slow
@pytest.mark.skipif(cuda.nvcc_path() is None or shutil.which("g++") is None,
                    reason="nvcc and a host C++ compiler are needed")
def test_a_tuned_kernel_compiles_and_is_exact():
    func = sized("gemm_fp16", m=128, n=128, k=128)
    registry = default_registry()
    tuning = tune_cuda(func, registry, measured=3)
    # Both families match an fp16 GEMM and are searched; the one taken was measured.
    assert set(tuning.searches) == {"wmma_m16n16k16_f16_f32", "mma_m16n8k16_f16f16_f32"}
    assert tuning.chosen in tuning.searches and tuning.searches[tuning.chosen][0].measured
    assert tuning.chosen in tuning.reason
    assert [b.intrinsic for b in tuning.result.tensorized] == [tuning.chosen]
    kernel = cuda.emit(tuning.result.func, registry, stages=tuning.stages)
    inputs = random_inputs(func, seed=8)
    np.testing.assert_allclose(cuda.emulate(kernel, inputs)["C"], host.run(func, inputs)["C"],
                               rtol=1e-3, atol=1e-3)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("name", ["gemm_fp16", "gemm_int8"])
@pytest.mark.parametrize(("warps", "stages"), [((2, 2), 3), ((2, 4), 4)])
def test_64_by_64_warp_tiles_are_exact_and_conflict_free(name, warps, stages, registry):
    # 2 x 2 or 2 x 4 warps of 4 x 4 fragments (128 x 128 or 128 x 256 blocks, the search's
    # favourites), two fragment steps per stage, over 4 k steps.
    func = sized(name, m=128, n=64 * 2 * warps[1], k=128)
    tiling = CudaTiling(warps, (4, 4), 2)
    # WMMA's 16 x 16 fragments (the engine takes mma.sync for 8-bit GEMMs, whose 16 x 8 x 32
    # fragments make other tiles of this tiling).
    intrinsic = WMMA.get(name)
    kernel = cuda.emit(auto_tensorize(func, "cuda", intrinsic=intrinsic, tiling=tiling,
                                      registry=registry).func,
                       registry, stages=stages)
    (launch,) = [l for l in kernel.launches if l.tensorized]
    assert launch.stages == stages
    inputs = random_inputs(func, seed=9)
    expected = host.run(func, inputs)["C"]
    for copies in ("at_wait", "at_issue"):
        np.testing.assert_allclose(cuda.emulate(kernel, inputs, copies=copies)["C"], expected,
                                   rtol=1e-3, atol=1e-3)
    counts = bank_conflicts(kernel, inputs)[launch.kernel]
    assert counts["fragment_load"].phases > 0 and counts["copy"].phases > 0
    assert counts["fragment_load"].conflicts == counts["copy"].conflicts == 0
