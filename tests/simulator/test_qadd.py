"""The residual add on chip: the widening load (int8 DRAM -> int32 accumulator) and vec.qadd,
onnxruntime's QLinearAdd on the vector unit's float32 stage, bit-exact.

vec.qadd is checked against the host QLinearAdd of the ONNX path (``ir.onnx.host_ops.
qlinear_add``) and against onnxruntime's own QLinearAdd (com.microsoft domain) on every int8
pair, under scales whose sums fall on ties and scales that saturate; then its encoding,
assembly, faults and timing, and the load's.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ir.errors import SimulatorFault
from ir.onnx.host_ops import qlinear_add
from ir.onnx.kernels import qadd_parameters
from ir.onnx.quant import QParams
from simulator import (
    Deps,
    Finish,
    Load,
    MachineConfig,
    Mem,
    Nop,
    QAdd,
    Queue,
    Store,
    assemble,
    decode,
    disassemble,
    encode,
    simulate,
)
from simulator.isa import encode_word
from tests.simulator.helpers import SMALL, dram_with, small_machine

PUSH = Deps(push_next=True)
GRID = np.arange(-128, 128, dtype=np.int8)

# (scale, zero point) of a, b and the output y.
SCALE_SETS = [
    # ResNet-50's layer2.2.add: ties decide elements (a = 12, b = -101 gives 33.49999).
    ((0.014800040982663631, 3), (0.014941577799618244, -128), (0.016018599271774292, -128)),
    # Ratios of one half: every odd sum is an exact tie, rounded to even.
    ((0.025, 0), (0.025, 0), (0.05, 0)),
    # A small output scale: most sums saturate at both ends.
    ((0.4, -7), (0.3, 11), (0.01, 4)),
]


def _qadd_on_chip(config: MachineConfig, a: np.ndarray, b: np.ndarray, params: np.ndarray,
                  lo: int, hi: int) -> np.ndarray:
    """Load ``a`` (rows x C, int8 values) as int32, ``b`` (int8) widened and the three
    parameter rows; add on the simulator; store int8."""
    rows, cols = a.shape
    a_at, b_at = 0, a.size * 4
    par_at = b_at + b.size
    out_at = par_at + params.nbytes
    dram = dram_with(out_at + a.size, a=(a_at, a.astype(np.int32)), b=(b_at, b),
                     par=(par_at, params))
    program = [Load(Mem.ACC, 0, a_at, rows, cols, cols * 4),
               Load(Mem.ACC, rows, b_at, rows, cols, cols, widen=True),
               Load(Mem.ACC, 2 * rows, par_at, 3, cols, cols * 4, PUSH),
               QAdd(0, rows, 2 * rows, rows, lo, hi, Deps(pop_prev=True, push_next=True)),
               Store(0, out_at, rows, cols, cols, narrow=True, deps=Deps(pop_prev=True)),
               Finish()]
    result = simulate(program, config, dram)
    return result.dram[out_at:out_at + a.size].view(np.int8).reshape(rows, cols)


def _onnxruntime_add(a: np.ndarray, b: np.ndarray, scales) -> np.ndarray:
    """onnxruntime's QLinearAdd (com.microsoft) of the int8 vectors a and b."""
    names = ("sa", "za", "sb", "zb", "sy", "zy")
    values = [v for pair in scales for v in pair]
    inits = [numpy_helper.from_array(np.array(v, np.float32 if n[0] == "s" else np.int8), n)
             for n, v in zip(names, values)]
    node = helper.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"],
                            ["c"], domain="com.microsoft")
    graph = helper.make_graph([node], "add",
                              [helper.make_tensor_value_info(n, TensorProto.INT8, [a.size])
                               for n in ("a", "b")],
                              [helper.make_tensor_value_info("c", TensorProto.INT8, [a.size])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"a": a, "b": b})[0]


