"""The validate step's host runs go on beside the runner's own work (tensorize/validate.py,
``HostRuns``; tensorize/runners/runner.py): they give the outputs ``host.run`` gives, a
tensorized function that computes something else fails the step, what a run raises is raised
where the outputs are wanted, and the report keeps its order (validate, then the NPU's
simulate and check), also when the simulation faults."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from intrinsics import lowerer
from ir import SimulatorFault, te
from targets import host
from tensorize.engine import auto_tensorize
from tensorize.runners import RunOptions, make_context, run_kernel
from tensorize.runners.report import RunReport
from tensorize.runners.runner import NpuRunner, validate
from tensorize.validate import HostRuns, random_array
from tests.tensorize.schedule.kernels import gemm_int8


def _inputs(func, seed: int = 3) -> dict[str, np.ndarray]:
    """Random values over each parameter's whole range (the outputs start random too)."""
    rng = np.random.default_rng(seed)
    return {p.name: random_array(p.shape, p.dtype, rng) for p in func.params}


def test_host_runs_give_what_host_run_gives(registry):
    func = gemm_int8(33, 17, 31)
    tensorized = auto_tensorize(func, "npu", registry=registry,
                                config=make_context(registry, "npu").machine).func
    inputs = _inputs(func)
    lower = lowerer(registry.get)
    original, after = HostRuns(func, tensorized, inputs, lower).outputs()
    assert original.keys() == after.keys() == {"C"}
    assert np.array_equal(original["C"], host.run(func, inputs)["C"])
    assert np.array_equal(after["C"], host.run(tensorized, inputs, lower)["C"])
    product = inputs["A"].astype(np.int64) @ inputs["B"].astype(np.int64)
    assert np.array_equal(after["C"], product.astype(np.int32))


def _gemm_transposed_b(n: int) -> ir.PrimFunc:
    """C = A @ B.T on n x n int8 operands: gemm_int8's parameters, another product."""
    A = te.placeholder((n, n), "int8", "A")
    B = te.placeholder((n, n), "int8", "B")
    rk = te.reduce_axis(n, "k")
    C = te.compute((n, n), lambda i, j: te.sum(
        ir.cast("int32", A[i, rk]) * ir.cast("int32", B[j, rk]), axis=[rk]), "C")
    return te.create_prim_func([A, B, C], "gemm_transposed_b")


def test_a_tensorized_function_computing_something_else_fails_validate(registry):
    func, other = gemm_int8(16, 16, 16), _gemm_transposed_b(16)
    runs = HostRuns(func, other, _inputs(func), lowerer(registry.get))
    report = RunReport()
    validate(func, runs, report)
    [step] = report.steps
    assert step.name == "validate" and step.status == "FAIL"
    assert "elements differ" in step.detail


def test_what_a_host_run_raises_is_raised_by_outputs(registry, monkeypatch):
    func = gemm_int8(16, 16, 16)

    class Broken:
        written = ()

        def __call__(self, *arrays):
            raise RuntimeError("host run broke")

    monkeypatch.setattr(host, "compile", lambda *args: Broken())
    runs = HostRuns(func, func, _inputs(func), lowerer(registry.get))
    with pytest.raises(RuntimeError, match="host run broke"):
        runs.outputs()


def _names(report: RunReport) -> list[str]:
    """The report's step names, each once, in order."""
    names: list[str] = []
    for step in report.steps:
        if step.name not in names:
            names.append(step.name)
    return names


def test_the_npu_run_reports_validate_before_its_simulation(registry):
    func = gemm_int8(33, 17, 31)
    inputs = _inputs(func)
    ctx = make_context(registry, "npu")
    outcome = run_kernel(ctx, func, inputs, RunOptions(require_tensorized=True))
    names = _names(outcome.report)
    assert names[names.index("validate"):names.index("check") + 1] == [
        "validate", "simulate", "units", "dram", "roofline", "check"]
    assert all(s.status == "ok" for s in outcome.report.steps)
    product = inputs["A"].astype(np.int64) @ inputs["B"].astype(np.int64)
    assert np.array_equal(outcome.outputs["C"], product.astype(np.int32))


def test_a_simulation_fault_comes_after_the_validate_lines(registry, monkeypatch):
    def fault(self, ctx, done, inputs):
        raise SimulatorFault("the simulation broke", index=0, unit="gemm")

    monkeypatch.setattr(NpuRunner, "prepare", fault)
    func = gemm_int8(16, 16, 16)
    report = RunReport()
    with pytest.raises(SimulatorFault, match="the simulation broke"):
        run_kernel(make_context(registry, "npu"), func, _inputs(func), RunOptions(), report)
    assert _names(report)[-1] == "validate"
    assert report.steps[-1].status == "ok"
