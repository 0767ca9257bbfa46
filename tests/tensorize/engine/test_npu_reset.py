"""A reduction that fits one NPU tile (K <= 16 after padding) runs on the NPU through the
resetting GEMM (``npu_gemm_reset``): the accumulating one cannot start a tile whose init stays
inside it. Deeper reductions reset on the first step and accumulate on the others."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from intrinsics import default_registry, lowerer
from ir import te
from simulator import load_machine
from targets import host, npu
from tensorize.engine import auto_tensorize

RNG = np.random.default_rng(11)
T = 16  # the built-in NPU's array size: one GEMM call is T x T x T
MACHINE = load_machine()  # the built-in NPU


def int8(*shape: int) -> np.ndarray:
    return RNG.integers(-128, 128, shape).astype(np.int8)


def _i32(expr: ir.Expr) -> ir.Expr:
    return ir.cast("int32", expr)


def gemm(m: int, n: int, k: int) -> ir.PrimFunc:
    A = te.placeholder((m, k), "int8", "A")
    B = te.placeholder((k, n), "int8", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(_i32(A[i, rk]) * _i32(B[rk, j]), axis=rk), "C")
    return te.create_prim_func([A, B, C], "gemm")


def conv1x1(size: int, channels: int, out_channels: int) -> ir.PrimFunc:
    I = te.placeholder((1, size, size, channels), "int8", "I")
    W = te.placeholder((channels, out_channels), "int8", "W")
    rc = te.reduce_axis(channels, "rc")
    O = te.compute((1, size, size, out_channels), lambda n, h, w, co: te.sum(
        _i32(I[n, h, w, rc]) * _i32(W[rc, co]), axis=rc), "O")
    return te.create_prim_func([I, W, O], "conv1x1")


def tensorize_and_run(func: ir.PrimFunc, inputs: dict[str, np.ndarray], output: str,
                      expected: np.ndarray) -> dict[str, int]:
    """Tensorize for the NPU, check the tensorized IR on the host and the simulator's result,
    both exactly against ``expected``; returns the executed intrinsic calls. The block is
    reported with the GEMM its tile calls: the resetting one alone when the reduction is one
    tile deep."""
    result = auto_tensorize(func, "npu", registry=default_registry(), config=MACHINE)
    one_tile = all(e <= T for e in result.blocks[0].extents[2:])
    reported = "npu_gemm_reset" if one_tile else "npu_gemm"
    assert [(b.block, b.intrinsic, b.reason) for b in result.blocks] == [
        (output, reported, "")]
    validated = host.run(result.func, inputs, lowerer(default_registry().get))
    np.testing.assert_array_equal(validated[output], expected)
    run = npu.run(result.func, inputs, MACHINE, lookup=default_registry().get)
    # Padding K to the tile depth is a packing stage on the host; the GEMM runs on the NPU.
    assert any(stage.on_npu for stage in run.stages)
    np.testing.assert_array_equal(run.outputs[output], expected)
    return run.calls


def gemm_calls(rows: int, cols: int, k: int) -> dict[str, int]:
    """Each T x T output tile resets on its first T-deep step and accumulates on the rest."""
    tiles = (rows // T) * (cols // T)
    steps = -(-k // T)
    calls = {"npu_gemm_reset": tiles}
    if steps > 1:
        calls["npu_gemm"] = tiles * (steps - 1)
    return calls


def gemm_part(calls: dict[str, int]) -> dict[str, int]:
    return {name: n for name, n in calls.items() if name.startswith("npu_gemm")}


@pytest.mark.parametrize("k", [8, 16, 17, 32])
def test_gemm_of_any_depth_runs_on_the_npu(k):
    A, B = int8(64, k), int8(k, 64)
    calls = tensorize_and_run(gemm(64, 64, k), {"A": A, "B": B}, "C",
                              A.astype(np.int32) @ B.astype(np.int32))
    assert gemm_part(calls) == gemm_calls(64, 64, k)


@pytest.mark.parametrize("channels", [8, 16, 17, 32])
def test_pointwise_conv_of_any_depth_runs_on_the_npu(channels):
    I, W = int8(1, 8, 8, channels), int8(channels, 16)
    expected = (I.reshape(64, channels).astype(np.int32) @ W.astype(np.int32)).reshape(
        1, 8, 8, 16)
    calls = tensorize_and_run(conv1x1(8, channels, 16), {"I": I, "W": W}, "O", expected)
    assert gemm_part(calls) == gemm_calls(64, 16, channels)
