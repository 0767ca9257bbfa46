"""vec.requant: the vector unit's float32 requantisation, bit-exact with onnxruntime.

Checked against the host epilogue of the ONNX path (``ir.onnx.quant.requantize``, itself exact
against onnxruntime), against onnxruntime's QLinearMatMul run end to end, and against values
worked out by hand (ties to even, saturation); its encoding, assembly, faults and timing.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from ir.errors import IntrinsicSpecError, SimulatorFault
from ir.onnx.quant import output_scale, requantize
from simulator import (
    Deps,
    Finish,
    Gemm,
    Load,
    Loop,
    MachineConfig,
    Mem,
    Requant,
    Step,
    Store,
    assemble,
    decode,
    disassemble,
    encode,
    simulate,
)
from simulator.datapath import float_bits
from tests.simulator.helpers import SMALL, dram_with, small_machine

PUSH = Deps(push_next=True)
POP = Deps(pop_prev=True)
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def _requant_on_chip(config: MachineConfig, acc: np.ndarray, scale: np.ndarray | float,
                     zp: int, lo: int, hi: int) -> np.ndarray:
    """Load ``acc`` (rows x C int32) into the accumulator, requantise it on the simulator
    (per channel when ``scale`` is an array: its row loaded beside the tile), store it as
    int32 and return it."""
    rows, cols = acc.shape
    per_channel = isinstance(scale, np.ndarray)
    scales = np.asarray(scale, np.float32).reshape(-1)
    out = acc.nbytes + scales.nbytes
    dram = dram_with(out + acc.nbytes, acc=(0, acc.astype(np.int32)),
                     scale=(acc.nbytes, scales))
    program = [Load(Mem.ACC, 0, 0, rows, cols, cols * 4, PUSH if not per_channel else Deps())]
    if per_channel:
        program.append(Load(Mem.ACC, rows, acc.nbytes, 1, cols, cols * 4, PUSH))
        program.append(Requant(0, rows, zp, lo, hi, src=rows, per_channel=True,
                               deps=Deps(pop_prev=True, push_next=True)))
    else:
        program.append(Requant(0, rows, zp, lo, hi, scale=float_bits(scale),
                               deps=Deps(pop_prev=True, push_next=True)))
    program += [Store(0, out, rows, cols, cols * 4, deps=Deps(push_prev=True, pop_prev=True)),
                Finish(Deps(pop_next=True))]
    result = simulate(program, config, dram)
    return result.dram[out:out + acc.nbytes].view(np.int32).reshape(rows, cols)


def _accumulators(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """int32 values of every size: small ones (where ties happen), large ones (where float32
    rounds the conversion) and both ends of the range."""
    small = rng.integers(-1000, 1001, (rows, cols))
    large = rng.integers(INT32_MIN, INT32_MAX, (rows, cols), endpoint=True)
    acc = np.where(rng.random((rows, cols)) < 0.5, small, large).astype(np.int32)
    acc.reshape(-1)[:2] = (INT32_MIN, INT32_MAX)
    return acc


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("seed", [0, 1])
def test_per_tensor_requant_equals_the_onnx_host_epilogue(npu, dtype, seed):
    rng = np.random.default_rng(seed)
    acc = _accumulators(rng, 32, 16)
    # A power of two makes every odd multiple of its inverse a tie; the other scale is any.
    for scale in (np.float32(0.5), np.float32(rng.uniform(1e-4, 0.05))):
        zp = dtype(rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, endpoint=True))
        lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
        got = _requant_on_chip(npu, acc, scale, int(zp), lo, hi)
        np.testing.assert_array_equal(got, requantize(acc, scale, zp).astype(np.int32))


@pytest.mark.parametrize("seed", [0, 1])
def test_per_channel_requant_equals_the_onnx_host_epilogue(npu, seed):
    rng = np.random.default_rng(seed)
    acc = _accumulators(rng, 32, 16)
    scales = rng.uniform(1e-4, 0.05, 16).astype(np.float32)
    scales[:4] = (0.5, 0.25, 2.0 ** -10, 1.0)  # ties, and a scale that saturates
    zp = np.int8(-7)
    got = _requant_on_chip(npu, acc, scales, int(zp), -128, 127)
    np.testing.assert_array_equal(got, requantize(acc, scales, zp).astype(np.int32))


def test_ties_round_to_even_and_the_result_saturates(npu):
    # Worked by hand: x * 0.5 = 0.5, 1.5, 2.5, -0.5, -1.5, -2.5 round to even (0, 2, 2, 0,
    # -2, -2), plus the zero point 3; 600 * 0.5 = 300 clips to 127, INT32_MIN * 0.5 to -128.
    # vec.mulshift would round the ties away from zero (1, 2, 3, -1, -2, -3).
    acc = np.array([[1, 3, 5, -1, -3, -5, 600, INT32_MIN] * 2], np.int32)
    got = _requant_on_chip(npu, acc, np.float32(0.5), 3, -128, 127)
    assert got[0, :8].tolist() == [3, 5, 5, 3, 1, 1, 127, -128]


def test_lo_at_the_zero_point_fuses_a_relu(npu):
    acc = np.array([[-40, -2, 0, 2, 40, 1000, 7, -7] * 2], np.int32)
    got = _requant_on_chip(npu, acc, np.float32(0.25), -5, -5, 127)
    # -40 * 0.25 = -10 -> -15 clips to -5; 1000 * 0.25 = 250 -> 245 clips to 127.
    assert got[0, :8].tolist() == [-5, -5, -5, -5, 5, 127, -3, -5]


def test_the_product_rounds_in_float32_before_the_rounding_to_integer(npu):
    # Worked by hand. 0.1 in float32 is 0.100000001490116..., so 5 * scale is
    # 0.5000000075 exactly, which float32 rounds to 0.5 (half an ulp there is 3e-8): the tie
    # then rounds to even, 0, where an exact product would round to 1. Likewise 25 -> 2.5 -> 2
    # (not 3). And 2**24 + 1 converts to float32 as 2**24, so times 2**-25 it is 0.5 -> 0.
    acc = np.array([[5, 25, -5, -25, 15, (1 << 24) + 1, 0, 0] * 2], np.int32)
    got = _requant_on_chip(npu, acc, np.float32(0.1), 0, -128, 127)
    assert got[0, :5].tolist() == [0, 2, 0, -2, 2]
    got = _requant_on_chip(npu, acc, np.float32(2.0 ** -25), 0, -128, 127)
    assert got[0, 5] == 0


def _qlinear_matmul(a, a_scale, b, b_scale, y_scale, y_zp) -> np.ndarray:
    """onnxruntime's QLinearMatMul of int8 ``a`` (M x K) and ``b`` (K x N, one scale per
    column), zero input zero points."""
    n = b.shape[1]
    inits = [numpy_helper.from_array(v, name) for v, name in (
        (np.float32(a_scale), "a_scale"), (np.int8(0), "a_zp"), (b, "b"),
        (b_scale.astype(np.float32), "b_scale"), (np.zeros(n, np.int8), "b_zp"),
        (np.float32(y_scale), "y_scale"), (np.int8(y_zp), "y_zp"))]
    node = helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp",
                                              "y_scale", "y_zp"], ["y"])
    graph = helper.make_graph([node], "qmm", [helper.make_tensor_value_info(
        "a", TensorProto.INT8, list(a.shape))], [helper.make_tensor_value_info(
            "y", TensorProto.INT8, [a.shape[0], n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"a": a})[0]


def test_a_gemm_requantised_on_the_npu_equals_onnxruntime(npu):
    # One 16x16x16 tile: the array computes the int32 product, vec.requant requantises it with
    # a row of per-column scales (a_scale * b_scale[c] / y_scale, in float32 as onnxruntime
    # rounds them), the store writes int8.
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, (16, 16)).astype(np.int8)
    a[:8] = rng.integers(-6, 7, (8, 16))  # small products: ties below, no saturation
    b = rng.integers(-128, 128, (16, 16)).astype(np.int8)
    b[:, :8] = rng.integers(-6, 7, (16, 8))
    b_scale = rng.uniform(0.001, 0.02, 16).astype(np.float32)
    b_scale[:8] = 2.0 ** -rng.integers(1, 4, 8)  # power-of-two scales 1/2 .. 1/8
    a_scale, y_scale, y_zp = np.float32(0.5), np.float32(1.0), -3
    scales = output_scale(a_scale, b_scale, y_scale)
    product = a.astype(np.int32) @ b.astype(np.int32) * scales.astype(np.float64)
    assert (np.abs(product - np.floor(product)) == 0.5).sum() >= 20  # ties to round
    c_addr = 1024
    dram = dram_with(2048, a=(0, a), b=(256, b), s=(512, scales))
    program = [
        Load(Mem.INP, 0, 0, 16, 16, 16),
        Load(Mem.WGT, 0, 256, 16, 16, 16),
        Load(Mem.ACC, 16, 512, 1, 16, 64, PUSH),
        Gemm(0, 0, 0, 16, 16, reset=True, deps=POP),
        Requant(0, 16, y_zp, -128, 127, src=16, per_channel=True, deps=PUSH),
        Store(0, c_addr, 16, 16, 16, narrow=True, deps=Deps(pop_prev=True, push_prev=True)),
        Finish(Deps(pop_next=True)),
    ]
    got = simulate(program, npu, dram).dram[c_addr:c_addr + 256].view(np.int8)
    want = _qlinear_matmul(a, a_scale, b, b_scale, y_scale, y_zp)
    np.testing.assert_array_equal(got.reshape(16, 16), want)


REQUANT_BITS = st.integers(-4096, 4095)
FINITE_F32 = st.floats(width=32, allow_nan=False, allow_infinity=False).map(float_bits)


@st.composite
def requants(draw) -> Requant:
    lo, hi = sorted((draw(REQUANT_BITS), draw(REQUANT_BITS)))
    dst, rows, zp = draw(st.integers(0, 65535)), draw(st.integers(1, 65535)), draw(REQUANT_BITS)
    deps = Deps(draw(st.booleans()), draw(st.booleans()), draw(st.booleans()),
                draw(st.booleans()))
    if draw(st.booleans()):
        return Requant(dst, rows, zp, lo, hi, src=draw(st.integers(0, 65535)),
                       per_channel=True, deps=deps)
    return Requant(dst, rows, zp, lo, hi, scale=draw(FINITE_F32), deps=deps)


@given(st.lists(requants(), max_size=10))
def test_requant_round_trips_through_assembly_and_binary(program):
    text = disassemble(program)
    assert assemble(text) == tuple(program)
    assert decode(encode(program)) == tuple(program)


def test_requant_assembly_reads_as_documented():
    (per_tensor, per_channel) = assemble(
        "vec.requant acc[32], rows=16, scale=0x3f000000, zp=-3, lo=-128, hi=127\n"
        "vec.requant acc[0], acc[64], rows=48, zp=5, lo=5, hi=127 | pop_prev\n")
    assert per_tensor == Requant(32, 16, -3, -128, 127, scale=float_bits(0.5))
    assert per_channel == Requant(0, 48, 5, 5, 127, src=64, per_channel=True, deps=POP)


@pytest.mark.parametrize("fields, fragment", [
    ({"lo": 5, "hi": 4}, "vec.requant requires lo <= hi, got lo=5 hi=4"),
    ({"zp": 4096}, "vec.requant requires -4096 <= zp <= 4095, got 4096"),
    ({"hi": -4097}, "vec.requant requires -4096 <= hi <= 4095, got -4097"),
    ({"scale": float_bits(np.inf)}, "vec.requant requires a finite float32 scale, got bits "
     "0x7f800000"),
    ({"scale": 0x7FC00000}, "vec.requant requires a finite float32 scale, got bits 0x7fc00000"),
    ({"scale": 1 << 32}, "vec.requant requires 0 <= scale <= 4294967295"),
    ({"per_channel": True, "scale": 1}, "vec.requant with a scale row requires scale = 0"),
    ({"src": 3}, "vec.requant with an immediate scale requires src = 0, got 3"),
    ({"per_channel": 1}, "vec.requant requires per_channel true or false, got 1"),
    ({"deps": Deps(pop_next=True), "rows": 0}, "vec.requant requires 1 <= rows <= 65535"),
])
def test_a_malformed_requant_faults_naming_the_field(fields, fragment):
    args = {"dst": 0, "rows": 16, "zp": 0, "lo": -128, "hi": 127, **fields}
    with pytest.raises(SimulatorFault) as err:
        Requant(**args)
    assert fragment in err.value.message


def test_a_requant_word_with_bad_fields_faults_at_decode():
    word = int.from_bytes(encode([Requant(0, 16, 0, -128, 127)]), "little")
    lo_at = 102  # docs/simulator.md: lo is bits 102-114
    assert decode(word.to_bytes(16, "little"))[0].lo == -128
    bad = word & ~(0x1FFF << lo_at) | (200 << lo_at)  # lo = 200, above hi = 127
    with pytest.raises(SimulatorFault, match="requires lo <= hi, got lo=200 hi=127") as err:
        decode(bad.to_bytes(16, "little"))
    assert (err.value.index, err.value.unit) == (0, "decode")


@pytest.mark.parametrize("text, fragment", [
    ("vec.requant acc[0], rows=16, zp=0, lo=0, hi=1", "vec.requant requires 'scale=...'"),
    ("vec.requant acc[0], acc[16], rows=16, scale=0x3f000000, zp=0, lo=0, hi=1",
     "vec.requant has no field 'scale'"),
    ("vec.requant acc[0], rows=16, scale=0x3f000000, lo=0, hi=1",
     "vec.requant requires 'zp=...'"),
])
def test_requant_assembly_errors_name_the_field(text, fragment):
    with pytest.raises(SimulatorFault, match=fragment) as err:
        assemble(text)
    assert err.value.unit == "assembler"


def test_a_machine_without_the_stage_faults_on_requant(small):
    dram = dram_with(256, acc=(0, np.zeros((4, 4), np.int32)))
    program = [Load(Mem.ACC, 0, 0, 4, 4, 16, PUSH),
               Requant(0, 4, 0, -128, 127, scale=float_bits(0.5), deps=POP), Finish()]
    with pytest.raises(SimulatorFault, match=r"vec.requant requires a machine with a "
                       r"requantisation stage \(machine.requant\), and small has none") as err:
        simulate(program, small, dram)
    assert (err.value.index, err.value.unit) == (1, "vector")


def test_requant_takes_the_stage_cycles_from_the_machine():
    # SMALL (4 columns, DRAM latency 100, 16 B/cycle) with a 2-lane, 5-stage requant stage.
    # The load of 2 acc rows (32 bytes) is done at 100 + 2 = 102 and pushes its token then;
    # the requant starts at 102, takes the rows in 2 * ceil(4 / 2) = 4 cycles and is done 5
    # stages later: 111.
    config = small_machine(requant={"lanes": 2, "latency": 5})
    dram = dram_with(256, acc=(0, np.arange(8, dtype=np.int32)))
    program = [Load(Mem.ACC, 0, 0, 2, 4, 16, PUSH),
               Requant(0, 2, 0, -128, 127, scale=float_bits(0.5), deps=POP), Finish()]
    result = simulate(program, config, dram)
    assert result.cycles == 111
    assert result.units["vector"].busy == 9


def test_a_step_cannot_advance_the_scale_row_of_an_immediate_scale(npu):
    program = [Loop(2, 2), Requant(0, 16, 0, -128, 127, scale=float_bits(0.5)),
               Step(0, 16, 16), Finish()]
    with pytest.raises(SimulatorFault, match="a step of a vec.requant with an immediate scale "
                       "cannot advance src") as err:
        simulate(program, npu, np.zeros(64, np.uint8))
    assert err.value.unit == "fetch"


def test_the_requant_section_is_optional_and_checked():
    assert MachineConfig.from_dict(SMALL).requant is None
    config = small_machine(requant={"lanes": 2, "latency": 5})
    assert MachineConfig.from_dict(config.to_dict()) == config
    assert "requant" not in MachineConfig.from_dict(SMALL).to_dict()
    with pytest.raises(IntrinsicSpecError) as err:
        small_machine(requant={"lanes": 3, "latency": 5, "width": 1})
    messages = [f.message for f in err.value.findings]
    assert "<dict>: machine.requant has no field 'width' (fields: lanes, latency)" in messages
    assert any("machine.requant.lanes requires a divisor of machine.array.cols (4)" in m
               for m in messages)
