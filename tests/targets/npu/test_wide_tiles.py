"""Tiles with more column blocks than a token channel holds (issue 28): the token pass
coalesces a DMA run's tokens, :func:`targets.npu.tokens.stuck` proves a program free of
token deadlocks, and wide-tiled GEMMs run exactly on the 16x16 and 32x32 machines."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from intrinsics import default_registry
from ir.errors import SimulatorFault
from simulator import Finish, Nop, Queue, assemble, load_machine, simulate
from simulator.isa import Deps
from targets import npu
from targets.npu.machine import machine_registry
from targets.npu.tokens import Merge, insert_tokens, stuck
from tensorize.engine import auto_tensorize
from tensorize.engine.npu_traffic import GemmShape, NpuTiling, fits
from tests.simulator.helpers import small_machine
from tests.tensorize.engine.suite import SUITE

ROOT = Path(__file__).resolve().parents[3]
MACHINE_32 = ROOT / "examples" / "machines" / "npu32x32.yaml"


def _gemm_builder():
    spec = importlib.util.spec_from_file_location("wide_tiles_suite", SUITE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.gemm_int8


GEMM = _gemm_builder()


@pytest.fixture(scope="module", params=["16x16", "32x32"])
def machine(request):
    """(config, registry) of the built-in 16x16 NPU or the example 32x32 one."""
    if request.param == "16x16":
        return load_machine(), default_registry()
    return load_machine(MACHINE_32), machine_registry(MACHINE_32)


def _run_exactly(m: int, n: int, k: int, config, registry, tiling: NpuTiling | None = None
                 ) -> None:
    """Tensorize and simulate the int8 GEMM (A: m x k, B: k x n), asserting its output
    equals numpy's."""
    result = auto_tensorize(GEMM(m=m, n=n, k=k), "npu", registry=registry, config=config,
                            tiling=tiling)
    rng = np.random.default_rng(m * n + k)
    A = rng.integers(-128, 128, (m, k)).astype(np.int8)
    B = rng.integers(-128, 128, (k, n)).astype(np.int8)
    run = npu.run(result.func, {"A": A, "B": B}, config, lookup=registry.get)
    np.testing.assert_array_equal(run.outputs["C"], A.astype(np.int32) @ B.astype(np.int32))


def test_fc_gemm_with_its_widest_tile_runs_exactly():
    # 16 x 2048 x 1008 deadlocked with tiles of more column blocks than token_depth; the
    # traffic model no longer offers such tiles (most_blocks), but any tile must run.
    config, registry = load_machine(), default_registry()
    shape = GemmShape(16, 1008, 2048, 16, 16, 16)
    tiling = NpuTiling(16, 336, 16, "mn")
    assert fits(shape, tiling, config) and tiling.cols // 16 > config.queues.token_depth
    _run_exactly(16, 1008, 2048, config, registry, tiling)


# M x K x N: the classifier, then a 1x1 or 3x3 convolution of each stage as a GEMM, and the
# two that take tiles of more than token_depth / 2 column blocks on the 16x16 machine. The
# classifier in the default run; the convolutions in CI's slow pass.
@pytest.mark.parametrize(("m", "k", "n"), [
    (16, 2048, 1008),
    *(pytest.param(*shape, marks=pytest.mark.slow)
      for shape in [(49, 1024, 512), (196, 2304, 256), (784, 256, 512), (3136, 64, 256),
                    (49, 4608, 512), (784, 1152, 128)])])
def test_resnet_shapes_run_exactly_with_the_chosen_tiles(machine, m, k, n):
    config, registry = machine
    _run_exactly(m, n, k, config, registry)


def _store_run_program(blocks: int) -> list:
    """Three tiles' worth of one GEMM block per column, then their stores: the accumulator
    is double-buffered, so each tile's stores are overwritten by the tile after next."""
    text = []
    for tile in range(3):
        base = (tile % 2) * blocks * 4
        text.append("load inp[0], dram[0x0], rows=4, cols=4, stride=4")
        text.append("load wgt[0], dram[0x0], rows=4, cols=4, stride=4")
        text += [f"gemm acc[{base + 4 * b}], inp[0], wgt[0], rows=4, k=4, reset"
                 for b in range(blocks)]
        text += [f"store dram[{0x100 + 64 * (tile * blocks + b)}], acc[{base + 4 * b}], "
                 f"rows=4, cols=4, stride=16" for b in range(blocks)]
    return list(assemble("\n".join(text)))


SIZES = {"inp": 64, "wgt": 64, "acc": 64, "dram": 4096}


