"""The on-chip memory planner (``targets.npu.memory``): a copy of a staged tile larger than a
bank spans banks from a bank boundary, with each column block (the rows one instruction
walks) inside one bank; tiles so placed run exactly, and move the bytes the traffic model
counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from intrinsics import default_registry
from ir.buffer import Buffer
from ir.errors import ExecutionError
from ir.onnx.kernels import Requantisation, matmul_requantised
from ir.onnx.quant import requantize
from simulator import load_machine
from simulator.config import MemoryConfig
from targets import npu
from targets.npu.memory import place, plan_on_chip, slab_rows, slab_stride
from tensorize.engine import auto_tensorize
from tensorize.engine.npu_schedule import gemm_shape
from tensorize.engine.npu_traffic import NpuTiling, acc_copies, fits, in_banks, traffic
from tests.tensorize.schedule.kernels import gemm_int8

MACHINE_32 = Path(__file__).resolve().parents[3] / "examples" / "machines" / "npu32x32.yaml"
BANKS = MemoryConfig(rows=4096, banks=4)  # banks of 1,024 rows


def test_a_copy_within_a_bank_never_crosses_one():
    # 600 rows fit at 0; the next 600 would cross row 1,024, so they start there.
    assert place([600], [600], [2], BANKS) == [(0, 1024)]
    assert place([300, 300], [300, 300], [2, 1], BANKS) == [(0, 300), (600,)]


def test_a_copy_larger_than_a_bank_spans_banks_from_a_bank_boundary():
    # 3 blocks of 512 rows: 1,536 rows from row 0, the second copy from the next boundary.
    assert place([1536], [512], [2], BANKS) == [(0, 2048)]
    # After a small buffer, the spanning copy still starts on a boundary.
    assert place([10, 1536], [10, 512], [1, 1], BANKS) == [(0,), (1024,)]


def test_a_spanning_copy_whose_blocks_do_not_divide_the_bank_lays_them_a_stride_apart():
    # 400-row blocks in 1,024-row banks: a stride of 512 rows, so copy 0's blocks start at
    # 0, 512 and 1,024; copy 1 starts in the next cell its first block fits (1,536).
    assert slab_stride(1200, 400, 1024) == 512
    assert place([1200], [400], [2], BANKS) == [(0, 1536)]
    # A buffer before it: the first block fits in the rest of the first cell.
    assert place([10, 1200], [10, 400], [1, 1], BANKS) == [(0,), (10,)]
    assert slab_stride(1200, 300, 1000) == 500  # the least divisor of the bank from 300
    assert slab_stride(600, 200, 1024) == 200  # a copy within a bank keeps its rows together


def test_a_copy_that_cannot_keep_its_blocks_in_banks_is_refused():
    assert place([1200], [1200], [1], BANKS) is None   # one block larger than a bank
    assert place([2048], [1024], [3], BANKS) is None   # 6,144 rows in 4,096
    assert place([2400], [400], [2], BANKS) is None    # 2 x (5 x 512 + 400) rows


@settings(max_examples=60, deadline=None)
@given(buffers=st.lists(st.tuples(st.integers(1, 700), st.integers(1, 8), st.integers(1, 2)),
                        min_size=1, max_size=4),
       banks=st.sampled_from([1, 2, 4]), bank=st.sampled_from([512, 1000, 1024]))
def test_every_placed_block_lies_in_one_bank_and_no_two_copies_meet(buffers, banks, bank):
    memory = MemoryConfig(rows=banks * bank, banks=banks)
    sizes = [slab * count for slab, count, _ in buffers]
    slabs = [slab for slab, _, _ in buffers]
    placed = place(sizes, slabs, [copies for _, _, copies in buffers], memory)
    assume(placed is not None)
    used = np.zeros(memory.rows, np.int64)
    for size, slab, bases in zip(sizes, slabs, placed):
        stride = slab_stride(size, slab, bank)
        for base in bases:
            for first in range(base, base + size // slab * stride, stride):
                assert first // bank == (first + slab - 1) // bank
                used[first:first + slab] += 1
    assert used.max() == 1 and used.sum() == sum(
        size * len(bases) for size, bases in zip(sizes, placed))
def test_a_block_is_one_index_of_the_leading_dimensions():
    assert slab_rows((3, 512, 32), 1536) == 512
    assert slab_rows((2, 4, 64, 16), 512) == 64
    assert slab_rows((700, 16), 700) == 700


def test_the_planner_names_the_buffers_it_cannot_hold():
    config = load_machine()  # acc: 2,048 rows in 2 banks of 16 int32
    tile = Buffer("acc_tile", (3, 800, 16), "int32", scope="npu.acc")
    with pytest.raises(ExecutionError, match=r"acc memory \(2048 rows in 2 banks\) cannot "
                                             r"hold acc_tile 2400 rows"):
        plan_on_chip([tile], config)


def _run(m: int, n: int, k: int, config, registry, tiling: NpuTiling):
    """A random int8 GEMM tensorized with ``tiling`` and simulated: the run, its plan's
    accumulator and input tiles, and whether C equals numpy's product exactly."""
    result = auto_tensorize(gemm_int8(m, n, k), "npu", registry=registry, config=config,
                            tiling=tiling)
    (outcome,) = result.tensorized
    rng = np.random.default_rng(m + n + k)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    run = npu.run(result.func, {"A": a, "B": b}, config, lookup=registry.get)
    (stage,) = (s.compiled for s in run.stages if s.compiled is not None)
    placed = {p.mem.name: p for p in stage.on_chip.values()}
    exact = np.array_equal(run.outputs["C"], a.astype(np.int32) @ b.astype(np.int32))
    return gemm_shape(registry.get(outcome.intrinsic), outcome.extents), run, placed, exact


