"""A CPU kernel's epilogue in one pass (tensorize.engine.cpu_epilogue): the bias add and the
requantisation are inlined into the narrowing after the GEMM, the blocks reported folded,
and the kernel still equals the host reference on random inputs, exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ir.onnx import kernels
from targets import cpu, host
from tensorize.engine import auto_tensorize
from tensorize.schedule import tree


@pytest.mark.parametrize("target", ["x86", "arm"])
def test_the_requantising_epilogue_is_one_block_and_exact(registry, target):
    m, k, n = 24, 32, 48
    func = kernels.matmul_requantised(m, k, n, kernels.Requantisation(zero_point=-7))
    result = auto_tensorize(func, target, registry=registry)
    names = tree.block_names(result.func)
    assert "biased" not in names and "requantised" not in names and "narrowed" in names
    outcomes = {o.block: o for o in result.blocks}
    assert outcomes["biased"].folded and outcomes["requantised"].folded
    assert not outcomes["narrowed"].folded
    kernel = cpu.emit(result.func, target, registry=registry)
    if cpu.engine_for(kernel)[0] is None:
        pytest.skip(f"no engine here runs {target} code")
    rng = np.random.default_rng(4)
    inputs = {"A": rng.integers(-128, 128, (m, k), dtype=np.int8),
              "B": rng.integers(-128, 128, (k, n), dtype=np.int8),
              "Bias": rng.integers(-4000, 4000, n, dtype=np.int32),
              "Scale": rng.uniform(1e-3, 4e-3, n).astype(np.float32)}
    got = cpu.run(kernel, inputs).outputs["narrowed"]
    want = host.run(func, inputs)["narrowed"]
    np.testing.assert_array_equal(got, want)
    assert {-128, 127} <= set(np.unique(got).tolist())  # saturation was exercised


@pytest.mark.parametrize("target, placement", [("x86", "tile"), ("arm", "pass")])
def test_the_epilogue_runs_where_the_target_places_it(registry, target, placement):
    # x86 describes `epilogue: tile`: the pass moves into the GEMM's tile loop and the
    # int32 result is held a tile at a time; arm keeps one pass over the whole result.
    m, k, n = 28, 32, 48
    assert registry.cpu(target).epilogue == placement
    func = kernels.matmul_requantised(m, k, n, kernels.Requantisation(zero_point=3))
    result = auto_tensorize(func, target, registry=registry)
    (sums,) = [b for b in result.func.allocs if b.name == "matmul"]
    epilogue = tree.find_block(result.func, "narrowed")
    loops = tree.enclosing_loops(epilogue.path)
    if placement == "tile":
        assert math.prod(sums.shape) < m * n and len(loops) > 2
    else:
        assert sums.shape == (m, n) and len(loops) == 2
    kernel = cpu.emit(result.func, target, registry=registry)
    if cpu.engine_for(kernel)[0] is None:
        pytest.skip(f"no engine here runs {target} code")
    rng = np.random.default_rng(5)
    inputs = {"A": rng.integers(-128, 128, (m, k), dtype=np.int8),
              "B": rng.integers(-128, 128, (k, n), dtype=np.int8),
              "Bias": rng.integers(-4000, 4000, n, dtype=np.int32),
              "Scale": rng.uniform(1e-3, 4e-3, n).astype(np.float32)}
    np.testing.assert_array_equal(cpu.run(kernel, inputs).outputs["narrowed"],
                                  host.run(func, inputs)["narrowed"])
