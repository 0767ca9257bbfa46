"""The bf16 example kernels (batch matmul, dense, NHWC convolution) tensorized onto each of
AArch64's FEAT_BF16 instructions (``+bf16``: BFDOT by element, BFMMLA), run under qemu-user,
and compared bit for bit with the hardware-order reference of their GEMMs (the
instruction's ``accumulation``: pairs of k values in ascending order, each pair's products
rounded and summed, then added, all to odd, denormals flushed) and with float64 within the
stated bound (tests/targets/float_examples.py)."""

import numpy as np
import pytest

from ir import IterKind
from targets import cpu
from targets.arm.qemu import qemu_binary
from tensorize.engine import auto_tensorize, count_calls
from tests.targets import float_examples as fx

FEATURES = "+neon,+dotprod,+bf16"
pytestmark = pytest.mark.skipif(qemu_binary() is None, reason="qemu-user "
                                "(qemu-aarch64-static) is not installed: apt-get install "
                                "qemu-user-static")


@pytest.mark.parametrize("intrinsic", ["arm_bfdot_lane", "arm_bfmmla"])
@pytest.mark.parametrize("kind", [
    "batch_matmul", "dense",
    pytest.param("conv2d_nhwc", marks=pytest.mark.slow)])  # 1.6 s under qemu
def test_bf16_example_equals_the_hardware_order_bit_for_bit(kind, intrinsic, registry) -> None:
    func = fx.load(kind, "bf16")
    result = auto_tensorize(func, "arm", features=FEATURES, registry=registry,
                            intrinsic=intrinsic)
    assert [b.intrinsic for b in result.tensorized] == [intrinsic]
    assert count_calls(result.func)[intrinsic] > 0
    arrays = fx.inputs(func)
    run = cpu.run(cpu.emit(result.func, "arm", FEATURES, registry=registry), arrays)
    assert run.engine == "qemu-user"
    got = run.outputs[func.params[-1].name]
    described = registry.get(intrinsic)
    rule = described.accumulation
    group = next(iv.extent for iv in described.iter_vars if iv.kind is IterKind.REDUCE)
    fx.assert_bits_equal(got, fx.hardware_reference(kind, arrays, group, rule))
    fx.assert_within_float64_bound(kind, arrays, got, rule)
    # The exact check has teeth: rounding each sum to nearest even differs somewhere.
    other = type(rule)(rule.order, "nearest_even", rule.denormals)
    assert not np.array_equal(got, fx.hardware_reference(kind, arrays, group, other))
