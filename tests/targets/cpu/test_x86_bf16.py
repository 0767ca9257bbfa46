"""x86 with AVX-512 BF16: bf16 x bf16 -> f32 GEMMs tensorized onto VDPBF16PS, run natively and
compared bit for bit with a reference that adds the products in the instruction's stated
order (its ``accumulation``), and with float64 within the stated bound."""

import ml_dtypes
import numpy as np
import pytest

from intrinsics.oracle import hardware_gemm
from targets import cpu
from tensorize.engine import auto_tensorize
from tests.tensorize.schedule.kernels import bf16_inputs, gemm_bf16
from tests.targets.cpu.conftest import run_here, u8s8_gemm

BF16 = ml_dtypes.bfloat16


@pytest.mark.parametrize("shape", [(32, 32, 32), (15, 16, 17), (17, 33, 65), (1, 16, 2),
                                   (33, 15, 16)])
def test_bf16_gemm_equals_the_hardware_order_bit_for_bit(shape, registry) -> None:
    m, n, k = shape
    result = auto_tensorize(gemm_bf16(m, n, k), "x86", registry=registry)
    assert [b.intrinsic for b in result.tensorized] == ["x86_vdpbf16ps"]
    kernel = cpu.emit(result.func, "x86", registry=registry)
    inputs = bf16_inputs(m, n, k)
    run = run_here(kernel, inputs)
    rule = registry.get("x86_vdpbf16ps").accumulation
    got = run.outputs["C"]
    want = hardware_gemm(inputs["A"], inputs["B"], 2, rule)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    # Against float64: the recursive-sum bound of the accumulation's k additions.
    a64, b64 = (x.astype(np.float64) for x in (inputs["A"], inputs["B"]))
    unit = float(np.finfo(np.float32).eps) / 2
    bound = k * unit / (1 - k * unit) * (np.abs(a64) @ np.abs(b64)) + \
        (k + 1) * float(np.finfo(np.float32).smallest_normal)
    assert np.all(np.abs(got - a64 @ b64) <= bound)


def test_the_reference_order_matters(registry) -> None:
    """The exact check has teeth: adding each pair's products in the other order gives
    another result on these inputs, which the native run does not equal."""
    m, n, k = 16, 16, 64
    result = auto_tensorize(gemm_bf16(m, n, k), "x86", registry=registry)
    inputs = bf16_inputs(m, n, k, seed=3)
    run = run_here(cpu.emit(result.func, "x86", registry=registry), inputs)
    rule = registry.get("x86_vdpbf16ps").accumulation
    other = type(rule)("ascending", rule.rounding, rule.denormals)
    swapped = hardware_gemm(inputs["A"], inputs["B"], 2, other)
    assert not np.array_equal(run.outputs["C"], swapped)


def test_the_kernel_calls_vdpbf16ps_on_zmm_registers(registry) -> None:
    result = auto_tensorize(gemm_bf16(64, 64, 64), "x86", registry=registry)
    asm = cpu.compile(cpu.emit(result.func, "x86", registry=registry), "asm")
    dots = [line.strip() for line in asm.splitlines() if line.strip().startswith("vdpbf16ps")]
    assert dots and all("%zmm" in line for line in dots)


def test_each_kernel_needs_only_the_features_of_the_instructions_it_calls(registry) -> None:
    """An int8 GEMM still runs on a host without avx512bf16 (Ice Lake), a bf16 one on a host
    without avx512vnni; both keep the target's base features."""
    bf16 = auto_tensorize(gemm_bf16(32, 32, 32), "x86", registry=registry).func
    int8 = auto_tensorize(u8s8_gemm(32, 32, 32), "x86", registry=registry).func
    bf16_features = cpu.emit(bf16, "x86", registry=registry).features.split(",")
    int8_features = cpu.emit(int8, "x86", registry=registry).features.split(",")
    assert "+avx512bf16" in bf16_features and "+avx512vnni" not in bf16_features
    assert "+avx512vnni" in int8_features and "+avx512bf16" not in int8_features
    assert {"+avx512f", "+avx512bw"} <= set(bf16_features) & set(int8_features)
