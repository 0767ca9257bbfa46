"""The steady-state fast-forward (simulator.steady) changes no figure: loop programs run
with it and without it (engine._FAST_FORWARD) on machines of random timing give the same
cycles, per-unit busy and stall, traffic, DRAM wait, MACs, trace records and DRAM image,
and the products numpy computes; a loop whose later iterations would read past DRAM's end
faults on the same instruction and iteration both ways.

Two pipelines, correct by construction for any timing: a K loop accumulating into one
output tile (double-buffered inputs and weights, as the NPU backend's GEMM loops are), and
a loop of output tiles each loaded, multiplied and stored (a STORE in the body, the acc
tile handed back by the store queue's token)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir.errors import SimulatorFault
from simulator import assemble, batched, engine, simulate, steady
from tests.simulator.helpers import small_machine
from tests.simulator.test_fast_paths import figures

A_ADDR, B_ADDR, C_ADDR = 0, 4096, 8192


def k_loop(rows: int, count: int, vector: bool = False) -> str:
    """C (rows x 4, int32 at C_ADDR) = A (rows x 4 * (2 + 2 * count)) @ B, in steps of 4
    of K, alternating two input and two weight buffers: two steps, then ``count``
    iterations of two more. With ``vector``, the vector unit zeroes the tile first and adds
    1 to it last (the loop's GEMMs wait for the first, the second for them)."""
    a_stride = 4 * (2 + 2 * count)

    def step(half: int, a_col: int, b_row: int, first: bool, pop: str) -> str:
        inp, wgt = 32 * half, 32 * half
        reset = ", reset" if first and not vector else ""
        return f"""
        load inp[{inp}], dram[{A_ADDR + a_col}], rows={rows}, cols=4, stride={a_stride}{pop}
        {"  step dram=8" if pop else ""}
        load wgt[{wgt}], dram[{B_ADDR + 4 * b_row}], rows=4, cols=4, stride=4 | push_next
        {"  step dram=32" if pop else ""}
        gemm acc[0], inp[{inp}], wgt[{wgt}], rows={rows}, k=4{reset} | pop_prev, push_prev
        """
    body = step(0, 8, 8, False, " | pop_next") + step(1, 12, 12, False, " | pop_next")
    return f"""
    {f"vec.fill acc[0], rows={rows}, imm=0" if vector else ""}
    {step(0, 0, 0, True, "")}
    {step(1, 4, 4, False, "")}
    loop count={count}, body={len(assemble(body + "finish")) - 1}
    {body}
    {f"vec.add acc[0], rows={rows}, imm=1" if vector else ""}
    nop.compute | push_next
    store dram[{C_ADDR}], acc[0], rows={rows}, cols=4, stride=16 | pop_prev
    finish
    """


def tile_loop(rows: int, count: int) -> str:
    """``count`` output tiles: tile j (rows x 4, int32 at C_ADDR + j * rows * 16) is A's
    j-th block of rows (rows x 4 at A_ADDR + j * rows * 4) @ B (4 x 4 at B_ADDR)."""
    return f"""
  nop.compute | push_prev
  nop.store | push_prev
  loop count={count}, body=6
    load inp[0], dram[{A_ADDR}], rows={rows}, cols=4, stride=4 | pop_next
      step dram={rows * 4}
    load wgt[0], dram[{B_ADDR}], rows=4, cols=4, stride=4 | push_next
    gemm acc[0], inp[0], wgt[0], rows={rows}, k=4, reset | pop_prev, pop_next, push_prev, push_next
    store dram[{C_ADDR}], acc[0], rows={rows}, cols=4, stride=16 | pop_prev, push_prev
      step dram={rows * 16}
  finish
  """


def _machine(data: st.DataObject):
    """The small machine with random DRAM, DMA, queue and array timing."""
    dataflow = data.draw(st.sampled_from(["weight_stationary", "output_stationary"]))
    return small_machine(
        array={"rows": 4, "cols": 4, "dataflow": dataflow,
               "double_buffered_weights": data.draw(st.booleans()),
               "latency": data.draw(st.integers(1, 6))},
        dram={"bytes_per_cycle": data.draw(st.sampled_from([2, 4, 16, 64])),
              "latency": data.draw(st.integers(1, 200))},
        dma={"max_outstanding": data.draw(st.integers(1, 4)),
             "issue_cycles": data.draw(st.integers(1, 8))},
        queues={"instruction_depth": data.draw(st.integers(2, 8)),
                "token_depth": data.draw(st.integers(2, 4)),
                "fetch_cycles": data.draw(st.integers(0, 3))})


def both_ways(text: str, config, image: np.ndarray, functional: bool = True
              ) -> tuple[object, int, list[bool]]:
    """Run the program with the fast-forward and without; the figures of the first once
    the two are checked equal, how many iterations it skipped, and for each skip whether
    simulator.batched computed its values."""
    skipped = []
    replays = []
    at_head = steady.FastForward.at_head
    replay = batched.replay

    def counting(self, *args):
        jump = at_head(self, *args)
        if jump is not None:
            skipped.append(self.skipped)
        return jump

    def recording(*args):
        replays.append(replay(*args))
        return replays[-1]

    program = assemble(text)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(steady.FastForward, "at_head", counting)
        patched.setattr(batched, "replay", recording)
        fast = simulate(program, config, image, functional=functional)
    with pytest.MonkeyPatch.context() as plain:
        plain.setattr(engine, "_FAST_FORWARD", False)
        slow = simulate(program, config, image, functional=functional)
    assert figures(fast) == figures(slow)
    return fast, (skipped[-1] if skipped else 0), replays


def _image(rng: np.random.Generator) -> np.ndarray:
    """DRAM: random operand bytes below C_ADDR, zeros from there (room for 40 tiles of 16
    rows of int32)."""
    image = np.zeros(C_ADDR + 16384, np.uint8)
    image[:C_ADDR] = rng.integers(0, 256, C_ADDR, dtype=np.uint8)
    return image


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 32), count=st.integers(4, 30), vector=st.booleans(),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_a_k_loop_gives_the_plain_figures(rows, count, vector, seed, data):
    config = _machine(data)
    image = _image(np.random.default_rng(seed))
    result, _, _ = both_ways(k_loop(rows, count, vector), config, image)
    depth = 4 * (2 + 2 * count)
    a = image[A_ADDR:A_ADDR + rows * depth].view(np.int8).reshape(rows, depth)
    b = image[B_ADDR:B_ADDR + 4 * depth].view(np.int8).reshape(depth, 4)
    got = result.dram[C_ADDR:C_ADDR + rows * 16].view("<i4").reshape(rows, 4)
    assert np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64) + vector)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 16), count=st.integers(4, 40), seed=st.integers(0, 2**32 - 1),
       data=st.data())
