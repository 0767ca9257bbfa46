"""Loads that fill several k steps of a register stage in one instruction: SMMLA's four
2 x 8 operands of a k step as one `ld1` of four registers (arm_ld1x4_rows_8x8), and the four
k steps of a one-row tile's A as one register whose 32-bit lanes the by-element SDOT takes
(arm_ld1_steps_4x4). Each kernel is exact against numpy (i8mm under qemu-user, in the slow
pass), and the i8mm kernels are tuned by their count like the others."""

import re
from collections import Counter

import numpy as np
import pytest

from ir.printer import print_node
from targets import cpu
from targets.arm.qemu import qemu_binary
from tensorize.engine import auto_tensorize
from tensorize.engine.cpu_tune import choose_tune_cpu
from tests.targets.arm.conftest import random_inputs
from tests.tensorize.schedule.kernels import gemm_int8

I8MM = "+neon,+dotprod,+i8mm"


def _calls(func) -> Counter[str]:
    """How often each intrinsic is called in the function's text (one call block each)."""
    return Counter(re.findall(r'T\.call_intrinsic\("(\w+)"', print_node(func, False)))


def _smmla(m: int, n: int, k: int, registry):
    result = auto_tensorize(gemm_int8(m, n, k), "arm", features=I8MM,
                            intrinsic="arm_smmla", registry=registry)
    assert [b.intrinsic for b in result.tensorized] == ["arm_smmla"]
    return result.func


def test_a_smmla_k_step_loads_each_input_with_one_ld1_of_four_registers(registry) -> None:
    # 32 x 32 x 64: a tile of 4 x 4 operands (8 rows by 8 columns), 8 k steps of 8.
    func = _smmla(32, 32, 64, registry)
    calls = _calls(func)
    assert calls["arm_ld1x4_rows_8x8_s8"] == 2
    assert "arm_ld1_2x8_s8" not in calls
    asm = cpu.compile(cpu.emit(func, "arm", I8MM, registry=registry), "asm")
    loads = re.findall(r"\tld1\t\{ v\d+\.16b, v\d+\.16b, v\d+\.16b, v\d+\.16b \}", asm)
    smmla = re.findall(r"\tsmmla\t", asm)
    # Two four-register loads feed every 16 smmla of a k step.
    assert len(loads) * 8 == len(smmla)


@pytest.mark.slow
def test_the_tuner_counts_i8mm_kernels_and_keeps_the_fewest(registry) -> None:
    func = _smmla(32, 32, 64, registry)
    kernel, counts = choose_tune_cpu(func, "arm", I8MM, registry=registry)
    assert all(isinstance(c, int) and c > 0 for c in counts.values()), counts
    best = min(counts, key=lambda name: counts[name])
    assert best == "generic" or f'"tune-cpu"="{best}"' in kernel.llvm_ir
    assert cpu.count_executed(kernel, {}) == counts[best]


@pytest.mark.slow
@pytest.mark.skipif(qemu_binary() is None, reason="qemu-user (qemu-aarch64-static) is not "
                    "installed: apt-get install qemu-user-static")
@pytest.mark.parametrize("shape", [(32, 32, 64), (17, 24, 40)])
def test_smmla_with_four_register_loads_is_exact_under_qemu(shape, registry) -> None:
    m, n, k = shape
    func = _smmla(m, n, k, registry)
    kernel, _ = choose_tune_cpu(func, "arm", I8MM, registry=registry)
    inputs = random_inputs(gemm_int8(m, n, k), seed=m)
    run = cpu.run(kernel, {"A": inputs["A"], "B": inputs["B"]})
    expected = inputs["A"].astype(np.int32) @ inputs["B"].astype(np.int32)
    np.testing.assert_array_equal(run.outputs["C"], expected)


@pytest.mark.parametrize("shape", [(1, 64, 128), (1, 48, 80)])
def test_a_one_row_tile_loads_four_k_steps_of_a_as_one_register(shape, registry) -> None:
    m, n, k = shape
    result = auto_tensorize(gemm_int8(m, n, k), "arm", registry=registry)
    assert [b.intrinsic for b in result.tensorized] == ["arm_sdot_lane"]
    calls = _calls(result.func)
    assert calls["arm_ld1_steps_4x4_s8"] == 1
    assert "arm_ld1_4_s8" not in calls
    kernel = cpu.emit(result.func, "arm", registry=registry)
    inputs = random_inputs(gemm_int8(m, n, k), seed=n)
    run = cpu.run(kernel, {"A": inputs["A"], "B": inputs["B"]})
    expected = inputs["A"].astype(np.int32) @ inputs["B"].astype(np.int32)
    np.testing.assert_array_equal(run.outputs["C"], expected)
