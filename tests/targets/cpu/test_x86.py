"""x86 with AVX-512 VNNI: u8 x s8 GEMMs and convolutions tensorized onto VPDPBUSD, run natively
through LLVM's JIT and compared exactly with the reference executor."""

import numpy as np
import pytest

import ir
from intrinsics import default_registry
from ir import te
from targets import cpu, host
from tensorize.engine import auto_tensorize
from tests.targets.cpu.conftest import (
    gemm_inputs,
    kernel,
    run_here,
    s8u8_gemm,
    tensorized,
    u8s8_gemm,
)


def _conv_u8s8(height: int, width: int, channels: int, out_channels: int) -> ir.PrimFunc:
    """A 3x3 convolution, NHWC uint8 input (no padding), HWIO int8 weights, int32 out."""
    inp = te.placeholder((1, height, width, channels), "uint8", "I")
    wgt = te.placeholder((3, 3, channels, out_channels), "int8", "W")
    rh, rw, rc = te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw"), te.reduce_axis(channels, "rc")
    out = te.compute((1, height - 2, width - 2, out_channels), lambda n, h, w, co: te.sum(
        ir.cast("int32", inp[n, h + rh, w + rw, rc]) * ir.cast("int32", wgt[rh, rw, rc, co]),
        axis=[rh, rw, rc]), "conv")
    return te.create_prim_func([inp, wgt, out], "conv_u8s8")


def _k_loop(asm: str) -> list[str]:
    """The instructions of the basic block holding the most vpdpbusd (the k loop's body)."""
    blocks: list[list[str]] = [[]]
    for line in (raw.strip() for raw in asm.splitlines()):
        if line.startswith(".LBB") and line.endswith(":"):
            blocks.append([])
        elif line and not line.startswith((".", "#")):
            blocks[-1].append(line)
    return max(blocks, key=lambda b: sum(i.startswith("vpdpbusd") for i in b))


def test_the_description_is_read_from_the_yaml() -> None:
    x86 = default_registry().cpu("x86")
    assert (x86.triple, x86.vector_bytes, x86.registers, x86.alignment) == (
        "x86_64-unknown-linux-gnu", 64, 32, 64)
    assert x86.default_features.endswith("+avx512vnni")


def test_u8s8_gemm_uses_vpdpbusd_in_a_register_tile() -> None:
    assert tensorized("gemm_u8s8").tensorized[0].intrinsic == "x86_vpdpbusd"
    asm = cpu.compile(kernel("gemm_u8s8"), "asm")
    loop = _k_loop(asm)
    dots = [line for line in loop if line.startswith("vpdpbusd")]
    # An 8 x 2 tile of zmm accumulators (64 columns make 4 vectors; 8 x 4 does not fit the
    # registers): 16 accumulators, each once per k step, two k steps an iteration, and one
    # broadcast of a row of A per row and k step. The accumulators never touch memory.
    assert len(dots) == 2 * 16
    assert len({line.split()[-1] for line in dots}) == 16
    assert all("%zmm" in line for line in dots)
    assert sum(line.startswith("vpbroadcastd") for line in loop) == 2 * 8
    assert not any(line.startswith("vmovdqa64") and line.split(",")[-1].strip().startswith(
        ("(", "-")) for line in loop)


@pytest.mark.parametrize("shape", [(64, 64, 64), (15, 16, 17), (16, 31, 33), (17, 33, 65),
                                   (31, 17, 15), (33, 15, 16), (100, 37, 50), (1, 16, 4)])
def test_gemm_runs_natively_and_exactly(shape, registry) -> None:
    m, n, k = shape
    func = u8s8_gemm(m, n, k)
    result = auto_tensorize(func, "x86", registry=registry)
    assert [b.intrinsic for b in result.tensorized] == ["x86_vpdpbusd"]
    inputs = gemm_inputs(m, n, k)
    run = run_here(cpu.emit(result.func, "x86", registry=registry), inputs, runs=3)
    assert run.engine == "native" and len(run.seconds) == 3
    assert run.best <= run.median
    expected = inputs["A"].astype(np.int32) @ inputs["B"].astype(np.int32)
    np.testing.assert_array_equal(run.outputs["C"], expected)


def test_extreme_values_accumulate_exactly() -> None:
    inputs = {"A": np.full((64, 64), 255, np.uint8), "B": np.full((64, 64), -128, np.int8)}
    run = run_here(kernel("gemm_u8s8"), inputs)
    np.testing.assert_array_equal(run.outputs["C"], np.full((64, 64), 64 * 255 * -128))


def test_a_convolution_with_u8_activations_runs_exactly(registry) -> None:
    conv = _conv_u8s8(10, 10, 16, 32)
    result = auto_tensorize(conv, "x86", registry=registry)
    assert [b.intrinsic for b in result.tensorized] == ["x86_vpdpbusd"]
    rng = np.random.default_rng(1)
    inputs = {"I": rng.integers(0, 256, (1, 10, 10, 16), dtype=np.uint8),
              "W": rng.integers(-128, 128, (3, 3, 16, 32), dtype=np.int8)}
    run = run_here(cpu.emit(result.func, "x86", registry=registry), inputs)
    np.testing.assert_array_equal(run.outputs["conv"], host.run(conv, inputs)["conv"])


def test_s8u8_swaps_the_operands_onto_vpdpbusd_and_runs_exactly(registry) -> None:
    func = s8u8_gemm(33, 40, 20)
    result = auto_tensorize(func, "x86", registry=registry)
    (outcome,) = result.tensorized
    # The uint8 B is the broadcast operand, int8 A the packed panel: lanes run along m.
    assert outcome.intrinsic == "x86_vpdpbusd" and "A=B B=A" in outcome.mapping
    rng = np.random.default_rng(2)
    inputs = {"A": rng.integers(-128, 128, (33, 20), dtype=np.int8),
              "B": rng.integers(0, 256, (20, 40), dtype=np.uint8)}
    run = run_here(cpu.emit(result.func, "x86", registry=registry), inputs)
    expected = inputs["A"].astype(np.int32) @ inputs["B"].astype(np.int32)
    np.testing.assert_array_equal(run.outputs["C"], expected)


def test_s8s8_runs_through_the_declared_shift_of_a() -> None:
    # x86.yaml's A accepts int8 shifted by 128 (tests/targets/cpu/test_operand_shift.py).
    (outcome,) = tensorized("gemm_int8").tensorized
    assert outcome.intrinsic == "x86_vpdpbusd" and "A=A_shifted" in outcome.mapping


def test_a_feature_the_host_lacks_is_refused_before_running(registry) -> None:
    if cpu.engine_for(kernel("gemm_u8s8"))[0] is None:
        pytest.skip("the host lacks AVX-512 VNNI itself")
    features = default_registry().cpu("x86").default_features + ",+amx-int8"
    k = cpu.emit(tensorized("gemm_u8s8").func, "x86", features, registry=registry)
    engine, reason = cpu.engine_for(k)
    if engine is not None:
        pytest.skip("this host has AMX")
    assert reason == ("native: the host CPU lacks amx-int8 (found through llvm), which the "
                      "code is compiled for")
    with pytest.raises(cpu.CpuRunError, match="cannot run .* here: native: the host CPU "
                                              "lacks amx-int8"):
        cpu.run(k, {})