def test_a_run_of_stores_pushes_one_token_for_the_tile_after_next():
    program = insert_tokens(_store_run_program(6), SIZES, Merge.LATER)
    store_pushes = [i for i, insn in enumerate(program)
                    if insn.queue is Queue.STORE and insn.deps.push_prev]
    stores = [i for i, insn in enumerate(program) if insn.queue is Queue.STORE]
    # Tile 0's stores are waited on by tile 2 only: one token, from the run's last store.
    assert store_pushes == [stores[5]]
    assert stuck(program, 2, 8) is None


def test_one_token_per_store_sticks_when_the_channel_is_shallower_than_the_run():
    program = insert_tokens(_store_run_program(6), SIZES)
    assert sum(insn.deps.push_prev for insn in program if insn.queue is Queue.STORE) == 6
    assert stuck(program, 6, 8) is None
    assert "store waits to push into store->compute" in stuck(program, 5, 8)


def test_merging_every_run_leaves_one_token_per_run_and_channel():
    program = insert_tokens(_store_run_program(6), SIZES, Merge.ALL)
    pushes = sum(insn.deps.push_next for insn in program if insn.queue is Queue.COMPUTE)
    assert pushes == 3  # one per tile's GEMM run, covering its six stores
    assert stuck(program, 1, 8) is None


@pytest.mark.parametrize("merge", list(Merge))
def test_wide_stores_run_exactly_in_the_simulator(merge):
    program = insert_tokens(_store_run_program(6), SIZES, merge)
    dram = np.random.default_rng(0).integers(-128, 128, 4096).astype(np.uint8)
    result = simulate(program, small_machine(queues__token_depth=6), dram)
    # Every tile computes A @ B of the same 4x4 operands, int32, into each of its blocks.
    A = dram[:16].view(np.int8).reshape(4, 4).astype(np.int32)
    B = dram[:16].view(np.int8).reshape(4, 4).astype(np.int32)
    stored = result.dram[0x100:0x100 + 64 * 18].view(np.int32).reshape(18, 4, 4)
    np.testing.assert_array_equal(stored, np.broadcast_to(A @ B, (18, 4, 4)))


def _random_token_program(rng: np.random.Generator, length: int) -> list:
    """NOPs on random queues with random pushes, each pop taking a token pushed earlier in
    program order (as the token pass's are), then NOPs popping what is left."""
    outstanding = {(a, b): 0 for a in range(3) for b in range(3) if abs(a - b) == 1}
    program = []
    for _ in range(length):
        q = int(rng.integers(3))
        flags = {}
        for name, src in (("pop_prev", q - 1), ("pop_next", q + 1)):
            if outstanding.get((src, q), 0) and rng.random() < 0.5:
                flags[name] = True
                outstanding[(src, q)] -= 1
        for name, dst in (("push_prev", q - 1), ("push_next", q + 1)):
            if (q, dst) in outstanding and rng.random() < 0.5:
                flags[name] = True
                outstanding[(q, dst)] += 1
        program.append(_nop(q, flags))
    for (src, dst), count in outstanding.items():
        name = "pop_prev" if src < dst else "pop_next"
        program += [_nop(dst, {name: True})] * count
    return program


def _nop(queue: int, flags: dict[str, bool]) -> Nop:
    return Nop(Queue(queue), Deps(**flags))


@pytest.mark.parametrize("seed", range(40))
def test_stuck_agrees_with_the_simulator(seed):
    rng = np.random.default_rng(seed)
    program = _random_token_program(rng, 30)
    depth, fetch = int(rng.integers(1, 4)), int(rng.integers(1, 6))
    config = small_machine(queues__token_depth=depth, queues__instruction_depth=fetch)
    try:
        simulate([*program, Finish()], config, np.zeros(16, np.uint8))
        deadlocked = None
    except SimulatorFault as fault:
        assert "deadlock" in fault.message
        deadlocked = fault.message
    why = stuck(program, depth, fetch)
    assert (why is None) == (deadlocked is None), (why, deadlocked)


def test_stuck_names_the_full_channels():
    # Each queue pushes two tokens to the other before popping any.
    program = list(assemble("""
    nop.store | push_prev
    nop.store | push_prev
    nop.compute | push_next
    nop.compute | push_next
    nop.store | pop_prev
    nop.store | pop_prev
    nop.compute | pop_next
    nop.compute | pop_next
    """))
    assert stuck(program, 2, 8) is None
    assert stuck(program, 1, 8) == ("load has finished; compute waits to push into "
                                 "compute->store; store waits to push into store->compute")


def test_stuck_runs_the_fetch_unit():
    # With one slot per queue, the second compute instruction is dispatched only once the
    # first starts, which needs the load's token, fetched after it.
    program = list(assemble("""
    nop.compute | pop_prev
    nop.compute
    nop.load | push_next
    """))
    assert stuck(program, 8, 2) is None
    assert stuck(program, 8, 1) == ("load waits for its next instruction (fetch waits on the "
                                     "full compute queue); compute (its instruction 0) waits "
                                     "to pop from load->compute; store has finished")
