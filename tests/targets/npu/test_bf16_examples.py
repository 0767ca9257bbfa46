"""The bf16 example kernels (batch matmul, dense, NHWC convolution) tensorized onto the bf16
NPU's array (examples/machines/npu_bf16.yaml), simulated, and compared bit for bit with the
hardware-order reference of their GEMMs (``bf16_gemm``'s ``accumulation``: k ascending
across and within the 16-deep tiles, one rounding to nearest even each, denormals kept) and
with float64 within the stated bound (tests/targets/float_examples.py)."""

from pathlib import Path

import numpy as np
import pytest

from targets import npu
from tensorize.engine import auto_tensorize, count_calls
from tests.targets import float_examples as fx

MACHINE = Path(__file__).resolve().parents[3] / "examples" / "machines" / "npu_bf16.yaml"


@pytest.fixture(scope="module")
def bf16_npu():
    return npu.load_machine(MACHINE), npu.machine_registry(MACHINE)


@pytest.mark.parametrize("kind", fx.KINDS)
def test_bf16_example_equals_the_hardware_order_bit_for_bit(kind, bf16_npu) -> None:
    config, registry = bf16_npu
    func = fx.load(kind, "bf16")
    result = auto_tensorize(func, "npu", registry=registry, config=config)
    assert [b.intrinsic for b in result.blocks if b.intrinsic] == ["bf16_gemm"]
    assert count_calls(result.func)["bf16_gemm"] > 0
    arrays = fx.inputs(func)
    run = npu.run(result.func, arrays, config, lookup=registry.get)
    got = run.outputs[func.params[-1].name]
    rule = registry.get("bf16_gemm").accumulation
    fx.assert_bits_equal(got, fx.hardware_reference(kind, arrays, 16, rule))
    fx.assert_within_float64_bound(kind, arrays, got, rule)
    # The exact check has teeth: the products of each tile added in descending k differ.
    other = type(rule)("descending", rule.rounding, rule.denormals)
    assert not np.array_equal(got, fx.hardware_reference(kind, arrays, 16, other))
