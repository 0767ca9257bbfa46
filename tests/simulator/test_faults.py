"""Every fault: its type, a message fragment, the faulting instruction and unit."""

from __future__ import annotations

import numpy as np
import pytest

from ir.errors import SimulatorFault
from simulator import Finish, Gemm, assemble, encode, simulate
from tests.simulator.helpers import small_machine

DRAM = np.zeros(4096, np.uint8)


def fault_of(text: str, functional: bool = True, **changes) -> SimulatorFault:
    with pytest.raises(SimulatorFault) as info:
        simulate(assemble(text), small_machine(**changes), DRAM, functional=functional)
    return info.value


def test_read_of_unwritten_rows():
    err = fault_of("""
    load inp[0], dram[0x0], rows=4, cols=4, stride=4 | push_next
    gemm acc[0], inp[0], wgt[8], rows=4, k=4, reset | pop_prev
    finish
    """)
    assert "reads wgt rows 8..11, which no completed instruction wrote" in err.message
    assert (err.index, err.unit) == (1, "gemm")


def test_accumulating_onto_unwritten_accumulator_rows():
    err = fault_of("""
    load inp[0], dram[0x0], rows=4, cols=4, stride=4
    load wgt[0], dram[0x0], rows=4, cols=4, stride=4 | push_next
    gemm acc[4], inp[0], wgt[0], rows=2, k=4, reset | pop_prev
    gemm acc[2], inp[0], wgt[0], rows=4, k=4
    finish
    """)
    assert "reads acc rows 2..3, which no completed instruction wrote" in err.message
    assert (err.index, err.unit) == (3, "gemm")


def test_read_after_write_without_a_token():
    err = fault_of("""
    load acc[0], dram[0x0], rows=1, cols=4, stride=16
    vec.relu acc[0], rows=1
    finish
    """)
    # The load's data is still on its way (it lands at 101) when the relu reads it at 1.
    assert "reads acc row 0 while instruction 0 (load) may still write row 0: no dependency " \
        "token orders the two" in err.message
    assert (err.index, err.unit) == (1, "vector")


def test_write_after_read_without_a_token():
    err = fault_of("""
    load wgt[0], dram[0x0], rows=4, cols=4, stride=4
    load inp[0], dram[0x0], rows=4, cols=4, stride=4 | push_next
    gemm acc[0], inp[0], wgt[0], rows=4, k=4, reset | pop_prev
    load acc[32], dram[0x0], rows=16, cols=4, stride=16
    load inp[0], dram[0x0], rows=4, cols=4, stride=4
    finish
    """)
    # The gemm reads inp[0..3] at 202; the second inp load overwrites them at 318 without
    # popping a token from compute.
    assert "writes inp rows 0..3 while instruction 2 (compute) may still read row 0" in (
        err.message)
    assert (err.index, err.unit) == (4, "load")


def test_tokens_order_the_same_accesses():
    # The previous program with the token the second load needs runs cleanly.
    result = simulate(assemble("""
    load wgt[0], dram[0x0], rows=4, cols=4, stride=4
    load inp[0], dram[0x0], rows=4, cols=4, stride=4 | push_next
    gemm acc[0], inp[0], wgt[0], rows=4, k=4, reset | pop_prev, push_prev
    load acc[32], dram[0x0], rows=16, cols=4, stride=16
    load inp[0], dram[0x0], rows=4, cols=4, stride=4 | pop_next
    finish
    """), small_machine(), DRAM)
    assert result.cycles > 0