@pytest.mark.parametrize("scales", SCALE_SETS)
def test_qadd_is_onnxruntimes_qlinear_add_on_every_int8_pair(npu, scales):
    a_q, b_q, y_q = scales
    xa, xb = (v.reshape(-1) for v in np.meshgrid(GRID, GRID))
    cols = npu.array.cols
    params = qadd_parameters(a_q[0], a_q[1], b_q[0], b_q[1], y_q[0], y_q[1], cols)
    rows = 512  # a, b and the parameter rows fit one bank of the built-in machine
    got = np.concatenate([
        _qadd_on_chip(npu, xa[s:s + rows * cols].reshape(rows, cols),
                      xb[s:s + rows * cols].reshape(rows, cols), params, -128, 127).reshape(-1)
        for s in range(0, xa.size, rows * cols)])
    host = qlinear_add(*[QParams(np.float32(s), np.array(z, np.int8)) for s, z in scales])
    np.testing.assert_array_equal(got, host([xa, xb]))
    np.testing.assert_array_equal(got, _onnxruntime_add(xa, xb, scales))
    # The cases the scale set is there for occur: sums at or within 1e-4 of a tie, or
    # mostly saturated ones.
    exact = (xa.astype(np.float64) - a_q[1]) * a_q[0] / y_q[0] \
        + (xb.astype(np.float64) - b_q[1]) * b_q[0] / y_q[0] + y_q[1]
    assert (np.abs(exact % 1 - 0.5) < 1e-4).any() or (np.abs(exact) > 127.5).mean() > 0.5


def test_qadd_clips_to_its_bounds_and_ties_round_to_even(npu):
    # ratio 1/2 each, offset 0: a + b odd is a tie. (3 + 2) / 2 = 2.5 -> 2, (3 + 4) / 2 = 3.5
    # -> 4, (-3 - 2) / 2 = -2.5 -> -2; the ReLU bound lo = 0 takes -2 to 0, hi = 100 clips.
    params = np.repeat(np.array([[0.5], [0.5], [0.0]], np.float32), 16, axis=1)
    a = np.zeros((1, 16), np.int8)
    b = np.zeros((1, 16), np.int8)
    a[0, :5], b[0, :5] = (3, 3, -3, 127, -3), (2, 4, -2, 127, -2)
    got = _qadd_on_chip(npu, a, b, params, 0, 100)[0, :5]
    np.testing.assert_array_equal(got, [2, 4, 0, 100, 0])
    np.testing.assert_array_equal(_qadd_on_chip(npu, a, b, params, -128, 127)[0, :5],
                                  [2, 4, -2, 127, -2])


def test_a_widening_load_sign_extends_and_moves_int8_bytes(small):
    tile = np.array([[-128, 127, -1, 0], [1, -2, 64, -65], [5, 6, 7, 8]], np.int8)
    dram = dram_with(256, tile=(0, np.pad(tile, ((0, 0), (0, 4)))))  # rows 8 bytes apart
    program = [Load(Mem.ACC, 0, 0, 3, 4, 8, PUSH, widen=True),
               Nop(Queue.COMPUTE, Deps(pop_prev=True, push_next=True)),
               Store(0, 64, 3, 4, 16, deps=Deps(pop_prev=True)), Finish()]
    result = simulate(program, small, dram)
    np.testing.assert_array_equal(result.dram[64:112].view(np.int32).reshape(3, 4), tile)
    assert result.bytes["dram.read"] == 12  # int8 in DRAM, whatever the acc holds
    assert result.bytes["acc.write"] == 3 * 4 * 4
    # SMALL: latency 100, 16 bytes per cycle: 12 bytes arrive by 101, the store's 48 by
    # 101 + 100 + 3.
    assert result.units["load"].busy == 101
    assert result.cycles == 204


def test_a_load_counts_the_on_chip_bytes_it_writes(small):
    # int8 rows in inp and wgt (whatever dtype the simulator holds them in), int32 in acc.
    dram = np.zeros(256, np.uint8)
    program = [Load(Mem.INP, 0, 0, 3, small.array.rows, 16),
               Load(Mem.WGT, 0, 0, 2, small.array.cols, 16),
               Load(Mem.ACC, 0, 0, 2, 4, 16, widen=True), Finish()]
    result = simulate(program, small, dram)
    assert result.bytes["inp.write"] == 3 * small.array.rows
    assert result.bytes["wgt.write"] == 2 * small.array.cols
    assert result.bytes["acc.write"] == 2 * small.array.cols * 4


