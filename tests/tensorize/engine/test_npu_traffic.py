"""The DRAM traffic model of the NPU's GEMM schedule: its byte count is the simulator's, for
every tile shape and loop order (tiles of more column blocks than the schedule takes
included), on machines of both dataflows and sizes that do not divide the tile; the
schedule's own choice stays exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from intrinsics import default_registry
from simulator import load_machine
from targets import npu
from tensorize.engine import auto_tensorize
from tensorize.engine.npu_schedule import choose_tiling, gemm_shape
from tensorize.engine.npu_traffic import (GemmShape, NpuTiling, acc_copies, candidates, fits,
                                          traffic)
from tests.tensorize.schedule.kernels import gemm_int8

MACHINES = Path(__file__).resolve().parents[3] / "examples" / "machines"


def machine(name: str | None):
    """The built-in machine (None) or a machine file's, with its registry."""
    if name is None:
        return load_machine(), default_registry()
    path = MACHINES / name
    return npu.load_machine(path), npu.machine_registry(path)


def simulate(m: int, n: int, k: int, name: str | None, tiling: NpuTiling | None):
    """Tensorize and run a random int8 GEMM; the shape the schedule saw, the run, and
    whether C equals numpy's product exactly."""
    config, registry = machine(name)
    result = auto_tensorize(gemm_int8(m, n, k), "npu", registry=registry, config=config,
                            tiling=tiling)
    (outcome,) = result.tensorized
    rng = np.random.default_rng(m * n + k)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    run = npu.run(result.func, {"A": a, "B": b}, config, lookup=registry.get)
    exact = np.array_equal(run.outputs["C"], a.astype(np.int32) @ b.astype(np.int32))
    return gemm_shape(registry.get(outcome.intrinsic), outcome.extents), config, run, exact


@pytest.mark.parametrize("m, n, k, name, tiling", [
    (64, 64, 64, None, NpuTiling(64)),                    # one call's columns and depth
    (64, 64, 64, None, NpuTiling(32, 32, 32, "mn")),      # both operands re-read
    (64, 64, 64, None, NpuTiling(32, 32, 64, "mn")),      # the input panel stays on chip
    (64, 64, 64, None, NpuTiling(32, 32, 64, "nm")),      # the weight panel stays on chip
    (33, 17, 15, None, NpuTiling(32, 16, 16, "nm")),      # padded to 48 x 32 x 16
    (64, 64, 128, None, NpuTiling(32, 32, 128, "mn")),    # 8 input blocks, the panel kept
    (48, 160, 40, None, NpuTiling(16, 80, 48, "nm")),     # 5 column blocks, B's panel kept
    (64, 128, 96, "npu32x32.yaml", NpuTiling(32, 64, 96, "nm")),
    (100, 96, 200, "npu32x32.yaml", None),                # padded to 128 x 96 x 224
    (31, 130, 40, "npu8x64.yaml", NpuTiling(16, 64, 16, "mn")),
    (64, 128, 96, "npu8x64.yaml", None),
    (64, 128, 4096, None, None),                          # chosen: 8 blocks, wider than 4
    (196, 128, 64, None, NpuTiling(208, 128, 32, "mn")),  # one accumulator copy, strided
    (100, 64, 48, None, NpuTiling(48, 64, 16, "mn")),     # M padded to 3 tiles of 48 rows
])
def test_the_models_bytes_are_the_simulators(m, n, k, name, tiling):
    shape, config, run, exact = simulate(m, n, k, name, tiling)
    assert exact
    assert run.dram_bytes == traffic(shape, tiling or choose_tiling(shape, config))
    assert run.roofline(config).min_dram_bytes == shape.minimum


def test_the_traffic_formula_on_a_hand_counted_case():
    # 64^3 in 32 x 32 tiles, 16 deep: A (4,096 bytes) is read once per column tile (2), B
    # once per row tile (2), C (16,384 bytes of int32) written once.
    shape = GemmShape(64, 64, 64, 16, 16, 16)
    assert traffic(shape, NpuTiling(32, 32, 16, "mn")) == 2 * 4096 + 2 * 4096 + 16384
    assert traffic(shape, NpuTiling(32, 32, 64, "mn")) == 4096 + 2 * 4096 + 16384
    assert traffic(shape, NpuTiling(32, 32, 64, "nm")) == 2 * 4096 + 4096 + 16384
    assert shape.minimum == 4096 + 4096 + 16384


def test_the_least_traffic_of_a_resnet_layer_reads_each_operand_about_once():
    # 3136 x 64 x 576 (layer1's 3x3): one column tile (tn = N) reads A once, and B, 36 KiB
    # against A's 1.8 MB, once per row tile of up to 224 rows.
    config = load_machine()
    shape = GemmShape(3136, 64, 576, 16, 16, 16)
    least = min(traffic(shape, t) for t in candidates(shape, config))
    assert least <= 1.2 * shape.minimum


def test_an_accumulator_tile_two_copies_of_which_do_not_fit_is_kept_once():
    config = load_machine()  # acc banks of 1,024 rows of 16 int32
    shape = GemmShape(256, 256, 256, 16, 16, 16)
    assert acc_copies(shape, NpuTiling(128, 128, 16), config) == 2  # 1,024 rows each
    assert acc_copies(shape, NpuTiling(256, 128, 16), config) == 1  # 2,048 rows
    assert not fits(shape, NpuTiling(256, 256, 16), config)  # 4,096 rows
    assert all(t.rows * t.cols <= 256 * 128 for t in candidates(shape, config))


def test_what_the_epilogue_keeps_beside_the_sums_counts_against_the_accumulator():
    config = load_machine()  # acc: 2,048 rows of 16 int32 in 2 banks
    alone = GemmShape(256, 256, 256, 16, 16, 16)
    joined = GemmShape(256, 256, 256, 16, 16, 16, acc_tiles=2)
    requantised = GemmShape(256, 256, 256, 16, 16, 16, acc_vectors=2)
    # 128 x 128 int32 takes 1,024 rows: two copies of the sums fill the memory; with a
    # skip tile beside them one copy of each fits, and with two 8-row vectors one copy.
    assert acc_copies(alone, NpuTiling(128, 128, 16), config) == 2
    assert acc_copies(joined, NpuTiling(128, 128, 16), config) == 1
    assert acc_copies(requantised, NpuTiling(128, 128, 16), config) == 1
    assert acc_copies(joined, NpuTiling(64, 128, 16), config) == 2
    assert not fits(joined, NpuTiling(256, 128, 16), config)


def test_a_residual_add_joined_to_a_wide_layer_gets_a_tile_with_room_for_its_skip(registry,
                                                                                 machine):
    from ir.onnx import kernels
    from tensorize.runners.npu import plan_npu

    # ResNet-18's last 3x3 convolution with its residual add, padded to the 16x16 tile.
    func = kernels.matmul_requantised_add(64, 4608, 512, kernels.Requantisation(0),
                                          kernels.ResidualAdd(0, relu=True))
    result = auto_tensorize(func, "npu", registry=registry, config=machine)
    assert all(outcome.intrinsic for outcome in result.blocks)
    plan_npu(result.func, machine, registry)  # the planner places every staged copy
