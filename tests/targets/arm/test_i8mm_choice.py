"""Turning i8mm on never makes a kernel slower: the engine counts the dot products' and the
matrix multiplies' kernels alike (``cpu_schedule.tile_cost``) and picks SMMLA only where it
costs fewer instructions. Checked by counting what each kernel executes (unicorn; i8mm
counted as SDOT, targets/arm/i8mm_count.py), and the i8mm kernels run exactly under
qemu-user."""

import numpy as np
import pytest

from intrinsics import default_registry
from targets import cpu, host
from targets.arm.i8mm_count import count_i8mm
from targets.arm.qemu import qemu_binary
from tensorize.engine import auto_tensorize
from tests.targets.arm.conftest import random_inputs
from tests.tensorize.engine.suite import suite
from tests.tensorize.schedule.kernels import gemm_int8

I8MM = "+neon,+dotprod,+i8mm"
KERNELS = {"gemm 16x16x16": gemm_int8(16, 16, 16), "gemm 17x33x65": gemm_int8(17, 33, 65),
           "gemm 1x5x3": gemm_int8(1, 5, 3), "gemm 31x17x15": gemm_int8(31, 17, 15),
           "conv2d_nhwc_int8": suite()["conv2d_nhwc_int8"],
           "batch_matmul_int8": suite()["batch_matmul_int8"]}
# Where SMMLA costs clearly fewer instructions than SDOT, and is picked.
PICKS_SMMLA = {"gemm 16x16x16", "gemm 17x33x65", "gemm 31x17x15", "batch_matmul_int8"}
# The convolution takes seconds to count under the emulator.
SLOW = {"conv2d_nhwc_int8"}


def _counts(func) -> tuple[int, int, list[str]]:
    """Instructions executed without i8mm and with it, and the intrinsics chosen with it."""
    inputs = random_inputs(func)
    plain = cpu.run(cpu.emit(auto_tensorize(func, "arm", registry=default_registry()).func, "arm",
                             registry=default_registry()), inputs).instructions
    chosen = auto_tensorize(func, "arm", features=I8MM, registry=default_registry())
    with_i8mm = count_i8mm(cpu.emit(chosen.func, "arm", I8MM, registry=default_registry()), inputs)
    return plain, with_i8mm, [b.intrinsic for b in chosen.tensorized]


@pytest.mark.slow  # in CI's slow pass, for the default run's time
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in KERNELS])
def test_turning_i8mm_on_never_makes_a_kernel_slower(name) -> None:
    plain, with_i8mm, intrinsics = _counts(KERNELS[name])
    assert with_i8mm <= plain
    if name in PICKS_SMMLA:
        assert intrinsics == ["arm_smmla"] and with_i8mm < plain


@pytest.mark.skipif(qemu_binary() is None, reason="qemu-user (qemu-aarch64-static) is not "
                    "installed: apt-get install qemu-user-static")
@pytest.mark.parametrize("name", ["gemm 17x33x65", "gemm 31x17x15"])
def test_the_kernel_picked_with_i8mm_runs_exactly(name, registry) -> None:
    func = KERNELS[name]
    chosen = auto_tensorize(func, "arm", features=I8MM, registry=registry)
    inputs = random_inputs(func, seed=3)
    run = cpu.run(cpu.emit(chosen.func, "arm", I8MM, registry=registry), inputs)
    assert run.engine == "qemu-user"
    for buffer, expected in host.run(func, inputs).items():
        np.testing.assert_array_equal(run.outputs[buffer], expected)


def test_count_executed_counts_sdot_and_i8mm_code_as_their_counters_do(registry) -> None:
    func = gemm_int8(16, 16, 16)
    inputs = random_inputs(func)
    sdot = cpu.emit(auto_tensorize(func, "arm", registry=registry).func, "arm", registry=registry)
    assert cpu.count_executed(sdot, inputs) == cpu.run(sdot, inputs).instructions
    smmla = cpu.emit(auto_tensorize(func, "arm", features=I8MM, registry=registry).func, "arm",
                     I8MM, registry=registry)
    assert cpu.count_executed(smmla, inputs) == count_i8mm(smmla, inputs)