def test_a_loop_of_stored_tiles_gives_the_plain_figures(rows, count, seed, data):
    config = _machine(data)
    image = _image(np.random.default_rng(seed))
    result, _, _ = both_ways(tile_loop(rows, count), config, image)
    a = image[A_ADDR:A_ADDR + count * rows * 4].view(np.int8).reshape(count * rows, 4)
    b = image[B_ADDR:B_ADDR + 16].view(np.int8).reshape(4, 4)
    got = result.dram[C_ADDR:C_ADDR + count * rows * 16].view("<i4").reshape(-1, 4)
    assert np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize(("program", "products"), [
    (k_loop(16, 40), True),  # loads and GEMMs alone: simulator.batched
    (k_loop(16, 40, vector=True), True),  # the same between vector instructions
    (tile_loop(4, 40), False),  # a STORE: instruction by instruction
])
def test_a_long_loop_is_fast_forwarded(program, products):
    _, skipped, replays = both_ways(program, small_machine(),
                                    _image(np.random.default_rng(3)))
    assert skipped >= 20
    assert replays == [products]


@pytest.mark.parametrize("program", [k_loop(16, 40), tile_loop(4, 40)])
def test_a_timing_only_run_is_fast_forwarded_to_the_plain_figures(program):
    _, skipped, replays = both_ways(program, small_machine(),
                                    _image(np.random.default_rng(5)), functional=False)
    assert skipped >= 20
    assert replays == []  # no values to compute


