"""A float array (``machine.datapath``): bfloat16 scratchpads of 2-byte elements, a float32
accumulator, and GEMMs that add their products in ascending k with one rounding per add,
bit for bit against the hardware-order reference (intrinsics.oracle.hardware_gemm)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from intrinsics.model import Accumulation
from intrinsics.oracle import hardware_gemm
from ir.errors import IntrinsicSpecError, SimulatorFault
from simulator import MachineConfig, assemble, simulate
from simulator.config import memory_bytes
from tests.simulator.helpers import SMALL, dram_with, small_machine

BF16 = ml_dtypes.bfloat16
FLOAT = {"operand": "bfloat16", "accumulator": "float32", "order": "ascending",
         "rounding": "nearest_even", "denormals": "keep"}
RULE = Accumulation(order="ascending", rounding="nearest_even", denormals="keep")

# C (m x 4, fp32 at 0x400) = A (m x k bf16 at 0x0) @ B (k x 4 bf16 at 0x200), from a zeroed
# tile, one GEMM of k <= 4.
GEMM = """
load inp[0], dram[0x0], rows={m}, cols={k}, stride={a_stride}
load wgt[0], dram[0x200], rows={k}, cols=4, stride=8 | push_next
vec.fill acc[0], rows={m}, imm=0
gemm acc[0], inp[0], wgt[0], rows={m}, k={k} | pop_prev, push_next
store dram[0x400], acc[0], rows={m}, cols=4, stride=16 | pop_prev
finish
"""


def float_machine():
    return small_machine(datapath=dict(FLOAT))


def bf16_values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """bfloat16 values of wide-ranging magnitude and both signs, some denormal, some zero."""
    values = rng.standard_normal(shape) * np.exp2(rng.integers(-30, 30, shape))
    values[rng.random(shape) < 0.1] = 0.0
    denormal = rng.random(shape) < 0.05
    values[denormal] = rng.integers(1, 128, int(denormal.sum())) * 2.0 ** -133
    return values.astype(BF16)


def run_gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    m, k = a.shape
    text = GEMM.format(m=m, k=k, a_stride=2 * k)
    dram = dram_with(0x800, a=(0, a), b=(0x200, b))
    result = simulate(assemble(text), float_machine(), dram)
    return result.dram[0x400:0x400 + 16 * m].view("<f4").reshape(m, 4)


def test_the_datapath_section_is_optional_and_sizes_the_memories():
    config = float_machine()
    assert config.is_float and not small_machine().is_float
    assert MachineConfig.from_dict(config.to_dict()) == config
    # bf16 scratchpads of 2 bytes an element, an fp32 accumulator of 4.
    assert [memory_bytes(config, m) for m in ("inp", "wgt", "acc")] == [512, 512, 1024]
    assert [memory_bytes(small_machine(), m) for m in ("inp", "wgt", "acc")] == [256, 256, 1024]


def test_another_float_semantics_is_refused_at_its_field():
    data = dict(SMALL, datapath=dict(FLOAT, order="descending"))
    with pytest.raises(IntrinsicSpecError) as info:
        MachineConfig.from_dict(data)
    assert "machine.datapath.order requires one of ascending, got 'descending'" in str(
        info.value)


@pytest.mark.parametrize("seed", range(4))
def test_gemm_equals_the_hardware_order_reference_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    a, b = bf16_values(rng, (6, 4)), bf16_values(rng, (4, 4))
    out = run_gemm(a, b)
    expected = hardware_gemm(a, b, 4, RULE)
    np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))


def test_the_order_of_k_is_observable():
    # 1 + 2**-24 + 2**-24 in ascending order rounds each tiny term away (ties to even);
    # the descending order would add the tiny ones first and keep them.
    a = np.array([[1.0, 2.0 ** -24, 2.0 ** -24, 0.0]], BF16)
    b = np.zeros((4, 4), BF16)
    b[:, 0] = 1.0
    out = run_gemm(a, b)
    assert out[0, 0] == np.float32(1.0)
    descending = Accumulation(order="descending", rounding="nearest_even", denormals="keep")
    assert hardware_gemm(a, b, 4, descending)[0, 0] == np.float32(1.0) + np.float32(2.0 ** -23)


def test_loads_move_two_bytes_an_operand():
    a = np.arange(8, dtype=np.float32).reshape(2, 4).astype(BF16)
    b = np.eye(4, dtype=np.float32).astype(BF16)
    out = run_gemm(a, b)
    np.testing.assert_array_equal(out, a.astype(np.float32))


@pytest.mark.parametrize(("line", "fragment"), [
    ("store dram[0x400], acc[0], rows=1, cols=4, stride=16, int8", "store with narrow"),
    ("vec.relu acc[0], rows=1", "vec.relu"),
])
def test_instructions_of_the_int8_array_are_refused(line, fragment):
    text = f"vec.fill acc[0], rows=1, imm=0\n{line}\nfinish\n"
    with pytest.raises(SimulatorFault, match=fragment):
        simulate(assemble(text), float_machine(), np.zeros(0x800, np.uint8))
