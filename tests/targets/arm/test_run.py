"""Every suite kernel the arm target tensorizes runs under the emulator and matches the host
reference executor exactly."""

import numpy as np
import pytest

from targets import cpu, host
from tests.targets.arm.conftest import kernel, random_inputs, tensorized
from tests.tensorize.engine.suite import suite

TENSORIZED = [name for name in suite() if tensorized(name).tensorized]


def test_the_dot_product_target_tensorizes_the_int8_suite() -> None:
    assert TENSORIZED == [
        "gemm_int8", "gemm_int8_odd", "batch_matmul_int8", "dense_int8", "conv2d_nhwc_int8",
        "conv2d_nchw_int8", "conv2d_dilated_int8", "conv1d_int8", "conv1x1_int8",
        "matmul_requant_int8", "depthwise_conv2d_int8"]


@pytest.mark.parametrize("name", TENSORIZED)
def test_suite_kernel_matches_the_host_reference(name: str) -> None:
    original = suite()[name]
    inputs = random_inputs(original)
    result = cpu.run(kernel(name), inputs)
    expected = host.run(original, inputs)
    assert set(result.outputs) == set(expected)
    for out, value in expected.items():
        np.testing.assert_array_equal(result.outputs[out], value)


def test_gemm_executes_one_dot_product_per_16_macs() -> None:
    original = suite()["gemm_int8"]
    result = cpu.run(kernel("gemm_int8"), random_inputs(original))
    m, k = original.params[0].shape
    n = original.params[1].shape[1]
    assert result.engine == "unicorn"
    assert result.counted == {"sdot": m * n * k // 16}
    assert result.instructions > result.counted["sdot"]


def test_odd_gemm_pads_k_to_the_dot_product_depth() -> None:
    original = suite()["gemm_int8_odd"]
    assert [p.shape for p in original.params] == [(100, 36), (36, 60), (100, 60)]
    result = cpu.run(kernel("gemm_int8_odd"), random_inputs(original, seed=3))
    assert result.counted == {"sdot": 100 * 60 * 36 // 16}


def test_extreme_int8_values_accumulate_exactly() -> None:
    original = suite()["gemm_int8"]
    inputs = {"A": np.full((64, 64), -128, np.int8), "B": np.full((64, 64), -128, np.int8)}
    result = cpu.run(kernel("gemm_int8"), inputs)
    np.testing.assert_array_equal(result.outputs["C"], np.full((64, 64), 64 * 128 * 128))
    assert original.params[2].name == "C"
