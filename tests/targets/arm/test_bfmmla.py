"""AArch64 with FEAT_BF16: bf16 x bf16 -> f32 GEMMs tensorized onto BFMMLA (2x4 by 4x2 into
2x2), run under qemu-user and compared bit for bit with a reference that computes as the Arm
ARM states (``arm_bfmmla``'s ``accumulation``: the 4 k values as two pairs in ascending
order, each pair's products summed and then added, every rounding to odd, denormals
flushed), and with float64 within the stated bound; counted under unicorn with BFMMLA as
SDOT."""

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from intrinsics import self_check
from intrinsics.oracle import hardware_gemm, hardware_model
from intrinsics.selfcheck import OK
from targets import cpu
from targets.arm.qemu import qemu_binary
from targets.host.selfcheck import SemanticsChecker
from tensorize.engine import auto_tensorize
from tests.targets.arm.bf16_checks import assert_hardware_order
from tests.default_run import first_by_default
from tests.tensorize.schedule.kernels import bf16_inputs, gemm_bf16

BF16 = ml_dtypes.bfloat16
FEATURES = "+neon,+dotprod,+bf16"
needs_qemu = pytest.mark.skipif(qemu_binary() is None, reason="qemu-user "
                                "(qemu-aarch64-static) is not installed: apt-get install "
                                "qemu-user-static")


@pytest.fixture(scope="module")
def bfmmla(registry):
    return registry.get("arm_bfmmla")


def _first_output(c: float, a: tuple[float, ...], b: tuple[float, ...]) -> dict:
    """Inputs of one call whose output (0, 0) computes ``c`` plus row 0 of A (4 k values)
    times column 0 of B; every other element zero."""
    left, right = np.zeros((2, 4), BF16), np.zeros((2, 4), BF16)
    left[0] = np.array(a, np.float32).astype(BF16)
    right[0] = np.array(b, np.float32).astype(BF16)
    acc = np.zeros((2, 2), np.float32)
    acc[0, 0] = c
    return {"A": left, "B": right, "C": acc}


def _kernel(shape: tuple[int, int, int], registry) -> cpu.CpuKernel:
    result = auto_tensorize(gemm_bf16(*shape), "arm", features=FEATURES, registry=registry,
                            intrinsic="arm_bfmmla")
    assert [b.intrinsic for b in result.tensorized] == ["arm_bfmmla"]
    return cpu.emit(result.func, "arm", FEATURES, registry=registry)


def test_the_four_values_are_two_pairs_in_order(bfmmla) -> None:
    # Pair (k 0, 1): -2**25 + 1 rounds (to odd) to -(2**25 - 2), and 2**25 plus that is 2;
    # pair (k 2, 3): 1 + 0, so 3. One product at a time: 2**25 - 2**25 + 1 + 1 is 2.
    inputs = _first_output(2.0 ** 25, (-1.0, 1.0, 1.0, 0.0), (2.0 ** 25, 1.0, 1.0, 0.0))
    assert hardware_model(bfmmla, inputs)[0, 0] == 3.0
    ascending = replace(bfmmla, accumulation=replace(bfmmla.accumulation, order="ascending"))
    assert hardware_model(ascending, inputs)[0, 0] == 2.0


def test_the_first_pair_is_rounded_before_the_second_is_added(bfmmla) -> None:
    # Pair (k 0, 1): -1 + 2**-30 rounds (to odd, toward zero here) to -(1 - 2**-24), so 1
    # plus that is 2**-24; pair (k 2, 3) adds 2**-30 exactly. The exact sum is 2**-29,
    # which one product at a time, each sum exact, also gives.
    inputs = _first_output(1.0, (-1.0, 2.0 ** -15, 2.0 ** -15, 0.0),
                           (1.0, 2.0 ** -15, 2.0 ** -15, 0.0))
    assert hardware_model(bfmmla, inputs)[0, 0] == 2.0 ** -24 + 2.0 ** -30
    ascending = replace(bfmmla, accumulation=replace(bfmmla.accumulation, order="ascending"))
    assert hardware_model(ascending, inputs)[0, 0] == 2.0 ** -29


def test_the_self_check_bounds_the_hardware_order_by_float64(bfmmla) -> None:
    [checked] = self_check([bfmmla], [SemanticsChecker(trials=4)])
    assert checked.status == OK, str(checked)


@needs_qemu
@pytest.mark.parametrize("m, n, k", first_by_default(
    [(15, 16, 17), (1, 4, 2), (17, 33, 65), (33, 15, 16)], keep=2))
def test_bf16_gemm_equals_the_hardware_order_bit_for_bit(m, n, k, registry) -> None:
    inputs = bf16_inputs(m, n, k)
    run = cpu.run(_kernel((m, n, k), registry), inputs)
    assert run.engine == "qemu-user"
    got = run.outputs["C"]
    assert_hardware_order(got, inputs, registry.get("arm_bfmmla").accumulation, 4)


@needs_qemu
def test_the_reference_rule_matters(registry) -> None:
    """The exact check has teeth: rounding to nearest even, or adding the products one at a
    time, gives another result on these inputs, which the emulated run does not equal."""
    shape = (16, 16, 64)
    inputs = bf16_inputs(*shape, seed=3)
    got = cpu.run(_kernel(shape, registry), inputs).outputs["C"]
    rule = registry.get("arm_bfmmla").accumulation
    for other in (replace(rule, rounding="nearest_even"), replace(rule, order="ascending")):
        assert not np.array_equal(got, hardware_gemm(inputs["A"], inputs["B"], 4, other))


def test_with_bf16_the_engine_prefers_bfmmla_to_bfdot(registry) -> None:
    """The engine's count (cpu_schedule.estimate) puts BFMMLA's 16 MACs an instruction
    ahead of BFDOT's 8 on a GEMM both fit."""
    result = auto_tensorize(gemm_bf16(64, 64, 64), "arm", features=FEATURES,
                            registry=registry)
    assert [b.intrinsic for b in result.tensorized] == ["arm_bfmmla"]


def test_the_kernel_calls_bfmmla_and_is_counted(registry) -> None:
    kernel = _kernel((8, 16, 32), registry)
    asm = cpu.compile(kernel, "asm")
    calls = [line for line in asm.splitlines() if line.strip().startswith("bfmmla")]
    assert calls and all(".4s" in line and ".8h" in line for line in calls)
    # Unicorn does not execute BFMMLA: counted as SDOT, one for one. 16 MACs a BFMMLA: the
    # kernel executes at least its 256 BFMMLAs and less than one instruction a MAC.
    count = cpu.count_executed(kernel, bf16_inputs(8, 16, 32))
    assert count is not None and 8 * 16 * 32 // 16 < count < 8 * 16 * 32


@pytest.mark.slow  # a second under unicorn
def test_the_documented_256_cubed_count(registry) -> None:
    """docs/arm_backend.md, "bf16 on FEAT_BF16": BFMMLA 1,484,488 instructions, 0.088 a
    MAC."""
    count = cpu.count_executed(_kernel((256, 256, 256), registry), bf16_inputs(256, 256, 256))
    assert count == 1_484_488
    assert round(count / 256 ** 3, 3) == 0.088
