"""The engine's own forms of what it runs per instruction: its words of a loop program come
in the order simulator.loops.walk gives the program's nodes, and a LOAD of int8 rows,
which takes DRAM through the engine's views of it as rows of one stride, moves the values
numpy reads at those addresses (strides equal to the row, longer, shorter, and rows that
end at DRAM's last byte)."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from simulator import assemble, engine, simulate
from simulator.loops import placed, structure, walk
from tests.simulator.helpers import small_machine

# DRAM: the stored product at 0, then the operands' bytes to the end, where many loads
# end at its last byte.
OUT, BASE, DRAM_BYTES = 0, 128, 288
MACHINE = small_machine()


@st.composite
def _loop_programs(draw: st.DrawFn) -> str:
    """Loops nested up to three deep, around and beside NOPs: bodies of instructions
    alone (listed once and repeated) and bodies with loops (walked)."""
    def body(depth: int) -> list[str]:
        lines: list[str] = []
        for _ in range(draw(st.integers(1, 3))):
            if depth < 3 and draw(st.booleans()):
                inner = body(depth + 1)
                lines.append(f"loop count={draw(st.integers(1, 3))}, body={len(inner)}")
                lines += inner
            else:
                lines.append("nop.compute")
        return lines
    return "\n".join(body(0) + ["finish"])


@settings(max_examples=60, deadline=None)
@given(_loop_programs())
def test_the_engines_words_come_in_walk_order(text):
    nodes = structure(assemble(text))
    words = {id(node): object() for node in placed(nodes)}
    want = [(words[id(node)], iteration) for node, iteration in walk(nodes)]
    assert list(engine._stream(nodes, words)) == want


def _load_gemm_store(inp: tuple[int, int, int], wgt: tuple[int, int, int], rows: int,
                     k: int) -> str:
    """LOAD the input rows and the weight rows (each: DRAM address, stride, and for the
    weights their columns), GEMM them, STORE the product at OUT."""
    inp_addr, inp_stride, _ = inp
    wgt_addr, wgt_stride, wgt_cols = wgt
    return f"""
    load inp[0], dram[{inp_addr}], rows={rows}, cols=4, stride={inp_stride}
    load wgt[0], dram[{wgt_addr}], rows={k}, cols={wgt_cols}, stride={wgt_stride} | push_next
    gemm acc[0], inp[0], wgt[0], rows={rows}, k={k}, reset | pop_prev, push_next
    store dram[{OUT}], acc[0], rows={rows}, cols=4, stride=16 | pop_prev
    finish
    """


def _rows(dram: np.ndarray, addr: int, rows: int, cols: int, stride: int) -> np.ndarray:
    """int8 rows of ``cols`` read from ``dram`` at ``addr``, ``stride`` bytes apart, one by
    one, zero-padded to 4 columns."""
    out = np.zeros((rows, 4), np.int64)
    for r in range(rows):
        start = addr + r * stride
        out[r, :cols] = dram[start:start + cols].view(np.int8)
    return out


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 8), k=st.integers(1, 4),
       inp_stride=st.integers(1, 24), wgt_stride=st.integers(1, 24),
       wgt_cols=st.integers(1, 4), inp_end=st.booleans(), wgt_end=st.booleans(),
       data=st.data())
def test_int8_loads_move_the_values_numpy_reads(seed, rows, k, inp_stride, wgt_stride,
                                                wgt_cols, inp_end, wgt_end, data):
    def address(count: int, cols: int, stride: int, at_end: bool) -> int:
        last = DRAM_BYTES - (count - 1) * stride - cols  # the rows end at DRAM's last byte
        assume(last >= BASE)  # the rows fit between BASE and the end
        return last if at_end else data.draw(st.integers(BASE, last), label="address")

    inp_addr = address(rows, 4, inp_stride, inp_end)
    wgt_addr = address(k, wgt_cols, wgt_stride, wgt_end)
    image = np.random.default_rng(seed).integers(0, 256, DRAM_BYTES, dtype=np.uint8)
    program = assemble(_load_gemm_store((inp_addr, inp_stride, 4),
                                        (wgt_addr, wgt_stride, wgt_cols), rows, k))
    result = simulate(program, MACHINE, image)
    a = _rows(image, inp_addr, rows, 4, inp_stride)[:, :k]
    b = _rows(image, wgt_addr, k, wgt_cols, wgt_stride)
    got = np.stack([result.dram[OUT + 16 * r:OUT + 16 * r + 16].view("<i4")
                    for r in range(rows)])
    assert np.array_equal(got, a @ b)
