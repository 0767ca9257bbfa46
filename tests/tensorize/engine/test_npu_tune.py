"""The NPU tile search ranks the least-traffic tilings by the analytical model and simulates
only the best few; the model follows the simulator closely on the built-in machine."""

from __future__ import annotations

import ir
from intrinsics import default_registry
from ir import te
from simulator import load_machine
from tensorize.engine import auto_tensorize, npu_traffic
from tensorize.engine.npu_traffic import GemmShape, NpuTiling
from tensorize.engine.tune import (RANKED, OwnChoice, model_cycles, simulated_cycles,
                                   tune_npu)


def gemm(m: int, n: int, k: int) -> ir.PrimFunc:
    A = te.placeholder((m, k), "int8", "A")
    B = te.placeholder((k, n), "int8", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(
        ir.cast("int32", A[i, rk]) * ir.cast("int32", B[rk, j]), axis=rk), "C")
    return te.create_prim_func([A, B, C], "gemm")


def test_only_the_models_best_are_simulated_and_the_fastest_wins():
    config, registry = load_machine(), default_registry()
    result, trials, own = tune_npu(gemm(128, 32, 128), config, registry, simulated=2)
    shape = GemmShape(128, 32, 128, 16, 16, 16)
    assert [t.tiling for t in trials] == npu_traffic.ranked(shape, config)[:RANKED]
    simulated = [t for t in trials if t.cycles is not None]
    assert len(simulated) == 2
    assert max(t.model for t in simulated) <= min(t.model for t in trials if t.cycles is None)
    untuned = auto_tensorize(gemm(128, 32, 128), "npu", registry=registry, config=config)
    assert own.cycles == simulated_cycles(untuned.func, config, registry)
    assert own.fastest == min(t.cycles for t in simulated)
    assert simulated_cycles(result.func, config, registry) == min(own.fastest, own.cycles)
    for trial in simulated:
        assert abs(trial.model - trial.cycles) <= 0.05 * trial.cycles
        assert f"model {trial.model:,} cycles, simulated {trial.cycles:,}" in trial.describe()


def test_tuning_keeps_the_schedules_choice_when_no_candidate_runs_faster():
    # 256^3: the schedule's two copies of 64 x 32 x 256 run 66,698 cycles; the least-traffic
    # tilings the search simulates (one accumulator copy of 256 x 128) all run longer.
    config, registry = load_machine(), default_registry()
    result, trials, own = tune_npu(gemm(256, 256, 256), config, registry)
    assert min(t.cycles for t in trials if t.cycles is not None) > 66698 == own.cycles
    assert own.kept and simulated_cycles(result.func, config, registry) == 66698


def test_the_report_says_which_tiling_the_search_kept():
    assert OwnChoice(66698, 69072).describe() == (
        "the schedule's own tiling: simulated 66,698, kept")
    faster = OwnChoice(70000, 69072)
    assert not faster.kept and faster.describe() == (
        "the schedule's own tiling: simulated 70,000, the fastest trial (69,072) kept instead")


def test_a_function_without_an_npu_gemm_is_modelled_as_nothing():
    func = gemm(16, 16, 16)
    assert model_cycles(func, NpuTiling(16), load_machine(), default_registry()) == 0
