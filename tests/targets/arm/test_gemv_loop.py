"""The one-row GEMV's code (issue 24): B loaded a k step at a time with one `ld1` of four
registers (arm_ld1x4_step_16x4), its k loop kept as the schedule unrolled it (`cpu.emit(...,
rolled=True)`: LLVM's unroller would hoist the loads and spill), the packing's interleaving
stores chained through their pointer (`chain_stores=True`), and the tuner keeping the form
that executes fewest. Every kernel is exact against numpy."""

import re
from collections import Counter

import numpy as np
import pytest

from ir.printer import print_node
from targets import cpu
from tensorize.engine import auto_tensorize
from tensorize.engine.cpu_tune import CODE_FORMS, choose_tune_cpu
from tests.targets.arm.conftest import random_inputs
from tests.targets.arm.test_emit import _k_loop
from tests.tensorize.schedule.kernels import gemm_int8

_LD1X4 = re.compile(r"ld1\t\{ v\d+\.16b, v\d+\.16b, v\d+\.16b, v\d+\.16b \}, \[x\d+\], x\d+$")
_ST4 = re.compile(r"\tst4\t\{ v\d+\.16b, v\d+\.16b, v\d+\.16b, v\d+\.16b \}, \[x\d+\](.*)$",
                  re.MULTILINE)


def _gemv(n: int, k: int, registry):
    return auto_tensorize(gemm_int8(1, n, k), "arm", registry=registry).func


def _exact(kernel: cpu.CpuKernel, n: int, k: int) -> None:
    inputs = random_inputs(gemm_int8(1, n, k), seed=n + k)
    run = cpu.run(kernel, {"A": inputs["A"], "B": inputs["B"]})
    np.testing.assert_array_equal(run.outputs["C"],
                                  inputs["A"].astype(np.int32) @ inputs["B"].astype(np.int32))


# 4 and 3 tiles of 16 columns, 8 and 5 iterations of four k steps.
@pytest.mark.parametrize(("n", "k"), [(64, 128), (48, 80)])
def test_a_one_row_tile_loads_a_k_step_of_b_with_one_ld1_of_four_registers(n, k, registry):
    func = _gemv(n, k, registry)
    calls = Counter(re.findall(r'T\.call_intrinsic\("(\w+)"', print_node(func, False)))
    assert calls["arm_ld1x4_step_16x4_s8"] == 1 and calls["arm_ld1_steps_4x4_s8"] == 1
    assert "arm_ld1_4x4_s8" not in calls
    kernel = cpu.emit(func, "arm", registry=registry, rolled=True)
    loop = _k_loop(cpu.compile(kernel, "asm"))
    # Four k steps an iteration: 16 sdot, B's four post-indexed ld1 x4 and A's one register.
    assert sum(i.startswith("sdot") for i in loop) == 16
    assert sum(bool(_LD1X4.match(i)) for i in loop) == 4
    _exact(kernel, n, k)


def test_rolled_marks_only_the_loops_of_chained_loads_for_llvm_to_leave(registry):
    gemv = _gemv(64, 512, registry)
    plain = cpu.emit(gemv, "arm", registry=registry, tune_cpu="cortex-a55")
    rolled = cpu.emit(gemv, "arm", registry=registry, tune_cpu="cortex-a55", rolled=True)
    assert "llvm.loop.unroll.disable" not in plain.llvm_ir
    assert len(re.findall(r'^!\d+ = distinct !\{ !\d+, !\{!"llvm.loop.unroll.disable"\} \}$',
                          rolled.llvm_ir, re.MULTILINE)) == 1
    # Tuned for cortex-a55 LLVM unrolls the k loop of 32 iterations further; rolled, it
    # stays one iteration of 16 sdot, and executes fewer instructions.
    assert sum(i.startswith("sdot") for i in _k_loop(cpu.compile(plain, "asm"))) > 16
    assert sum(i.startswith("sdot") for i in _k_loop(cpu.compile(rolled, "asm"))) == 16
    assert cpu.count_executed(rolled, {}) < cpu.count_executed(plain, {})
    _exact(rolled, 64, 512)
    # A kernel without chained loads (one k step an iteration: k 20 has 5) is unchanged.
    odd = _gemv(64, 20, registry)
    assert cpu.emit(odd, "arm", registry=registry, rolled=True).llvm_ir == \
        cpu.emit(odd, "arm", registry=registry).llvm_ir


def test_chained_packing_stores_advance_their_pointer_and_stay_exact(registry):
    func = _gemv(64, 512, registry)
    plain = cpu.compile(cpu.emit(func, "arm", registry=registry, tune_cpu="cortex-a55"), "asm")
    kernel = cpu.emit(func, "arm", registry=registry, tune_cpu="cortex-a55",
                      chain_stores=True)
    chained = cpu.compile(kernel, "asm")
    # B's 16 x 4 tiles: one st4 each, which has no immediate offset. Plain, each but the
    # unrolled loop's first is addressed by an add; chained, every one advances its pointer.
    assert any(rest == "" for rest in _ST4.findall(plain))
    assert _ST4.findall(chained) and all(re.fullmatch(r", x\d+", rest)
                                         for rest in _ST4.findall(chained))
    assert cpu.count_executed(kernel, {}) < cpu.count_executed(
        cpu.emit(func, "arm", registry=registry, tune_cpu="cortex-a55"), {})
    _exact(kernel, 64, 512)


@pytest.mark.slow
def test_the_tuner_keeps_the_form_and_cpu_that_execute_fewest(registry):
    func = _gemv(32, 256, registry)
    kernel, counts = choose_tune_cpu(func, "arm", registry=registry)
    every = {(name, i): cpu.count_executed(cpu.emit(func, "arm", registry=registry,
                                                    tune_cpu=name, **form), {})
             for name in counts for i, form in enumerate(CODE_FORMS)}
    # Each CPU's count is its form's that executes fewest; the kernel is the fewest of all,
    # here not LLVM's own form.
    for name, count in counts.items():
        assert count == min(n for (tune, _), n in every.items() if tune == name)
    assert cpu.count_executed(kernel, {}) == min(every.values()) < min(
        n for (_, form), n in every.items() if form == 0)
    _exact(kernel, 32, 256)
