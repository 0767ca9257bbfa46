"""A plan retargeted to a kernel of its family (targets.npu.retarget: the same GEMM and
epilogue with other quantisation constants) is the plan that kernel compiles to, word for
word, and runs exactly; a plan whose instructions hold other immediates is not
retargeted."""

from __future__ import annotations

import numpy as np
import pytest

from intrinsics import default_registry
from ir.onnx import kernels
from simulator import load_machine
from targets import host, npu
from tensorize.engine import auto_tensorize

REGISTRY = default_registry()
CONFIG = load_machine()


def planned(func):
    result = auto_tensorize(func, "npu", registry=REGISTRY, config=CONFIG)
    return npu.plan(result.func, CONFIG, lookup=REGISTRY.get)


def programs(plan):
    return [s.compiled.program for s in plan.stages if s.compiled is not None]


def inputs_of(func, seed):
    rng = np.random.default_rng(seed)
    arrays = {p.name: rng.integers(-128, 128, p.shape, dtype=np.int8) for p in func.params
              if p.dtype.bits == 8 and p is not func.params[-1]}
    arrays["Bias"] = rng.integers(-4000, 4000, (func.params[2].shape), dtype=np.int32)
    arrays["Scale"] = rng.uniform(1e-4, 1e-2, func.params[3].shape).astype(np.float32)
    if "AddParams" in {p.name for p in func.params}:
        arrays["AddParams"] = kernels.qadd_parameters(0.05, 3, 0.04, -2, 0.06, 5, 32)
    return arrays


def expected(func, arrays):
    args = [arrays[p.name] for p in func.params[:-1]] + [np.zeros(func.params[-1].shape,
                                                                  np.int8)]
    return host.run(func, args)[func.params[-1].name]


@pytest.mark.parametrize("build", [
    lambda q: kernels.matmul_requantised(64, 48, 32, q),
    lambda q: kernels.matmul_requantised_add(64, 48, 32, q, kernels.ResidualAdd(q.zero_point,
                                                                                 relu=True)),
], ids=["gemm", "joined add"])
def test_a_retargeted_plan_is_the_plan_of_the_other_kernel(build):
    first = kernels.Requantisation(-7)
    other = kernels.Requantisation(12, low=12, high=127)  # a ReLU fused
    plan_first, plan_other = planned(build(first)), planned(build(other))
    requant = ((-7, -128, 127), (12, 12, 127))
    qadd = ()
    if "AddParams" in {p.name for p in build(first).params}:
        qadd = (kernels.ResidualAdd(-7, relu=True).bounds,
                kernels.ResidualAdd(12, relu=True).bounds)
    retargeted = npu.retarget(plan_first, build(other), requant, qadd)
    assert retargeted is not None
    assert programs(retargeted) == programs(plan_other)
    arrays = inputs_of(build(other), 3)
    out = npu.execute(retargeted, arrays).outputs[build(other).params[-1].name]
    np.testing.assert_array_equal(out, expected(build(other), arrays))


def test_immediates_other_than_the_old_ones_are_not_retargeted():
    func = kernels.matmul_requantised(64, 48, 32, kernels.Requantisation(-7))
    plan = planned(func)
    assert npu.retarget(plan, func, ((0, -128, 127), (1, -128, 127))) is None
    other_shape = kernels.matmul_requantised(64, 48, 48, kernels.Requantisation(1))
    assert npu.retarget(plan, other_shape, ((-7, -128, 127), (1, -128, 127))) is None
