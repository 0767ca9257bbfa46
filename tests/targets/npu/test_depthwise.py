"""Depthwise convolution on the NPU: with the GEMM named, the tensorizer writes the layer as
grouped GEMMs with diagonal weight tiles and the simulator computes it exactly; by default
it stays on the host, which is faster end to end (docs/npu_backend.md)."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from intrinsics import default_registry, lowerer
from ir import structural_equal, te
from simulator import Gemm
from targets import host, npu
from tensorize.engine import auto_tensorize, count_calls
from tensorize.schedule import Schedule
from tests.targets.npu.machines import Npu
from tests.tensorize.engine.suite import suite


def depthwise(size: int, channels: int) -> ir.PrimFunc:
    """3x3 depthwise convolution, NHWC, stride 1, the input given padded."""
    I = te.placeholder((1, size + 2, size + 2, channels), "int8", "I")
    W = te.placeholder((3, 3, channels), "int8", "W")
    rh, rw = te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw")
    O = te.compute((1, size, size, channels), lambda n, h, w, c: te.sum(
        ir.cast("int32", I[n, h + rh, w + rw, c]) * ir.cast("int32", W[rh, rw, c]),
        axis=[rh, rw]), "O")
    return te.create_prim_func([I, W, O], "depthwise")


def reference(I: np.ndarray, W: np.ndarray) -> np.ndarray:
    size = I.shape[1] - 2
    return sum(I[:, a:a + size, b:b + size, :].astype(np.int64) * W[a, b].astype(np.int64)
               for a in range(3) for b in range(3)).astype(np.int32)


def inputs(size: int, channels: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    I = rng.integers(-128, 128, (1, size + 2, size + 2, channels)).astype(np.int8)
    W = rng.integers(-128, 128, (3, 3, channels)).astype(np.int8)
    I[0, 0, :, 0], W[:, :, 0] = -128, -128
    return {"I": I, "W": W}


@pytest.mark.parametrize(("size", "channels"), [
    (4, 16), (5, 32), pytest.param(15, 48, marks=pytest.mark.slow), (17, 16)])
def test_depthwise_runs_on_the_npu_exactly(size, channels, registry, machine):
    func = depthwise(size, channels)
    given = inputs(size, channels, size * channels)
    want = reference(given["I"], given["W"])
    np.testing.assert_array_equal(host.run(func, given)["O"], want)
    result = auto_tensorize(func, "npu", intrinsic="npu_gemm", registry=registry,
                            config=machine)
    assert [(b.block, b.intrinsic) for b in result.blocks] == [("O", "npu_gemm")]
    calls = count_calls(result.func)
    rows = result.blocks[0].extents[0]  # the output pixels, padded to the row tile
    assert rows >= size * size and rows % 16 == 0
    tiles = rows // 16 * (channels // 16) * 9
    assert calls["npu_gemm"] + calls["npu_gemm_reset"] == tiles
    validated = host.run(result.func, given, lowerer(default_registry().get))
    np.testing.assert_array_equal(validated["O"], want)
    run = npu.run(result.func, given, machine, lookup=registry.get)
    np.testing.assert_array_equal(run.outputs["O"], want)
    program = [i for s in run.stages if s.compiled for i in s.compiled.program]
    assert any(isinstance(i, Gemm) for i in program)


def test_the_suite_depthwise_kernel_runs_on_the_npu_with_the_gemm_named(registry, machine):
    func = suite()["depthwise_conv2d_int8"]
    result = auto_tensorize(func, "npu", intrinsic="npu_gemm", registry=registry,
                            config=machine)
    assert [b.intrinsic for b in result.tensorized] == ["npu_gemm"]
    padded = inputs(8, 16, 1)
    given = {"I": padded["I"][:, 1:9, 1:9, :].copy(), "W": padded["W"]}
    want = host.run(func, given)["conv"]
    run = npu.run(result.func, given, machine, lookup=registry.get)
    np.testing.assert_array_equal(run.outputs["conv"], want)


def test_the_trace_replays_the_rewrite(registry, machine):
    func = depthwise(5, 32)
    result = auto_tensorize(func, "npu", intrinsic="npu_gemm", registry=registry,
                            config=machine)
    trace = result.schedule.replay_trace()
    assert "sch.diagonalize(" in trace
    assert structural_equal(Schedule.replay(func, trace, registry).func, result.func)


def test_by_default_depthwise_stays_on_the_host_with_the_reason(registry, machine):
    func = depthwise(4, 16)
    result = auto_tensorize(func, "npu", registry=registry, config=machine)
    assert not result.tensorized
    assert "no spatial iterator of block O indexes exactly W, O" in result.blocks[0].reason
    assert result.func is func


def test_channels_the_gemm_width_does_not_divide_stay_on_the_host(registry, machine):
    func = depthwise(4, 24)
    result = auto_tensorize(func, "npu", intrinsic="npu_gemm", registry=registry,
                            config=machine)
    assert not result.tensorized
    assert result.func is func


@pytest.mark.slow  # in CI's slow pass, for the default run's time
def test_a_machine_from_yaml_uses_its_own_gemm_width(tmp_path):
    machine = Npu("npu8x32", 8, 32, i=8, k=8, banks=4)
    path = machine.write(tmp_path)
    config, registry = npu.load_machine(path), npu.machine_registry(path)
    func = depthwise(5, 64)
    given = inputs(5, 64, 7)
    result = auto_tensorize(func, "npu", registry=registry, config=config,
                            intrinsic="npu8x32_gemm")
    assert [b.intrinsic for b in result.tensorized] == ["npu8x32_gemm"]
    run = npu.run(result.func, given, config, lookup=registry.get)
    np.testing.assert_array_equal(run.outputs["O"], reference(given["I"], given["W"]))
