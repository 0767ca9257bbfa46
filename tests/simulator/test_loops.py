"""Loop and step words: their three forms, the programs they stand for, and the simulator
running them at the same fidelity as straight-line code (values, cycles, faults, trace)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ir.errors import SimulatorFault
from simulator import (
    Gemm,
    Load,
    Loop,
    Mem,
    Step,
    assemble,
    decode,
    disassemble,
    encode,
    gemm_program,
    simulate,
)
from simulator.loops import expand, expanded
from tests.simulator.helpers import dram_with, small_machine
from tests.simulator.test_isa import INSTRUCTIONS

LOOPS = st.builds(Loop, st.integers(1, 2 ** 32 - 1), st.integers(1, 2 ** 16 - 1))
I32 = st.integers(-(2 ** 31), 2 ** 31 - 1)
STEPS = st.tuples(st.integers(0, 7), I32, I32, I32).filter(lambda t: any(t[1:])).map(
    lambda t: Step(*t))
WORDS = st.lists(st.one_of(INSTRUCTIONS, LOOPS, STEPS), max_size=20)

# C = A @ B on the small machine, A 8 x 16 at 0x0, B 16 x 4 at 0x80, C (int32) at 0xc0.
# Nested loops load A's four K-slices of both 4-row halves, and run the GEMMs of both
# halves, the first of each resetting; the steps give the addresses of every iteration.
NESTED = """\
loop count=2, body=4
  loop count=4, body=3
    load inp[0], dram[0x0], rows=4, cols=4, stride=16
      step sram=8, dram=4
      step loop=1, sram=4, dram=64
load wgt[0], dram[0x80], rows=16, cols=4, stride=4 | push_next
nop.compute | pop_prev
loop count=2, body=6
  gemm acc[0], inp[0], wgt[0], rows=4, k=4, reset
    step acc=4, inp=4
  loop count=3, body=3
    gemm acc[0], inp[8], wgt[4], rows=4, k=4
      step inp=8, wgt=4
      step loop=1, acc=4, inp=4
nop.compute | push_next
store dram[0xc0], acc[0], rows=8, cols=4, stride=16 | pop_prev
finish
"""

# gemm_program(8, 4, 40, small machine, tiles=(8, 1)) with its steady steps as a loop: the
# first two steps pop no token (their buffers are fresh), the last two push none to load.
FOLDED_GEMM = """\
load inp[0], dram[0x0], rows=8, cols=4, stride=40
load wgt[0], dram[0x140], rows=4, cols=4, stride=4 | push_next
gemm acc[0], inp[0], wgt[0], rows=8, k=4, reset | pop_prev, push_prev
load inp[32], dram[0x4], rows=8, cols=4, stride=40
load wgt[32], dram[0x150], rows=4, cols=4, stride=4 | push_next
gemm acc[0], inp[32], wgt[32], rows=8, k=4 | pop_prev, push_prev
loop count=3, body=10
  load inp[0], dram[0x8], rows=8, cols=4, stride=40 | pop_next
    step dram=8
  load wgt[0], dram[0x160], rows=4, cols=4, stride=4 | push_next
    step dram=32
  gemm acc[0], inp[0], wgt[0], rows=8, k=4 | pop_prev, push_prev
  load inp[32], dram[0xc], rows=8, cols=4, stride=40 | pop_next
    step dram=8
  load wgt[32], dram[0x170], rows=4, cols=4, stride=4 | push_next
    step dram=32
  gemm acc[0], inp[32], wgt[32], rows=8, k=4 | pop_prev, push_prev
