"""FMLAL on a batch-1 dense layer (Y = X @ W^T, X one row): the one-row register tile stages
one fp16 of X a k step, a stage with no loop for a load to tile, so the k loop is split into
steps and one load takes an iteration's values of X (4 with K = 64, 2 with K = 62; K = 63
is padded with a zero step to 64). Each kernel runs under unicorn and equals the
hardware-order reference bit for bit, as ``tensorize run`` checks it."""

import numpy as np
import pytest

import ir
from intrinsics.oracle import hardware_gemm
from ir import te
from targets import cpu
from tensorize.engine import auto_tensorize, count_calls
from tensorize.engine.count import count_calls_by_block
from tensorize.hardware_order import block_reference

FEATURES = "+neon,+dotprod,+fp16fml"


def dense_fp16(n: int, k: int) -> ir.PrimFunc:
    """Y = X @ W^T for one row of X (1 x k) and W stored [n, k], float32 sums."""
    X = te.placeholder((1, k), "float16", "X")
    W = te.placeholder((n, k), "float16", "W")
    rk = te.reduce_axis(k, "k")
    Y = te.compute((1, n), lambda i, j: te.sum(
        ir.cast("float32", X[i, rk]) * ir.cast("float32", W[j, rk]), axis=[rk]), "Y")
    return te.create_prim_func([X, W, Y], "dense_fp16")


@pytest.mark.parametrize("n, k, load, steps", [(64, 64, "arm_ld1_4_f16", 64),
                                               (20, 62, "arm_ld1_2_f16", 62),
                                               (33, 63, "arm_ld1_4_f16", 64)])
def test_a_one_row_dense_layer_runs_on_fmlal_exactly(n, k, load, steps, registry) -> None:
    func = dense_fp16(n, k)
    result = auto_tensorize(func, "arm", features=FEATURES, registry=registry)
    [outcome] = result.tensorized
    assert outcome.intrinsic == "arm_fmlal_lane"
    calls = count_calls(result.func)
    # One FMLAL per 4 columns (those the tile pads to included) and k step (the padded one
    # included); X's register stage loaded a k iteration's values at a time.
    assert calls["arm_fmlal_lane"] % steps == 0 and calls["arm_fmlal_lane"] // steps >= n / 4
    x_loads = {name for (block, name) in count_calls_by_block(result.func)
               if block.startswith("X_")}
    assert x_loads == {load}
    rng = np.random.default_rng(k)
    inputs = {"X": rng.standard_normal((1, k)).astype(np.float16),
              "W": rng.standard_normal((n, k)).astype(np.float16)}
    inputs["X"][0, :2] = (np.float16(6e-8), -0.0)  # a denormal and a negative zero
    run = cpu.run(cpu.emit(result.func, "arm", FEATURES, registry=registry), inputs)
    assert run.counted == {"fmlal": calls["arm_fmlal_lane"]}
    fmlal = registry.get("arm_fmlal_lane")
    want = hardware_gemm(inputs["X"], inputs["W"].T, 1, fmlal.accumulation)
    np.testing.assert_array_equal(run.outputs["Y"].view(np.uint32), want.view(np.uint32))
    # And as the run checks it: the same bits, within the float64 bound.
    _, order = block_reference(func, outcome, fmlal, inputs, registry)
    ok, detail = order.check(run.outputs["Y"])
    assert ok, detail
