"""GEMM values computed in groups (simulator/products.py) are those of each GEMM computed as
it comes: random sequences of GEMMs (some extending a group, some not: another input tile,
shape, reset, a weight stride too small or running past the memory) and of writes to random
rows of the three memories (each announced with ``before_write``, as a LOAD does), against
``datapath.gemm`` applied one by one; and a program the engine runs gives the same figures
and DRAM image with groups of up to eight and of one."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import datapath, engine, gemm_program, load_machine, simulate
from simulator.products import Products

ROWS, R, C = 64, 4, 4  # rows of each memory, the array's rows (inp width) and columns


def _memories(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """acc (int32, near the limits, so additions wrap), inp and wgt (int8 values as
    float32), as the engine keeps them."""
    acc = rng.integers(-(1 << 31), 1 << 31, (ROWS, C), dtype=np.int64).astype(np.int32)
    inp = rng.integers(-128, 128, (ROWS, R)).astype(np.float32)
    wgt = rng.integers(-128, 128, (ROWS, C)).astype(np.float32)
    return acc, inp, wgt


@st.composite
def _steps(draw: st.DrawFn) -> list[tuple]:
    """GEMMs, often in runs that extend a group, and writes of random rows."""
    steps: list[tuple] = []
    for _ in range(draw(st.integers(1, 30))):
        if draw(st.booleans()):
            which = draw(st.sampled_from(["acc", "inp", "wgt"]))
            lo = draw(st.integers(0, ROWS - 1))
            steps.append(("write", which, lo, draw(st.integers(lo + 1, ROWS))))
            continue
        rows, k = draw(st.integers(1, 8)), draw(st.integers(1, R))
        inp_row = draw(st.integers(0, ROWS - rows))
        acc_row, wgt_row = draw(st.integers(0, ROWS - rows)), draw(st.integers(0, ROWS - k))
        stride, reset = draw(st.integers(-2, 2 * k)), draw(st.booleans())
        for j in range(draw(st.integers(1, 5))):
            acc_j, wgt_j = acc_row + j * rows, wgt_row + j * stride
            if acc_j + rows > ROWS or not 0 <= wgt_j <= ROWS - k:
                break
            steps.append(("gemm", acc_j, inp_row, wgt_j, rows, k, reset))
    return steps


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=_steps(), limit=st.integers(1, 8))
def test_grouped_products_equal_one_gemm_at_a_time(seed, steps, limit):
    rng = np.random.default_rng(seed)
    acc, inp, wgt = _memories(rng)
    want = {"acc": acc.copy(), "inp": inp.copy(), "wgt": wgt.copy()}
    got = {"acc": acc, "inp": inp, "wgt": wgt}
    products = Products(datapath.TileProduct(), acc, inp, wgt, limit)
    for step in steps:
        if step[0] == "write":
            _, which, lo, hi = step
            values = rng.integers(-128, 128, (hi - lo, got[which].shape[1]))
            products.before_write(got[which], lo, hi)
            got[which][lo:hi] = values
            want[which][lo:hi] = values
            continue
        _, acc_row, inp_row, wgt_row, rows, k, reset = step
        products.add(acc_row, inp_row, wgt_row, rows, k, reset)
        datapath.gemm(want["acc"][acc_row:acc_row + rows], want["inp"][inp_row:inp_row + rows, :k],
                      want["wgt"][wgt_row:wgt_row + k], reset)
    products.flush()
    for name in ("acc", "inp", "wgt"):
        assert np.array_equal(got[name], want[name]), name


def test_a_tiled_program_runs_the_same_with_groups_and_without(monkeypatch):
    config = load_machine()
    program = gemm_program(96, 64, 80, config)
    rng = np.random.default_rng(11)
    a = rng.integers(-128, 128, (96, 80)).astype(np.int8)
    b = rng.integers(-128, 128, (80, 64)).astype(np.int8)
    image = program.dram(a, b)
    sizes: list[int] = []
    flush = Products.flush

    def counting(self):
        sizes.append(self.count)
        flush(self)

    monkeypatch.setattr(Products, "flush", counting)
    grouped = simulate(program.program, config, image)
    assert max(sizes) > 1
    monkeypatch.setattr(engine, "_GROUP", 1)
    single = simulate(program.program, config, image)
    assert grouped.dram.tobytes() == single.dram.tobytes()
    assert list(grouped.records) == list(single.records)
    assert grouped.cycles == single.cycles and grouped.bytes == single.bytes
    want = a.astype(np.int64) @ b.astype(np.int64)
    assert np.array_equal(program.output(grouped.dram), want.astype(np.int32))
