"""The cycle model of the NPU's GEMM schedule against the simulator, its hand-counted terms,
and the tile choice that uses it: near the least traffic, near the fewest cycles, within the
block limit or wider where that moves less at the same cycles, and exact when run."""

from __future__ import annotations

from pathlib import Path

import pytest

from intrinsics import default_registry
from simulator import load_machine
from targets import npu
from tensorize.engine import auto_tensorize
from ir.onnx.kernels import Requantisation, matmul_requantised
from tensorize.engine.npu_cycles import (CYCLE_SLACK, TRADE_LIMIT, TRAFFIC_SLACK,
                                         TRAFFIC_TRADE, choose, choose_narrow, gemm_cycles,
                                         gemm_work, transfer_cycles, wide_cycles, widest)
from tensorize.engine.npu_schedule import gemm_axes, gemm_shape
from tensorize.engine.npu_traffic import (GemmShape, NpuTiling, fits, in_banks, most_blocks,
                                          ranked, traffic)
from tensorize.engine.tune import simulated_cycles
from tests.tensorize.schedule.kernels import gemm_int8

MACHINES = Path(__file__).resolve().parents[3] / "examples" / "machines"


def machine(name: str | None):
    """The built-in machine (None) or a machine file's, with its registry."""
    if name is None:
        return load_machine(), default_registry()
    return npu.load_machine(MACHINES / name), npu.machine_registry(MACHINES / name)


def simulated(m: int, n: int, k: int, name: str | None, tiling: NpuTiling):
    """The shape the schedule saw and the simulated cycles of an int8 GEMM under
    ``tiling``, with the machine."""
    config, registry = machine(name)
    result = auto_tensorize(gemm_int8(m, n, k), "npu", registry=registry, config=config,
                            tiling=tiling)
    (outcome,) = result.tensorized
    shape = gemm_shape(registry.get(outcome.intrinsic), outcome.extents)
    return shape, config, simulated_cycles(result.func, config, registry)


def requantised_cycles(m: int, n: int, k: int, tiling: NpuTiling) -> int:
    """Simulated cycles on the built-in machine of an int8 GEMM with its bias and
    requantisation on the vector unit, as ResNet-50's layers run, under ``tiling``."""
    config, registry = machine(None)
    result = auto_tensorize(matmul_requantised(m, k, n, Requantisation(0)), "npu",
                            registry=registry, config=config, tiling=tiling)
    return simulated_cycles(result.func, config, registry)


def test_a_transfer_waits_on_the_port_or_on_the_latency_of_its_requests():
    config = load_machine()  # 32 bytes per cycle, latency 100, 4 requests in flight
    assert transfer_cycles(4096, 1, config) == 4096 / 32
    # 22 requests of 256 bytes: 5.5 rounds of 4 requests, each waiting 100 cycles.
    assert transfer_cycles(22 * 256, 22, config) == (22 * 100 + 22 * 256 / 32) / 4


def test_the_work_of_a_tiling_is_counted_by_hand():
    # 64^3 in 32 x 32 tiles 16 deep: 4 tiles of 4 steps, each step 1 x 2 GEMMs of 32 rows.
    # A is read once per column tile (2), B once per row tile (2): 16 input tiles of one
    # block, 16 weight tiles of two; 4 stores of two blocks.
    work = gemm_work(GemmShape(64, 64, 64, 16, 16, 16), NpuTiling(32, 32, 16, "mn"))
    assert (work.tiles, work.steps, work.per_step, work.rows) == (4, 16, 2, 32)
    assert work.load_bytes == 2 * 4096 + 2 * 4096
    assert work.load_requests == 16 * 1 + 16 * 2
    assert (work.store_bytes, work.store_requests) == (64 * 64 * 4, 4 * 2)
    # The first step loads one 32 x 16 input tile and one 16 x 32 weight tile (two blocks).
    assert (work.first_bytes, work.first_requests) == (512 + 512, 1 + 2)


def test_the_first_step_of_a_kept_panel_loads_the_whole_panel():
    # 256^3 on the 32x32 machine in 256 x 32 tiles 256 deep: one row tile, so the 64 KiB
    # input panel (8 blocks) is loaded once, before the first GEMM; the later steps load a
    # weight tile alone. The model counts the panel where the run starts (the average step
    # would leave 900 cycles out).
    tiling = NpuTiling(256, 32, 256, "mn")
    shape, config, cycles = simulated(256, 256, 256, "npu32x32.yaml", tiling)
    work = gemm_work(shape, tiling)
    assert (work.first_bytes, work.first_requests) == (256 * 256 + 256 * 32, 8 + 1)
    assert abs(gemm_cycles(shape, tiling, config) - cycles) <= 0.01 * cycles