def test_an_accumulator_tile_across_both_banks_runs_exactly():
    # 128 x 256 int32 on the 16x16 machine: 16 blocks of 128 rows, 2,048 rows, the whole
    # accumulator memory in one copy (two do not fit), each block inside a bank.
    config, registry = load_machine(), default_registry()
    tiling = NpuTiling(128, 256, 16, "mn")
    shape, run, placed, exact = _run(128, 256, 32, config, registry, tiling)
    assert exact
    assert (placed["ACC"].rows, placed["ACC"].bases) == (2048, (0,))
    assert run.dram_bytes == traffic(shape, tiling)
    assert acc_copies(shape, tiling, config) == 1  # as the traffic model counts it


def test_an_accumulator_tile_of_blocks_a_stride_apart_runs_exactly():
    # 208 x 128 int32 on the 16x16 machine: 8 blocks of 208 rows, which do not divide the
    # 1,024-row bank, so they lie 256 rows apart (four to a bank) in one copy.
    config, registry = load_machine(), default_registry()
    tiling = NpuTiling(208, 128, 16, "mn")
    shape, run, placed, exact = _run(208, 128, 48, config, registry, tiling)
    assert exact
    acc = placed["ACC"]
    assert (acc.rows, acc.bases, acc.slab, acc.stride) == (1664, (0,), 208, 256)
    assert run.dram_bytes == traffic(shape, tiling)
    assert acc_copies(shape, tiling, config) == 1


def _requantised(m: int, n: int, k: int, zero: int, tiling: NpuTiling, seed: int):
    """A random requantised GEMM tensorized with ``tiling`` and simulated: its one stage's
    on-chip plan, and whether its output equals the host's requantisation exactly."""
    config, registry = load_machine(), default_registry()
    func = matmul_requantised(m, k, n, Requantisation(zero))
    result = auto_tensorize(func, "npu", registry=registry, config=config, tiling=tiling)
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    bias = rng.integers(-3000, 3001, n).astype(np.int32)
    scale = rng.uniform(1e-3, 0.05, n).astype(np.float32)
    run = npu.run(result.func, {"A": a, "B": b, "Bias": bias, "Scale": scale}, config,
                  lookup=registry.get)
    (stage,) = (s.compiled for s in run.stages if s.compiled is not None)
    acc = a.astype(np.int32) @ b.astype(np.int32) + bias
    exact = np.array_equal(run.outputs[func.params[-1].name],
                           requantize(acc, scale, np.int8(zero)))
    return stage.on_chip, exact


def test_a_requantised_tile_of_blocks_a_stride_apart_runs_exactly():
    # The 208 x 128 tile of the test before, its bias and scale vectors (8 rows each) beside it:
    # they follow the blocks (rows 2,000 to 2,015), one copy of each.
    on_chip, exact = _requantised(208, 128, 96, 5, NpuTiling(208, 128, 32, "mn"), 11)
    assert exact
    placed = sorted((p.bases, p.stride) for p in on_chip.values() if p.mem.name == "ACC")
    assert placed == [((0,), 256), ((2000,), 8), ((2008,), 8)]


def test_double_buffered_input_tiles_across_banks_run_exactly():
    # On the 32x32 machine (input banks of 1,024 rows of 32 int8), a 512 x 96 input tile is
    # 3 blocks of 512 rows: each copy spans two banks, and two copies fit.
    config, registry = npu.load_machine(MACHINE_32), npu.machine_registry(MACHINE_32)
    tiling = NpuTiling(512, 32, 96, "nm")
    shape, run, placed, exact = _run(512, 64, 192, config, registry, tiling)
    assert exact
    assert (placed["INP"].rows, placed["INP"].bases) == (1536, (0, 2048))
    assert run.dram_bytes == traffic(shape, tiling)
    assert fits(shape, tiling, config) and not in_banks(shape, tiling, config)
    assert in_banks(shape, NpuTiling(512, 32, 64, "nm"), config)  # 2 blocks, 1,024 rows


def test_a_requantised_tile_filling_a_bank_runs_exactly_in_one_copy():
    # A 64 x 256 accumulator tile (16 blocks of 64 rows) fills a 1,024-row bank, so with the
    # epilogue's bias and scale rows beside it two copies of each do not fit: the planner
    # keeps one copy of every accumulator buffer (ResNet-50's 49 x 512 x 4608 takes it).
    on_chip, exact = _requantised(64, 256, 64, -3, NpuTiling(64, 256, 32, "mn"), 7)
    assert exact
    assert all(len(p.bases) == 1 for p in on_chip.values() if p.mem.name == "ACC")
