"""Epilogues on the NPU: elementwise blocks after the GEMM run on the accumulator tile."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from intrinsics import default_registry
from ir import script as T
from simulator import load_machine
from targets import host, npu
from tensorize.engine import auto_tensorize
from tests.tensorize.engine.suite import suite
from tests.tensorize.schedule.kernels import random_inputs

MACHINE = load_machine()  # the built-in NPU
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "script" / "gemm_bias_relu_int8.py"


def run_both(func):
    result = auto_tensorize(func, "npu", registry=default_registry(), config=MACHINE)
    inputs = random_inputs(func, 5)
    want = host.run(func, inputs)
    run = npu.run(result.func, {p.name: a for p, a in zip(func.params, inputs)},
                  MACHINE, lookup=default_registry().get)
    for name, expected in want.items():
        np.testing.assert_array_equal(run.outputs[name], expected, err_msg=name)
    return result, run


def test_bias_relu_and_narrowing_run_in_one_npu_program():
    func = T.load_file(EXAMPLE)["gemm_bias_relu_int8"]
    result, run = run_both(func)
    used = {b.block: b.intrinsic for b in result.blocks}
    assert used == {"acc": "npu_gemm", "biased": "npu_vec_add_bcast", "relu": "npu_vec_relu",
                    "out": "npu_store_acc_i8"}
    assert [s.on_npu for s in run.stages] == [True]
    assert run.calls["npu_vec_relu"] == (128 // 16) * (64 // 16)


def test_an_epilogue_no_instruction_computes_stays_on_the_host():
    # The kernel's requantisation rounds half up; vec.mulshift rounds half away from zero.
    result, run = run_both(suite()["matmul_requant_int8"])
    used = {b.block: b.intrinsic for b in result.blocks}
    assert used["biased"] == "npu_vec_add_bcast" and used["scaled"] is None
    assert [s.on_npu for s in run.stages] == [True, False, False]
