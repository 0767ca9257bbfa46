"""AArch64 with FEAT_BF16: bf16 x bf16 -> f32 GEMMs tensorized onto BFDOT (by element), run
under qemu-user and compared bit for bit with a reference that computes as the Arm ARM states
(``arm_bfdot_lane``'s ``accumulation``: each pair's products summed, then added, every
rounding to odd, denormals flushed), and with float64 within the stated bound; counted
under unicorn with BFDOT as SDOT."""

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from intrinsics import self_check
from intrinsics.oracle import hardware_gemm, hardware_model, numpy_model
from intrinsics.selfcheck import OK
from targets import cpu
from targets.arm.qemu import qemu_binary
from targets.host.selfcheck import SemanticsChecker
from tensorize.engine import auto_tensorize
from tests.targets.arm.bf16_checks import assert_hardware_order
from tests.tensorize.schedule.kernels import bf16_inputs, bf16_one_lane, gemm_bf16

BF16 = ml_dtypes.bfloat16
FEATURES = "+neon,+dotprod,+bf16"
needs_qemu = pytest.mark.skipif(qemu_binary() is None, reason="qemu-user "
                                "(qemu-aarch64-static) is not installed: apt-get install "
                                "qemu-user-static")


@pytest.fixture(scope="module")
def bfdot(registry):
    return registry.get("arm_bfdot_lane")


def _one_lane(c: float, a: tuple[float, float], b: tuple[float, float]) -> dict:
    """Inputs whose lane 0 computes ``c + (a[0] * b[0] + a[1] * b[1])``; other lanes zero."""
    return bf16_one_lane(c, a, b, 4)


def _kernel(shape: tuple[int, int, int], registry) -> cpu.CpuKernel:
    # Named: with +bf16 the engine's count prefers BFMMLA (tests/targets/arm/test_bfmmla.py).
    result = auto_tensorize(gemm_bf16(*shape), "arm", features=FEATURES, registry=registry,
                            intrinsic="arm_bfdot_lane")
    assert [b.intrinsic for b in result.tensorized] == ["arm_bfdot_lane"]
    return cpu.emit(result.func, "arm", FEATURES, registry=registry)


def test_rounding_is_to_odd(bfdot) -> None:
    # 1 + 2**-30 lies between 1 and its successor 1 + 2**-23: to odd, the successor.
    inputs = _one_lane(1.0, (2.0 ** -15, 0.0), (2.0 ** -15, 0.0))
    assert numpy_model(bfdot, inputs)[0] == 1.0
    assert hardware_model(bfdot, inputs)[0] == 1.0 + 2.0 ** -23


def test_the_pair_is_summed_before_it_is_added(bfdot) -> None:
    # -2**25 + 1 rounds (to odd) to -(2**25 - 2) first, and 2**25 plus that is 2. One
    # product at a time: 2**25 - 2**25 + 1 is 1; 2**25 + 1 rounds to odd 2**25 + 4 first, 4.
    inputs = _one_lane(2.0 ** 25, (-1.0, 1.0), (2.0 ** 25, 1.0))
    assert hardware_model(bfdot, inputs)[0] == 2.0
    for order, one_at_a_time in (("ascending", 1.0), ("descending", 4.0)):
        rule = replace(bfdot.accumulation, order=order)
        assert hardware_model(replace(bfdot, accumulation=rule), inputs)[0] == one_at_a_time


def test_an_overflow_is_infinity_and_truncation_stops_short_of_it(bfdot) -> None:
    # 2**64 * 2**64 is 2**128, past float32: infinity. The largest float32 plus 2**100 lies
    # below 2**128: truncated, it is the largest float32 (its last bit already 1).
    assert hardware_model(bfdot, _one_lane(0.0, (2.0 ** 64, 0.0), (2.0 ** 64, 0.0)))[0] \
        == np.inf
    largest = float(np.finfo(np.float32).max)
    assert hardware_model(bfdot, _one_lane(largest, (2.0 ** 50, 0.0), (2.0 ** 50, 0.0)))[0] \
        == np.float32(largest)


def test_a_denormal_product_is_flushed(bfdot) -> None:
    # 2**-70 * 2**-70 is a float32 denormal: flushed before the pair's sum.
    inputs = _one_lane(0.0, (2.0 ** -70, 1.0), (2.0 ** -70, 2.0 ** -126))
    assert hardware_model(bfdot, inputs)[0] == 2.0 ** -126


def test_the_self_check_bounds_the_hardware_order_by_float64(bfdot) -> None:
    [checked] = self_check([bfdot], [SemanticsChecker(trials=4)])
    assert checked.status == OK, str(checked)


@needs_qemu
@pytest.mark.parametrize("shape", [(15, 16, 17), (17, 33, 65), (1, 4, 2), (33, 15, 16)])
def test_bf16_gemm_equals_the_hardware_order_bit_for_bit(shape, registry) -> None:
    m, n, k = shape
    inputs = bf16_inputs(m, n, k)
    run = cpu.run(_kernel(shape, registry), inputs)
    assert run.engine == "qemu-user"
    got = run.outputs["C"]
    assert_hardware_order(got, inputs, registry.get("arm_bfdot_lane").accumulation, 2)


@needs_qemu
def test_the_reference_rule_matters(registry) -> None:
    """The exact check has teeth: rounding to nearest even, or adding the products one at a
    time, gives another result on these inputs, which the emulated run does not equal."""
    shape = (16, 16, 64)
    inputs = bf16_inputs(*shape, seed=3)
    got = cpu.run(_kernel(shape, registry), inputs).outputs["C"]
    rule = registry.get("arm_bfdot_lane").accumulation
    for other in (type(rule)("pairwise", "nearest_even", "flush"),
                  type(rule)("descending", "odd", "flush")):
        assert not np.array_equal(got, hardware_gemm(inputs["A"], inputs["B"], 2, other))


def test_the_kernel_calls_bfdot_and_is_counted(registry) -> None:
    kernel = _kernel((8, 16, 32), registry)
    assert "+bf16" in kernel.features.split(",")
    asm = cpu.compile(kernel, "asm")
    dots = [line for line in asm.splitlines() if line.strip().startswith("bfdot")]
    assert dots and all(".4s" in line and ".8h" in line for line in dots)
    # Unicorn does not execute BFDOT: counted as SDOT, one for one. 8 MACs a BFDOT: the
    # kernel executes at least its 512 BFDOTs and less than one instruction a MAC.
    count = cpu.count_executed(kernel, bf16_inputs(8, 16, 32))
    assert count is not None and 8 * 16 * 32 // 8 < count < 8 * 16 * 32


@pytest.mark.slow  # half a second under unicorn, at the default run's limit for a test
def test_the_documented_256_cubed_count(registry) -> None:
    """docs/arm_backend.md, "bf16 on FEAT_BF16": 3,635,914 instructions, 0.217 a MAC."""
    count = cpu.count_executed(_kernel((256, 256, 256), registry), bf16_inputs(256, 256, 256))
    assert count == 3_635_914
    assert round(count / 256 ** 3, 3) == 0.217
