"""The bf16 example kernels (batch matmul, dense, NHWC convolution) tensorized onto x86's
VDPBF16PS, run natively, and compared bit for bit with the hardware-order reference of their
GEMMs (``x86_vdpbf16ps``'s ``accumulation``, two k values a call) and with float64 within
the stated bound (tests/targets/float_examples.py)."""

import numpy as np
import pytest

from targets import cpu
from tensorize.engine import auto_tensorize, count_calls
from tests.default_run import first_by_default
from tests.targets import float_examples as fx
from tests.targets.cpu.conftest import run_here


@pytest.mark.parametrize("kind", first_by_default(fx.KINDS, 2))
def test_bf16_example_equals_the_hardware_order_bit_for_bit(kind, registry) -> None:
    func = fx.load(kind, "bf16")
    result = auto_tensorize(func, "x86", registry=registry)
    assert [b.intrinsic for b in result.tensorized] == ["x86_vdpbf16ps"]
    assert count_calls(result.func)["x86_vdpbf16ps"] > 0
    arrays = fx.inputs(func)
    run = run_here(cpu.emit(result.func, "x86", registry=registry), arrays)
    got = run.outputs[func.params[-1].name]
    rule = registry.get("x86_vdpbf16ps").accumulation
    fx.assert_bits_equal(got, fx.hardware_reference(kind, arrays, 2, rule))
    fx.assert_within_float64_bound(kind, arrays, got, rule)
    # The exact check has teeth: each pair's products in the other order differ somewhere.
    other = type(rule)("ascending", rule.rounding, rule.denormals)
    assert not np.array_equal(got, fx.hardware_reference(kind, arrays, 2, other))