@pytest.mark.parametrize(("line", "fragment", "unit"), [
    ("load inp[60], dram[0x0], rows=8, cols=4, stride=4",
     "writes inp rows 60..67, past the end of inp (64 rows)", "load"),
    ("load inp[30], dram[0x0], rows=4, cols=4, stride=4",
     "writes inp rows 30..33, across the bank boundary at row 32 (inp has 2 banks of 32 rows)",
     "load"),
    ("load inp[0], dram[0xff8], rows=2, cols=4, stride=8",
     "reads DRAM bytes 0xff8..0x1003, past the end of DRAM (0x1000 bytes)", "load"),
    ("load wgt[0], dram[0x0], rows=2, cols=5, stride=8",
     "load of 5 columns into wgt, whose rows hold 4", "load"),
    ("gemm acc[0], inp[0], wgt[0], rows=4, k=8, reset",
     "gemm with k = 8 requires k <= the array's 4 rows", "gemm"),
    ("gemm acc[62], inp[0], wgt[0], rows=4, k=4, reset",
     "writes acc rows 62..65, past the end of acc (64 rows)", "gemm"),
    ("vec.add acc[0], acc[63], rows=2", "reads acc rows 63..64, past the end", "vector"),
    ("store dram[0x0], acc[0], rows=2, cols=4, stride=8",
     "store rows of 16 bytes overlap in DRAM: stride 8 < 16", "store"),
    ("store dram[0xff0], acc[0], rows=2, cols=4, stride=16",
     "writes DRAM bytes 0xff0..0x100f, past the end of DRAM", "store"),
])
def test_addresses_out_of_range(line: str, fragment: str, unit: str):
    # Address checks hold in timing-only runs too.
    for functional in (True, False):
        err = fault_of(f"nop.load\n{line}\nfinish", functional)
        assert fragment in err.message
        assert (err.index, err.unit) == (1, unit)


def test_pop_that_nothing_pushes_deadlocks():
    err = fault_of("""
    load inp[0], dram[0x0], rows=4, cols=4, stride=4
    gemm acc[0], inp[0], wgt[0], rows=4, k=4, reset | pop_prev
    finish
    """)
    assert "deadlock: no queue can proceed" in err.message
    assert "compute (instruction 1) waits to pop from load->compute (0 pushed, 0 popped)" in (
        err.message)
    assert "load has finished" in err.message
    assert (err.index, err.unit) == (1, "gemm")


def test_queues_waiting_on_each_other_deadlock():
    err = fault_of("""
    nop.load | pop_next, push_next
    nop.compute | pop_prev, push_prev
    finish
    """)
    assert "load (instruction 0) waits to pop from compute->load" in err.message
    assert "compute (instruction 1) waits to pop from load->compute" in err.message
    assert (err.index, err.unit) == (0, "load")


def test_malformed_words_fault_at_decode():
    good = encode([Gemm(0, 0, 0, 4, 4, reset=True), Finish()])
    for word, fragment in [
        (0, "unknown opcode 0"),
        (15, "unknown opcode 15"),
        (1 | 3 << 8, "load requires mem in (inp=0, wgt=1, acc=2), got 3"),
        (1 << 127 | 3 | 4 << 57 | 4 << 73, "gemm has reserved bits 89-127 set"),
        (1 | 1 << 4 | 1 << 26 | 1 << 42,
         "load runs in the load queue, which has no previous queue"),
        (3, "gemm requires 1 <= rows <= 65535, got 0"),
    ]:
        program = good[:16] + word.to_bytes(16, "little") + good[16:]
        with pytest.raises(SimulatorFault) as info:
            simulate(program, small_machine(), DRAM)
        assert fragment in info.value.message
        assert (info.value.index, info.value.unit) == (1, "decode")


def test_program_must_end_with_its_only_finish():
    for text, index in [("nop.load", 0), ("finish\nnop.load", 1), ("finish\nfinish", 0)]:
        err = fault_of(text)
        assert "FINISH" in err.message
        assert (err.index, err.unit) == (index, "fetch")


def test_full_instruction_queue_deadlocks_fetch():
    # With one slot per queue, the second compute instruction cannot be fetched until the
    # first leaves, which waits for a token from a load that is fetched after it.
    err = fault_of("""
    nop.compute | pop_prev
    nop.compute
    nop.load | push_next
    finish
    """, queues__instruction_depth=1)
    assert "load waits for instruction 2 to be dispatched (instruction 1's queue is full)" in (
        err.message)
    assert (err.index, err.unit) == (0, "compute")


def test_full_token_queue_deadlocks_its_pusher():
    err = fault_of("""
    nop.load | push_next
    nop.load | push_next
    nop.compute | pop_next
    nop.compute | pop_prev
    finish
    """, queues__token_depth=1)
    assert "load waits for room to push into load->compute (full: token_depth 1)" in err.message
    assert "compute (instruction 2) waits to pop from store->compute" in err.message
    assert (err.index, err.unit) == (2, "compute")
