"""targets.cuda.pipeline: the multi-stage reduction loop, as IR run by the host executor."""

from __future__ import annotations

import numpy as np
import pytest

import intrinsics
from intrinsics import default_registry
from ir.verify import verify
from targets import host
from targets.cuda.pipeline import software_pipeline
from tests.default_run import first_by_default
from tests.targets.cuda.helpers import random_inputs, tensorized
from tests.tensorize.engine.suite import suite


# Each kernel at the default 3 stages (capped by its k steps), and one at 2 and 4.
@pytest.mark.parametrize(("name", "stages"), first_by_default([
    ("gemm_fp16", 3), ("gemm_int8_odd", 3), ("conv2d_nhwc_int8", 3), ("matmul_requant_int8", 3),
    ("matmul_requant_int8", 2), ("matmul_requant_int8", 4)], 3))
def test_pipelined_function_computes_what_the_loop_did(name, stages):
    pipelined = software_pipeline(tensorized(name), stages)
    verify(pipelined.func)
    assert len(pipelined.loops) == 1
    # Each staged buffer gains a leading dimension of the stages, at most the loop's steps;
    # the prologue commits one group per stage but the last.
    (count,) = pipelined.stages.values()
    assert 2 <= count <= stages
    assert all(new.shape == (count, *old.shape) for new, old in pipelined.staged.items())
    assert len(pipelined.commits) == count - 1
    inputs = random_inputs(suite()[name], seed=7)
    expected = host.run(suite()[name], inputs)
    actual = host.run(pipelined.func, inputs, intrinsics.lowerer(default_registry().get))
    for key, value in expected.items():
        if value.dtype.kind == "f":
            np.testing.assert_allclose(actual[key], value, rtol=1e-3, atol=1e-3)
        else:
            np.testing.assert_array_equal(actual[key], value)


def test_a_single_step_loop_is_left_alone():
    # 32 x 32 x 32 fp16: one 32-deep stage, nothing to prefetch.
    func = tensorized("matmul_relu_fp16")
    assert software_pipeline(func).func is func


def test_fewer_than_two_stages_are_refused():
    with pytest.raises(ValueError, match="software_pipeline: argument 'stages': expected an "
                                         "int of at least 2, got 1"):
        software_pipeline(tensorized("gemm_fp16"), 1)