@pytest.mark.parametrize("m, n, k, name, tiling", [
    (256, 256, 256, None, NpuTiling(256, 64, 32, "mn")),
    pytest.param(256, 256, 256, None, NpuTiling(128, 128, 32, "mn"), marks=pytest.mark.slow),
    # A 16-deep step does not hide its tile's store.
    pytest.param(256, 256, 256, None, NpuTiling(256, 64, 16, "mn"), marks=pytest.mark.slow),
    pytest.param(256, 256, 256, "npu32x32.yaml", NpuTiling(128, 128, 64, "mn"),
                 marks=pytest.mark.slow),
])
def test_the_model_is_within_five_percent_of_the_simulator(m, n, k, name, tiling):
    shape, config, cycles = simulated(m, n, k, name, tiling)
    assert abs(gemm_cycles(shape, tiling, config) - cycles) <= 0.05 * cycles


def test_a_wide_tile_of_shallow_blocks_is_modelled_as_slow_as_it_runs():
    # 21 weight blocks 16 rows deep per step: 22 requests wait on the DRAM latency, four in
    # flight at a time; 7 blocks 64 deep move the same bytes in fewer requests.
    wide = NpuTiling(16, 336, 16, "mn")
    deep = NpuTiling(16, 112, 64, "mn")
    shape, config, wide_cycles = simulated(16, 1008, 256, None, wide)
    _, _, deep_cycles = simulated(16, 1008, 256, None, deep)
    assert wide_cycles > 1.1 * deep_cycles
    assert gemm_cycles(shape, wide, config) > 1.1 * gemm_cycles(shape, deep, config)


@pytest.mark.parametrize("name", [None, "npu32x32.yaml", "npu8x64.yaml"])
@pytest.mark.parametrize("m, n, k", [(784, 512, 128), (49, 2048, 512), (16, 1008, 2048),
                                     (3136, 64, 64), (48, 32, 16), (64, 128, 4096)])
def test_the_choice_is_near_the_least_traffic_and_the_fewest_cycles(m, n, k, name):
    config, registry = machine(name)
    gemm = next(i for i in registry.for_target("npu") if i.kind == "compute"
                and i.reduce_vars() and not i.resets)
    ti, tj, tk = gemm_axes(gemm).extents
    shape = gemm_shape(gemm, (-(-m // ti) * ti, -(-n // tj) * tj, -(-k // tk) * tk))
    chosen = choose(shape, config)
    limit = most_blocks(config)
    blocks = lambda t: (t.cols or shape.tj) // shape.tj  # noqa: E731
    in_bank = [t for t in ranked(shape, config) if in_banks(shape, t, config)]
    allowed = [t for t in in_bank if blocks(t) <= limit]
    narrow = choose_narrow(shape, config, in_bank)
    assert narrow in allowed
    least = min(traffic(shape, t) for t in allowed)
    assert traffic(shape, narrow) <= (1 + TRAFFIC_SLACK) * least
    near = [t for t in allowed if traffic(shape, t) <= (1 + TRAFFIC_SLACK) * least]
    fewest = min(gemm_cycles(shape, t, config) for t in near)
    assert gemm_cycles(shape, narrow, config) <= (1 + CYCLE_SLACK) * fewest
    assert fits(shape, chosen, config)
    if chosen != narrow:
        assert blocks(chosen) > limit or not in_banks(shape, chosen, config)
        assert blocks(chosen) <= widest(config) and chosen.rows >= narrow.rows
        assert traffic(shape, chosen) < traffic(shape, narrow)
        saved = 1 - traffic(shape, chosen) / traffic(shape, narrow)
        slack = max(CYCLE_SLACK, min(TRADE_LIMIT, TRAFFIC_TRADE * saved))
        assert wide_cycles(shape, chosen, config) <= (1 + slack) * gemm_cycles(
            shape, narrow, config)


def test_a_wider_tile_moves_less_at_the_narrow_ones_cycles():
    # 64 x 128 x 4096 on the 16x16 machine, requantised as ResNet-50's layers are: one 64 x
    # 128 tile (8 column blocks, more than the token queues serve one token each) reads A
    # once instead of twice, and runs within the cycle slack of two 64 x 64 tiles.
    config, _ = machine(None)
    shape = GemmShape(64, 128, 4096, 16, 16, 16)
    chosen = choose(shape, config)
    narrow = choose_narrow(shape, config, ranked(shape, config))  # every tile fits a bank
    assert (chosen.rows, chosen.cols, narrow.rows, narrow.cols) == (64, 128, 64, 64)
    assert traffic(shape, chosen) == shape.minimum
    assert traffic(shape, narrow) == shape.minimum + 64 * 4096
    assert requantised_cycles(64, 128, 4096, chosen) <= (1 + CYCLE_SLACK) * \
        requantised_cycles(64, 128, 4096, narrow)


def test_a_gemm_of_one_call_is_one_tile():
    chosen = choose(GemmShape(16, 16, 16, 16, 16, 16), load_machine())
    assert (chosen.rows, chosen.cols or 16, chosen.depth or 16) == (16, 16, 16)
