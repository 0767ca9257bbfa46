"""The fp16 example kernels (batch matmul, dense, NHWC convolution) tensorized onto AArch64's
FMLAL (``+fp16fml``), run under the emulator, and compared bit for bit with the
hardware-order reference of their GEMMs (``arm_fmlal_lane``'s ``accumulation``: one k a
call, each product added with one rounding to nearest even, denormals kept) and with
float64 within the stated bound (tests/targets/float_examples.py)."""

import numpy as np
import pytest

from targets import cpu
from tensorize.engine import auto_tensorize, count_calls
from tests.targets import float_examples as fx

FEATURES = "+neon,+dotprod,+fp16fml"


@pytest.mark.parametrize("kind", [
    "batch_matmul", "dense",
    pytest.param("conv2d_nhwc", marks=pytest.mark.slow)])  # 2.4 s under the emulator
def test_fp16_example_equals_the_hardware_order_bit_for_bit(kind, registry) -> None:
    func = fx.load(kind, "fp16")
    result = auto_tensorize(func, "arm", features=FEATURES, registry=registry)
    assert [b.intrinsic for b in result.tensorized] == ["arm_fmlal_lane"]
    assert count_calls(result.func)["arm_fmlal_lane"] > 0
    arrays = fx.inputs(func)
    run = cpu.run(cpu.emit(result.func, "arm", FEATURES, registry=registry), arrays)
    got = run.outputs[func.params[-1].name]
    rule = registry.get("arm_fmlal_lane").accumulation
    fx.assert_bits_equal(got, fx.hardware_reference(kind, arrays, 1, rule))
    fx.assert_within_float64_bound(kind, arrays, got, rule)
    # The exact check has teeth: each pair of k values added in descending order differs.
    other = type(rule)("descending", rule.rounding, rule.denormals)
    assert not np.array_equal(got, fx.hardware_reference(kind, arrays, 2, other))
