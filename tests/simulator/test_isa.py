"""The ISA's three forms agree: instruction values, assembly text and 128-bit words."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ir.errors import SimulatorFault
from simulator import (
    Deps,
    Finish,
    Gemm,
    Load,
    Mem,
    Nop,
    Operand,
    Queue,
    Store,
    Vec,
    VecOp,
    assemble,
    decode,
    disassemble,
    encode,
)
from simulator.isa import decode_word, encode_word

ADDR = st.integers(0, 2 ** 16 - 1)
COUNT = st.integers(1, 2 ** 16 - 1)
U32 = st.integers(0, 2 ** 32 - 1)
I32 = st.integers(-(2 ** 31), 2 ** 31 - 1)


def deps(queue: Queue) -> st.SearchStrategy[Deps]:
    """Flags a queue may carry: load has no previous queue, store no next one."""
    prev = st.booleans() if queue is not Queue.LOAD else st.just(False)
    nxt = st.booleans() if queue is not Queue.STORE else st.just(False)
    return st.builds(Deps, prev, nxt, prev, nxt)


COMPUTE = deps(Queue.COMPUTE)
BINARY = st.sampled_from([VecOp.ADD, VecOp.MIN, VecOp.MAX])
INSTRUCTIONS = st.one_of(
    st.builds(Load, st.sampled_from(Mem), ADDR, U32, COUNT, COUNT, U32, deps(Queue.LOAD)),
    st.builds(Store, ADDR, U32, COUNT, COUNT, U32, st.booleans(), deps(Queue.STORE)),
    st.builds(Gemm, ADDR, ADDR, ADDR, COUNT, COUNT, st.booleans(), COMPUTE),
    st.builds(Vec, BINARY, ADDR, COUNT, ADDR, st.sampled_from([Operand.TILE, Operand.ROW]),
              deps=COMPUTE),
    st.builds(Vec, BINARY, ADDR, COUNT, imm=I32, deps=COMPUTE),
    st.builds(Vec, st.just(VecOp.MULSHIFT), ADDR, COUNT, imm=I32, imm2=st.integers(0, 62),
              deps=COMPUTE),
    st.tuples(ADDR, COUNT, I32, I32, COMPUTE).map(
        lambda t: Vec(VecOp.CLIP, t[0], t[1], imm=min(t[2:4]), imm2=max(t[2:4]), deps=t[4])),
    st.builds(Vec, st.just(VecOp.RELU), ADDR, COUNT, deps=COMPUTE),
    st.sampled_from(Queue).flatmap(lambda q: st.builds(Nop, st.just(q), deps(q))),
    st.builds(Finish, COMPUTE),
)


@given(st.lists(INSTRUCTIONS, max_size=20))
def test_assembly_round_trip(program):
    text = disassemble(program)
    assert assemble(text) == tuple(program)
    assert disassemble(assemble(text)) == text


@given(st.lists(INSTRUCTIONS, max_size=20))
def test_binary_round_trip(program):
    data = encode(program)
    assert len(data) == 16 * len(program)
    assert decode(data) == tuple(program)


@given(st.integers(0, 2 ** 128 - 1) | st.integers(0, 2 ** 100 - 1) | st.integers(0, 2 ** 20))
def test_every_word_decodes_canonically_or_faults(word):
    # A word is either the one encoding of an instruction, or malformed: never anything else.
    try:
        insn = decode_word(word, 7)
    except SimulatorFault as err:
        assert (err.index, err.unit) == (7, "decode")
    else:
        assert encode_word(insn) == word


def test_assembly_is_readable():
    program = (
        Load(Mem.INP, 0, 0x1000, 256, 16, 1024, Deps(pop_next=True, push_next=True)),
        Gemm(0, 0, 64, 256, 16, reset=True, deps=Deps(pop_prev=True)),
        Vec(VecOp.ADD, 0, 256, 512, Operand.ROW),
        Vec(VecOp.MULSHIFT, 0, 256, imm=1 << 30, imm2=38),
        Store(0, 0x4000, 256, 16, 1024, narrow=True, deps=Deps(push_prev=True)),
        Nop(Queue.STORE, Deps(pop_prev=True)),
        Finish(),
    )
    assert disassemble(program) == (
        "load inp[0], dram[0x1000], rows=256, cols=16, stride=1024 | pop_next, push_next\n"
        "gemm acc[0], inp[0], wgt[64], rows=256, k=16, reset | pop_prev\n"
        "vec.add acc[0], acc[512], rows=256, bcast\n"
        "vec.mulshift acc[0], rows=256, mult=1073741824, shift=38\n"
        "store dram[0x4000], acc[0], rows=256, cols=16, stride=1024, int8 | push_prev\n"
        "nop.store | pop_prev\n"
        "finish\n")


def test_assembly_accepts_comments_blank_lines_and_any_field_order():
    text = """
    # a comment line
    gemm acc[4], inp[0], wgt[8], k=3, reset, rows=2   # trailing comment

    vec.clip acc[0], hi=9, lo=-9, rows=1|pop_next
    """
    assert assemble(text) == (Gemm(4, 0, 8, 2, 3, reset=True),
                              Vec(VecOp.CLIP, 0, 1, imm=-9, imm2=9, deps=Deps(pop_next=True)))


@pytest.mark.parametrize(("text", "fragment", "col"), [
    ("gemm acc[0], inp[0], rows=3, k=2", "gemm requires a wgt[...] operand", 1),
    ("foo acc[0]", "unknown mnemonic 'foo'", 1),
    ("finish | pop_prev, pop_foo", "unknown dependency flag 'pop_foo'", 20),
    ("gemm acc[0], inp[0], wgt[0], rows=3, k=2, bogus", "gemm has no flag 'bogus'", 43),
    ("gemm acc[0], inp[0], wgt[0], rows=3, k=2, n=4", "gemm has no field 'n'", 43),
    ("gemm acc[0], wgt[0], inp[0], rows=3, k=2", "gemm requires inp[...] here, got wgt", 14),
    ("load inp[0], dram[zz], rows=1, cols=1, stride=1", "'zz' is not a number", 14),
    ("load inp[0], dram[0], rows=0, cols=1, stride=1", "load requires 1 <= rows <= 65535", 1),
    ("store dram[0], acc[0], rows=1, cols=1, stride=1 | pop_next",
     "store runs in the store queue, which has no next queue", 1),
    ("vec.clip acc[0], rows=1, lo=5, hi=4", "vec.clip requires lo <= hi", 1),
])
def test_assembly_errors_point_at_the_line(text, fragment, col):
    with pytest.raises(SimulatorFault) as info:
        assemble(f"finish\n\n{text}\n", file="prog.s")
    err = info.value
    assert fragment in err.message
    assert (err.index, err.unit) == (1, "assembler")
    assert (err.loc.file, err.loc.line, err.loc.col) == ("prog.s", 3, col)
    assert "simulator." not in err.message


def test_decode_rejects_a_partial_word():
    with pytest.raises(SimulatorFault, match="whole number of 16-byte words, got 20 bytes"):
        decode(bytes(20))
