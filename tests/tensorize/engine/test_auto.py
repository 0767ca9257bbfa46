"""auto_tensorize on the suite: every kernel whose dtypes an intrinsic of the target takes is
tensorized, and the result computes exactly what the kernel does."""

from __future__ import annotations

import numpy as np
import pytest

from intrinsics import default_registry, lowerer
from targets import host, npu
from tensorize.engine import auto_tensorize
from tensorize.schedule import Schedule
from tests.tensorize.engine.suite import suite
from tests.tensorize.schedule.kernels import gemm_int8, random_inputs

INT8 = ["gemm_int8", "gemm_int8_odd", "batch_matmul_int8", "dense_int8", "conv2d_nhwc_int8",
        "conv2d_nchw_int8", "conv2d_dilated_int8", "conv1d_int8", "conv1x1_int8",
        "matmul_requant_int8"]
# (target, kernel) pairs that must tensorize: int8 everywhere; fp16 on the tensor cores; the
# depthwise conv on ARM's dot product; the u8 x s8 GEMM on mma.sync (cuda). It needs i8mm on
# ARM (below).
EXPECTED = ([("npu", k) for k in INT8] + [("arm", k) for k in INT8]
            + [("cuda", k) for k in INT8]
            + [("arm", "depthwise_conv2d_int8"),
               ("cuda", "gemm_fp16"), ("cuda", "matmul_relu_fp16"), ("cuda", "gemm_u8s8")])
# Three kernels of each target run by default, the rest with -m slow (CI runs both): the
# default run stays within its time (test_npu_programs_match_the_reference_executor_exactly
# runs five more kernels on the NPU by default).
DEFAULT_KERNELS = {"gemm_int8", "conv2d_nhwc_int8", "matmul_requant_int8",
                   "depthwise_conv2d_int8", "gemm_fp16", "gemm_u8s8"}
EXPECTED_PARAMS = [pair if pair[1] in DEFAULT_KERNELS
                   else pytest.param(*pair, marks=pytest.mark.slow) for pair in EXPECTED]
NOT_TENSORIZED = [("npu", "gemm_fp16"), ("npu", "gemm_u8s8"),
                  ("arm", "gemm_u8s8"), ("npu", "depthwise_conv2d_int8")]


def assert_computes_the_same(original, tensorized, seed=0):
    inputs = random_inputs(original, seed)
    want = host.run(original, inputs)
    got = host.run(tensorized, inputs, lowerer(default_registry().get))
    for name, expected in want.items():
        if expected.dtype.kind in "iu":
            np.testing.assert_array_equal(got[name], expected, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], expected, rtol=2e-2, atol=2e-2, err_msg=name)


@pytest.mark.parametrize(("target", "name"), EXPECTED_PARAMS)
def test_suite_kernel_tensorizes_and_computes_the_same(target, name, registry, context):
    func = suite()[name]
    result = auto_tensorize(func, target, registry=registry, config=context(target).machine)
    done = result.tensorized
    assert done, [b.reason for b in result.blocks]
    for outcome in done:
        assert default_registry().get(outcome.intrinsic).target == target
    assert_computes_the_same(func, result.func)


def test_mixed_sign_gemm_uses_usmmla_when_the_features_have_i8mm(registry):
    func = suite()["gemm_u8s8"]
    result = auto_tensorize(func, "arm", features="+neon,+dotprod,+i8mm", registry=registry)
    assert [b.intrinsic for b in result.tensorized] == ["arm_usmmla"]
    assert_computes_the_same(func, result.func)


@pytest.mark.parametrize(("target", "name"), NOT_TENSORIZED)
def test_kernels_no_intrinsic_fits_are_reported_not_rewritten(target, name, registry, context):
    func = suite()[name]
    result = auto_tensorize(func, target, registry=registry, config=context(target).machine)
    assert not result.tensorized
    assert all(b.reason for b in result.blocks)
    assert result.func is func


@pytest.mark.parametrize("name", ["gemm_int8_odd", "dense_int8", "conv2d_nchw_int8",
                                  "batch_matmul_int8", "matmul_requant_int8", "add"])
def test_npu_programs_match_the_reference_executor_exactly(name, registry, machine):
    func = suite()[name]
    result = auto_tensorize(func, "npu", registry=registry, config=machine)
    inputs = random_inputs(func, 3)
    want = host.run(func, inputs)
    run = npu.run(result.func, {p.name: a for p, a in zip(func.params, inputs)},
                  machine, lookup=registry.get)
    for key, expected in want.items():
        np.testing.assert_array_equal(run.outputs[key], expected, err_msg=key)
    assert any(s.on_npu for s in run.stages)


def test_elementwise_kernel_runs_on_the_vector_unit(registry, machine):
    result = auto_tensorize(suite()["add"], "npu", registry=registry, config=machine)
    assert [b.intrinsic for b in result.blocks] == ["npu_vec_add"]
    # The GEMM was tried first and said why not.
    assert any("no match" in line for line in result.explain)


def test_dtype_mismatch_names_both_dtypes(registry, machine):
    result = auto_tensorize(suite()["gemm_fp16"], "npu", registry=registry, config=machine)
    assert result.blocks[0].reason == "C is float32, npu_gemm's C is int32"


def test_loop_order_does_not_matter(registry, machine):
    func = gemm_int8(48, 32, 64)
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(k, j, i)
    result = auto_tensorize(sch.func, "npu", registry=registry, config=machine)
    assert [b.intrinsic for b in result.blocks] == ["npu_gemm"]
    assert_computes_the_same(func, result.func)


def test_named_intrinsic_restricts_the_search(registry):
    result = auto_tensorize(suite()["gemm_int8"], "cuda", intrinsic="wmma_m32n8k16_s8_s32",
                            registry=registry)
    assert [b.intrinsic for b in result.tensorized] == ["wmma_m32n8k16_s8_s32"]


def test_trace_replays_the_rewrite(registry, machine):
    import ir

    func = suite()["conv2d_nhwc_int8"]
    result = auto_tensorize(func, "npu", registry=registry, config=machine)
    replayed = Schedule.replay(func, result.schedule.replay_trace(), registry)
    assert ir.structural_equal(replayed.func, result.func)


@pytest.mark.parametrize("config", [None, "intrinsics/npu.yaml"])
def test_the_npu_requires_the_machine_from_the_edge(config, registry):
    # No default machine below the edge: the caller passes the MachineConfig it loaded.
    with pytest.raises(TypeError, match="auto_tensorize requires config, the machine"):
        auto_tensorize(suite()["gemm_int8"], "npu", registry=registry, config=config)