def test_qadd_takes_the_requant_stage_cycles(small):
    # A 2-lane, 5-stage stage: 2 rows of 4 columns are taken in 2 * ceil(4 / 2) = 4 cycles,
    # done 5 stages later.
    config = small_machine(requant={"lanes": 2, "latency": 5})
    dram = np.zeros(256, np.uint8)
    program = [Load(Mem.ACC, 0, 0, 7, 4, 16, PUSH),
               QAdd(0, 2, 4, 2, 0, 0, Deps(pop_prev=True)), Finish()]
    result = simulate(program, config, dram)
    assert result.units["vector"].busy == 4 + 5
    assert result.bytes["acc.read"] == (2 * 2 + 3) * 16


def test_qadd_requires_the_requant_stage(small):
    program = [Load(Mem.ACC, 0, 0, 7, 4, 16, PUSH),
               QAdd(0, 2, 4, 2, -128, 127, Deps(pop_prev=True)), Finish()]
    with pytest.raises(SimulatorFault, match="vec.qadd requires a machine with a "
                       "requantisation stage") as err:
        simulate(program, small, np.zeros(256, np.uint8))
    assert err.value.unit == "vector"


def test_qadd_reads_only_written_rows():
    config = small_machine(requant={"lanes": 4, "latency": 1})
    program = [Load(Mem.ACC, 0, 0, 4, 4, 16, PUSH),  # the parameter rows 4..6 stay unwritten
               QAdd(0, 2, 4, 2, -128, 127, Deps(pop_prev=True)), Finish()]
    with pytest.raises(SimulatorFault, match="reads acc rows 4..6, which no completed "
                       "instruction wrote"):
        simulate(program, config, np.zeros(256, np.uint8))


def test_the_words_round_trip_and_loads_without_widen_keep_their_encoding():
    plain = Load(Mem.ACC, 3, 0x40, 16, 16, 64)
    widened = Load(Mem.ACC, 3, 0x40, 16, 16, 16, widen=True)
    add = QAdd(0, 256, 512, 16, -3, 127, Deps(pop_prev=True, push_next=True))
    assert encode_word(plain) >> 122 == 0  # the widen bit, above every older field
    assert encode_word(widened) >> 122 == 1
    program = (plain, widened, add, Finish())
    assert decode(encode(program)) == program
    text = disassemble(program)
    assert "load acc[3], dram[0x40], rows=16, cols=16, stride=16, int8\n" in text
    assert ("vec.qadd acc[0], acc[256], acc[512], rows=16, lo=-3, hi=127 | pop_prev, "
            "push_next\n") in text
    assert assemble(text) == program


@pytest.mark.parametrize("build, message", [
    (lambda: Load(Mem.INP, 0, 0, 1, 16, 16, widen=True),
     "load with widen requires mem acc (int8 widened to int32), got inp"),
    (lambda: Load(Mem.ACC, 0, 0, 1, 16, 16, widen=1), "load requires widen true or false"),
    (lambda: QAdd(0, 16, 32, 16, 5, 4), "vec.qadd requires lo <= hi, got lo=5 hi=4"),
    (lambda: QAdd(0, 16, 32, 16, -4097, 0), "vec.qadd requires -4096 <= lo <= 4095"),
    (lambda: QAdd(0, 16, 32, 0, 0, 0), "vec.qadd requires 1 <= rows <= 65535"),
])
def test_malformed_instructions_fault(build, message):
    with pytest.raises(SimulatorFault, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()


def test_the_assembler_names_the_line_of_a_bad_widening_load():
    with pytest.raises(SimulatorFault) as err:
        assemble("finish\nload inp[0], dram[0x0], rows=1, cols=16, stride=16, int8\n",
                 "prog.s")
    assert err.value.loc.line == 2
    assert "load with widen requires mem acc" in err.value.message


def test_the_machine_without_requant_section_is_still_valid():
    assert MachineConfig.from_dict(SMALL).requant is None