def test_a_loop_of_loads_alone_leaves_the_last_ones_rows():
    # Iteration j loads A's j-th block of 8 x 4 bytes into inp; a GEMM after the loop
    # multiplies the last one. (Queues of 4: the load queue fills and settles in fewer
    # iterations than steady.TRIES.)
    program = f"""
    loop count=40, body=2
      load inp[0], dram[{A_ADDR}], rows=8, cols=4, stride=4
        step dram=32
    load wgt[0], dram[{B_ADDR}], rows=4, cols=4, stride=4 | push_next
    gemm acc[0], inp[0], wgt[0], rows=8, k=4, reset | pop_prev, push_next
    store dram[{C_ADDR}], acc[0], rows=8, cols=4, stride=16 | pop_prev
    finish
    """
    image = _image(np.random.default_rng(4))
    config = small_machine(queues={"instruction_depth": 4, "token_depth": 4,
                                   "fetch_cycles": 1})
    result, skipped, replays = both_ways(program, config, image)
    assert skipped >= 20
    assert replays == [True]
    a = image[A_ADDR + 39 * 32:A_ADDR + 40 * 32].view(np.int8).reshape(8, 4)
    b = image[B_ADDR:B_ADDR + 16].view(np.int8).reshape(4, 4)
    got = result.dram[C_ADDR:C_ADDR + 8 * 16].view("<i4").reshape(8, 4)
    assert np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


def test_a_reduction_past_float32s_exact_terms_stays_exact():
    # A 2048 x 1 array: each GEMM's k = 2048 is past the 1,024 int8 products whose sums
    # float32 holds exactly; 64 of them, against numpy in int64.
    config = small_machine(
        array={"rows": 2048, "cols": 1, "dataflow": "weight_stationary",
               "double_buffered_weights": True, "latency": 2},
        inp={"rows": 4, "banks": 2}, wgt={"rows": 8192, "banks": 2}, acc={"rows": 2, "banks": 2})
    step = """
    load inp[0], dram[{a}], rows=1, cols=2048, stride=2048{pop}
    {step}
    load wgt[0], dram[{b}], rows=2048, cols=1, stride=1 | push_next
    {step}
    gemm acc[0], inp[0], wgt[0], rows=1, k=2048{reset} | pop_prev, push_prev
    """
    b_addr, c_addr = 1 << 17, 1 << 18
    program = "\n".join([
        step.format(a=0, b=b_addr, pop="", step="", reset=", reset"),
        "loop count=63, body=5",
        step.format(a=2048, b=b_addr + 2048, pop=" | pop_next", step="  step dram=2048",
                    reset=""),
        "nop.compute | push_next",
        f"store dram[{c_addr}], acc[0], rows=1, cols=1, stride=4 | pop_prev",
        "finish"])
    # Values 100..127: each dot product passes 2**24, where float32 steps by 2 and more.
    image = np.random.default_rng(6).integers(100, 128, c_addr + 4, dtype=np.uint8)
    result, skipped, replays = both_ways(program, config, image)
    assert skipped >= 50
    assert replays == [True]
    a = image[:b_addr].view(np.int8).astype(np.int64)
    b = image[b_addr:c_addr].view(np.int8).astype(np.int64)
    assert result.dram[c_addr:].view("<i4")[0] == a @ b


def test_a_loop_reading_past_dram_faults_on_the_same_iteration_both_ways(monkeypatch):
    # Iteration j reads bytes 32 j .. 32 j + 31: DRAM ends inside iteration 25's.
    program = assemble("""
    loop count=40, body=2
      load inp[0], dram[0], rows=8, cols=4, stride=4
        step dram=32
    finish
    """)
    image = np.zeros(25 * 32 + 16, np.uint8)
    with pytest.raises(SimulatorFault) as fast:
        simulate(program, small_machine(), image)
    monkeypatch.setattr(engine, "_FAST_FORWARD", False)
    with pytest.raises(SimulatorFault) as plain:
        simulate(program, small_machine(), image)
    assert str(fast.value) == str(plain.value)
    assert "loop iteration (25,)" in str(fast.value)
