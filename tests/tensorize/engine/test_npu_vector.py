"""Kernels of elementwise blocks alone on the NPU's vector unit (``npu_vector``): each block
on a vector intrinsic, the program exact against the host reference, every element moved
across DRAM once, and a refusal (with the block and the reason) for what the unit cannot do."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
from ir import te
from ir.onnx import kernels
from ir.onnx.host_ops import qlinear_add
from ir.onnx.quant import QParams
from targets import host
from tensorize.engine import auto_tensorize
from tensorize.runners.npu import simulate_and_measure


def _bias_relu(m: int, n: int):
    X = te.placeholder((m, n), "int32", "X")
    bias = te.placeholder((n,), "int32", "Bias")
    biased = te.compute((m, n), lambda i, j: X[i, j] + bias[j], "biased")
    out = te.compute((m, n), lambda i, j: ir.max_(biased[i, j], 0), "relu")
    return te.create_prim_func([X, bias, out], "bias_relu")


def _run(func, inputs, registry, machine):
    result = auto_tensorize(func, "npu", registry=registry, config=machine)
    measure = simulate_and_measure(result.func, inputs, machine, registry)
    return result, measure


def test_bias_relu_runs_on_the_vector_unit_exactly(registry, machine):
    m, n = 64, 96
    rng = np.random.default_rng(1)
    inputs = {"X": rng.integers(-1000, 1000, (m, n), dtype=np.int32),
              "Bias": rng.integers(-1000, 1000, n, dtype=np.int32)}
    result, measure = _run(_bias_relu(m, n), inputs, registry, machine)
    assert [(b.block, b.intrinsic) for b in result.blocks] == [
        ("biased", "npu_vec_add_bcast"), ("relu", "npu_vec_relu")]
    assert measure.host_stages == [] and measure.cycles > 0
    assert np.array_equal(measure.run.outputs["relu"],
                          np.maximum(inputs["X"] + inputs["Bias"], 0))
    # X read once and the result written once; the bias row once per row tile at most.
    tensor = m * n * 4
    assert 2 * tensor < measure.dram_bytes <= 2 * tensor + (m // 16) * n * 4


def test_requantisation_alone_matches_the_host_bit_for_bit(registry, machine):
    m, n = 48, 64
    q = kernels.Requantisation(zero_point=-3)
    rng = np.random.default_rng(2)
    x = rng.integers(-200_000, 200_000, (m, n), dtype=np.int32)
    x[0, :8] = [1, 3, 5, 7, -1, -3, -5, -7]  # with scale 0.5 below: ties to even
    scale = rng.uniform(1e-4, 2e-3, n).astype(np.float32)
    scale[:8] = 0.5
    inputs = {"X": x, "Bias": rng.integers(-5000, 5000, n, dtype=np.int32), "Scale": scale}
    func = kernels.requantised(m, n, q)
    result, measure = _run(func, inputs, registry, machine)
    assert all(b.intrinsic is not None for b in result.blocks)
    assert "npu_vec_requant_row" in {b.intrinsic for b in result.blocks}
    out = measure.run.outputs["narrowed"]
    assert np.array_equal(out, host.run(func, inputs)["narrowed"])
    assert {-128, 127} <= set(np.unique(out).tolist())  # saturation was exercised


def test_a_grouped_requantisation_takes_each_group_row(registry, machine):
    # Groups outer, (rows, columns) inner: the bias and scale rows are read by the group
    # and the column, as a depthwise layer's grouped GEMMs leave them.
    groups, m, n = 3, 32, 16
    q = kernels.Requantisation(zero_point=5)
    rng = np.random.default_rng(3)
    inputs = {"X": rng.integers(-50_000, 50_000, (groups, m, n), dtype=np.int32),
              "Bias": rng.integers(-5000, 5000, (groups, n), dtype=np.int32),
              "Scale": rng.uniform(1e-4, 2e-3, (groups, n)).astype(np.float32)}
    func = kernels.grouped_requantised(groups, m, n, q)
    result, measure = _run(func, inputs, registry, machine)
    assert all(b.intrinsic is not None for b in result.blocks) and measure.host_stages == []
    biased = inputs["X"] + inputs["Bias"][:, None, :]
    scaled = biased.astype(np.float32) * inputs["Scale"][:, None, :]
    want = np.clip(np.rint(scaled).astype(np.int64) + 5, -128, 127).astype(np.int8)
    assert np.array_equal(measure.run.outputs["narrowed"], want)


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 4), cols=st.integers(1, 5), shift=st.integers(-50, 50),
       low=st.integers(-20, 0), seed=st.integers(0, 2**16))
def test_chains_of_vector_operations_match_numpy(registry, machine, rows, cols, shift, low,
                                                  seed):
    m, n = 16 * rows, 16 * cols
    X = te.placeholder((m, n), "int32", "X")
    shifted = te.compute((m, n), lambda i, j: X[i, j] + shift, "shifted")
    floored = te.compute((m, n), lambda i, j: ir.max_(shifted[i, j], low), "floored")
    func = te.create_prim_func([X, floored], "chain")
    x = np.random.default_rng(seed).integers(-100, 100, (m, n), dtype=np.int32)
    result, measure = _run(func, {"X": x}, registry, machine)
    assert all(b.intrinsic is not None for b in result.blocks)
    assert np.array_equal(measure.run.outputs["floored"], np.maximum(x + shift, low))


def test_a_block_no_vector_instruction_computes_is_refused_with_its_name(registry, machine):
    X = te.placeholder((32, 32), "int32", "X")
    squared = te.compute((32, 32), lambda i, j: X[i, j] * X[i, j], "squared")
    func = te.create_prim_func([X, squared], "square")
    result = auto_tensorize(func, "npu", registry=registry, config=machine)
    (outcome,) = result.blocks
    assert outcome.intrinsic is None
    assert "as a vector kernel" in outcome.reason and "'squared'" in outcome.reason
    assert result.func is func or ir.structural_equal(result.func, func)


def test_a_kernel_of_partial_tiles_is_refused_for_the_caller_to_pad(registry, machine):
    result = auto_tensorize(_bias_relu(40, 32), "npu", registry=registry, config=machine)
    assert all(b.intrinsic is None for b in result.blocks)
    assert "not whole 16 x 16 tiles" in result.blocks[0].reason


def test_a_quantised_add_alone_matches_onnxruntimes_formula(registry, machine):
    # host_ops.qlinear_add is checked against onnxruntime's QLinearAdd
    # (tests/ir/onnx/test_quant.py): the NPU's program must give its integers.
    m, n = 32, 48
    aq, bq, yq = (QParams(np.float32(s), np.int8(z)) for s, z in
                  ((0.0157, -3), (0.0211, 7), (0.0309, -128)))
    rng = np.random.default_rng(4)
    a = rng.integers(-128, 128, (m, n), dtype=np.int8)
    b = rng.integers(-128, 128, (m, n), dtype=np.int8)
    params = kernels.qadd_parameters(aq.scale, -3, bq.scale, 7, yq.scale, -128, n)
    func = kernels.quantised_add(m, n, kernels.ResidualAdd(-128))
    result, measure = _run(func, {"A": a, "Skip": b, "AddParams": params}, registry, machine)
    assert [b.intrinsic for b in result.blocks] == [
        "npu_load_acc_i8_i32", "npu_vec_qadd", "npu_store_acc_i8"]
    assert np.array_equal(measure.run.outputs["narrowed"], qlinear_add(aq, bq, yq)([a, b]))
    # Two int8 tensors in, one out, and the three parameter rows once per column tile.
    assert 3 * m * n <= measure.dram_bytes <= 3 * m * n + 3 * n * 4 * (m // 16)


def test_the_max_of_int8_tiles_runs_on_the_vector_unit(registry, machine):
    m, n, count = 32, 64, 4
    rng = np.random.default_rng(5)
    tiles = {f"W{w}": rng.integers(-128, 128, (m, n), dtype=np.int8) for w in range(count)}
    result, measure = _run(kernels.max_of_tiles(m, n, count), tiles, registry, machine)
    assert [b.intrinsic for b in result.blocks] == [
        "npu_load_acc_i8_i32", *["npu_vec_max_i8"] * (count - 1), "npu_store_acc_i8"]
    assert np.array_equal(measure.run.outputs["narrowed"], np.max(list(tiles.values()), axis=0))
    assert measure.dram_bytes == (count + 1) * m * n  # int8 in, int8 out, each once