load inp[0], dram[0x20], rows=8, cols=4, stride=40 | pop_next
load wgt[0], dram[0x1c0], rows=4, cols=4, stride=4 | push_next
gemm acc[0], inp[0], wgt[0], rows=8, k=4 | pop_prev
load inp[32], dram[0x24], rows=8, cols=4, stride=40 | pop_next
load wgt[32], dram[0x1d0], rows=4, cols=4, stride=4 | push_next
gemm acc[0], inp[32], wgt[32], rows=8, k=4 | pop_prev, push_next
store dram[0x200], acc[0], rows=8, cols=4, stride=16 | pop_prev, push_prev
finish | pop_next
"""


def nested_inputs(seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (8, 16), dtype=np.int8)
    b = rng.integers(-128, 128, (16, 4), dtype=np.int8)
    return a, b, dram_with(4096, a=(0, a), b=(0x80, b))


def read_c(dram: np.ndarray) -> np.ndarray:
    return dram[0xc0:0xc0 + 128].view("<i4").reshape(8, 4)


@given(WORDS)
def test_assembly_round_trip_with_loops_and_steps(program):
    text = disassemble(program)
    assert assemble(text) == tuple(program)
    assert disassemble(assemble(text)) == text


@given(WORDS)
def test_binary_round_trip_with_loops_and_steps(program):
    assert decode(encode(program)) == tuple(program)


def test_assembly_of_loops_is_indented_and_names_step_fields():
    assert disassemble(assemble(NESTED)) == NESTED
    program = assemble(NESTED)
    assert program[0] == Loop(2, 4) and program[3] == Step(0, 8, 4)
    assert program[4] == Step(1, 4, 64)
    assert program[13] == Step(1, 4, 4, 0)  # a GEMM's fields: acc, inp, wgt
    # Positional deltas read the same, and name the fields of whatever they follow.
    assert assemble("gemm acc[0], inp[0], wgt[0], rows=4, k=4\nstep d1=4, d2=-4")[1] == \
        Step(0, 0, 4, -4)


def test_nested_loops_expand_to_every_iteration_in_fetch_order():
    lines = [node.instruction_at(it) for node, it in expand(assemble(NESTED))
             if isinstance(node.insn, Load) and node.insn.mem is Mem.INP]
    assert [(x.sram, x.dram) for x in lines] == [
        (4 * h + 8 * kk, 64 * h + 4 * kk) for h in range(2) for kk in range(4)]
    gemms = [x for x in expanded(assemble(NESTED)) if isinstance(x, Gemm)]
    assert [(g.acc, g.inp, g.wgt, g.reset) for g in gemms] == [
        (4 * h, 4 * h + 8 * kk, 4 * kk, kk == 0) for h in range(2) for kk in range(4)]


def test_loop_program_computes_the_product_exactly():
    a, b, dram = nested_inputs()
    result = simulate(assemble(NESTED), small_machine(), dram)
    np.testing.assert_array_equal(read_c(result.dram), a.astype(np.int32) @ b.astype(np.int32))
    assert result.instructions == {"load": 9, "nop": 2, "gemm": 8, "store": 1, "finish": 1}


def _same_run(looped, straight) -> None:
    """The two runs agree on everything the simulator reports."""
    assert looped.cycles == straight.cycles
    assert looped.units == straight.units
    assert looped.bytes == straight.bytes and looped.dram_wait == straight.dram_wait
    assert looped.instructions == straight.instructions
    np.testing.assert_array_equal(looped.dram, straight.dram)
    # Instructions are numbered in execution order, so the records agree one to one.
    assert list(looped.records) == list(straight.records)


@pytest.mark.parametrize("functional", [True, False])
def test_a_loop_takes_the_cycles_of_the_code_it_stands_for(functional):
    # The fetch unit expands loop and step words as it fetches, at no cost of their own, and
    # hands each iteration's instructions to the queues fetch_cycles apart, exactly as the
    # straight-line program would: same timing, same checks.
    _, _, dram = nested_inputs()
    program = assemble(NESTED)
    _same_run(simulate(program, small_machine(), dram, functional=functional),
              simulate(expanded(program), small_machine(), dram, functional=functional))


def test_folded_gemm_is_the_hand_scheduled_gemm():
    gemm = gemm_program(8, 4, 40, small_machine(), tiles=(8, 1))
    folded = assemble(FOLDED_GEMM)
    assert expanded(folded) == list(gemm.program)
    assert len(folded) < len(gemm.program)
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (8, 40), dtype=np.int8)
    b = rng.integers(-128, 128, (40, 4), dtype=np.int8)
    looped = simulate(folded, small_machine(), gemm.dram(a, b))
    _same_run(looped, simulate(gemm.program, small_machine(), gemm.dram(a, b)))
    np.testing.assert_array_equal(gemm.output(looped.dram),
                                  a.astype(np.int32) @ b.astype(np.int32))


def test_trace_has_one_slice_per_iteration_with_its_iteration(tmp_path):
    _, _, dram = nested_inputs()
    result = simulate(assemble(NESTED), small_machine(), dram)
    result.write_trace(tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    inner = [e for e in events if e["ph"] == "X" and e["args"]["index"] == 11]
    assert [e["args"]["iteration"] for e in inner] == [[h, j] for h in range(2) for j in range(3)]
    assert inner[4]["args"]["insn"] == "gemm acc[4], inp[20], wgt[8], rows=4, k=4"
    # Instructions outside loops carry no iteration.
    store = [e for e in events if e["ph"] == "X" and e["cat"] == "store"]
    assert len(store) == 1 and "iteration" not in store[0]["args"]


def fault_of(text: str, functional: bool = True) -> SimulatorFault:
    with pytest.raises(SimulatorFault) as info:
        simulate(assemble(text), small_machine(), np.zeros(4096, np.uint8),
                 functional=functional)
    return info.value


def test_read_of_unwritten_rows_faults_at_its_iteration():
    # B loads only 12 rows: the fourth K-slice's weights (rows 12..15) were never written.
    err = fault_of(NESTED.replace("rows=16, cols=4, stride=4", "rows=12, cols=4, stride=4"))
    assert err.message.endswith("on loop iteration (0, 2): reads wgt rows 12..15, which no "
                                "completed instruction wrote")
    assert (err.index, err.unit) == (11, "gemm")


@pytest.mark.parametrize(("step", "fragment", "iteration"), [
    ("step sram=16", "writes inp rows 64..79, past the end of inp (64 rows)", 4),
    ("step sram=12", "writes inp rows 24..39, across the bank boundary at row 32", 2),
    ("step dram=1024", "reads DRAM bytes 0x1000..0x103f, past the end of DRAM", 4),
])
def test_address_faults_name_the_iteration(step, fragment, iteration):
    for functional in (True, False):
        err = fault_of(f"""
        loop count=6, body=2
          load inp[0], dram[0x0], rows=16, cols=4, stride=4
            {step}
        finish
        """, functional)
        assert f"on loop iteration ({iteration},): {fragment}" in err.message
        assert (err.index, err.unit) == (1, "load")


def test_a_missing_token_faults_at_the_iteration_that_races():
    # Each iteration loads new inputs and multiplies them; the load of the next iteration
    # does not wait for the GEMM of this one (it pops nothing), so it overwrites the inputs
    # before the GEMM of iteration 0 reads them: that read races.
    err = fault_of("""
    load wgt[0], dram[0x0], rows=4, cols=4, stride=4
    loop count=3, body=2
      load inp[0], dram[0x0], rows=4, cols=4, stride=4 | push_next
      gemm acc[0], inp[0], wgt[0], rows=4, k=4, reset | pop_prev
    finish
    """)
    assert err.message.endswith(
        "on loop iteration (0,): reads inp rows 0..3 while instruction 2 (load, loop "
        "iteration (1,)) may still write row 0: no dependency token orders the two")
    assert (err.index, err.unit) == (3, "gemm")
    # With the token, every iteration is ordered.
    ok = simulate(assemble("""
    load wgt[0], dram[0x0], rows=4, cols=4, stride=4
    nop.compute | push_prev
    loop count=3, body=2
      load inp[0], dram[0x0], rows=4, cols=4, stride=4 | pop_next, push_next
      gemm acc[0], inp[0], wgt[0], rows=4, k=4, reset | pop_prev, push_prev
    nop.load | pop_next
    finish
    """), small_machine(), np.zeros(4096, np.uint8))
    assert ok.instructions["gemm"] == 3


def test_a_pop_without_enough_pushes_deadlocks_inside_the_loop():
    err = fault_of("""
    load inp[0], dram[0x0], rows=4, cols=4, stride=4 | push_next
    loop count=2, body=1
      nop.compute | pop_prev
    finish
    """)
    assert "compute (instruction 2) waits to pop from load->compute (1 pushed, 1 popped)" in (
        err.message)
    assert (err.index, err.unit) == (2, "compute")


LOAD = "load inp[0], dram[0], rows=1, cols=1, stride=1"


@pytest.mark.parametrize(("text", "fragment", "index"), [
    ("loop count=2, body=3\nnop.load\nfinish",
     "loop body of 3 words runs past the end of the program", 0),
    ("loop count=2, body=2\nloop count=2, body=2\nnop.load\nnop.load\nfinish",
     "runs past the end of the loop at word 0", 1),
    ("step d0=1\nfinish", "a step must follow the instruction it advances", 0),
    ("loop count=2, body=2\nnop.load\nstep d0=1\nfinish", "a step cannot follow nop", 2),
    (f"loop count=2, body=2\n{LOAD}\nstep loop=1, sram=1\nfinish",
     "step of loop level 1 requires 2 loops around it, got 1", 2),
    (f"loop count=2, body=3\n{LOAD}\nstep sram=1\nstep dram=1\nfinish",
     "a second step of the instruction at word 1 for loop level 0", 3),
    (f"loop count=2, body=2\n{LOAD}\nstep d2=1\nfinish",
     "load has 2 address fields (sram, dram), so a step of it gives at most 2", 2),
    ("loop count=2, body=2\nvec.relu acc[0], rows=1\nstep d1=1\nfinish",
     "a step of a vec with an immediate operand cannot advance src", 2),
    (f"loop count=3, body=2\n{LOAD.replace('inp[0]', 'inp[4]')}\nstep sram=-3\nfinish",
     "load sram is -2 on loop iteration (2,), outside 0..65535", 1),
    ("loop count=1, body=1\nfinish", "FINISH inside a loop", 1),
    ("".join(f"loop count=1, body={9 - d}\n" for d in range(9)) + "nop.load\nfinish",
     "loops nest at most 8 deep", 8),
])
def test_malformed_loop_structure_faults_at_fetch(text, fragment, index):
    for functional in (True, False):
        err = fault_of(text, functional)
        assert fragment in err.message
        assert (err.index, err.unit) == (index, "fetch")


@pytest.mark.parametrize(("text", "fragment"), [
    ("loop count=0, body=1", "loop requires 1 <= count <= 4294967295, got 0"),
    ("loop count=2, body=1 | pop_next", "loop runs in no queue, so it takes no dependency"),
    ("nop.load\nstep d0=0", "step requires a nonzero delta"),
    ("nop.load\nstep sram=1", "a step names the address fields of the instruction before it"),
])
def test_malformed_loop_words_fault_in_the_assembler(text, fragment):
    with pytest.raises(SimulatorFault) as info:
        assemble(text, file="prog.s")
    assert fragment in info.value.message
    assert info.value.unit == "assembler"


def test_executed_counts_and_records_cover_every_iteration():
    _, _, dram = nested_inputs()
    result = simulate(assemble(NESTED), small_machine(), dram)
    per_unit = Counter(unit for unit, *_ in result.records)
    # load: 9 requests (and 10 transfers with the store on the dram port); gemm: 8.
    assert (per_unit[0], per_unit[1], per_unit[3], per_unit[4]) == (9, 8, 1, 10)
    assert result.units["gemm"].instructions == 8
