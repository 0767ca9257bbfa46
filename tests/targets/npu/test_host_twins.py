"""Host stages of equal plans share one function, so the host backend compiles it once."""

from __future__ import annotations

import numpy as np

import ir
from ir import te
from targets import host, npu
from tensorize.engine import auto_tensorize


def odd_gemm() -> ir.PrimFunc:
    """An int8 GEMM whose sizes the 16x16 tiles do not divide: packing and unpadding run on
    the host."""
    A = te.placeholder((33, 40), "int8", "A")
    B = te.placeholder((40, 17), "int8", "B")
    k = te.reduce_axis(40, "k")
    C = te.compute((33, 17), lambda i, j: te.sum(
        ir.cast("int32", A[i, k]) * ir.cast("int32", B[k, j]), axis=k), "C")
    return te.create_prim_func([A, B, C], "odd_gemm")


def test_a_second_plan_runs_the_first_plans_host_functions(registry, machine, monkeypatch):
    plans = [npu.plan(auto_tensorize(odd_gemm(), "npu", registry=registry,
                                     config=machine).func, machine, lookup=registry.get)
             for _ in range(2)]
    first, second = ([s for s in p.stages if s.host is not None] for p in plans)
    assert len(first) == len(second) >= 2
    for a, b in zip(first, second):
        assert b.host is not a.host and b.twin is a.twin
    compiled = []
    real_compile = host.compile

    def counting(func, lower=None):
        compiled.append(func)
        return real_compile(func, lower)

    monkeypatch.setattr(host, "compile", counting)
    rng = np.random.default_rng(3)
    A = rng.integers(-128, 128, (33, 40)).astype(np.int8)
    B = rng.integers(-128, 128, (40, 17)).astype(np.int8)
    for plan in plans:
        run = npu.execute(plan, {"A": A, "B": B})
        np.testing.assert_array_equal(run.outputs["C"],
                                      A.astype(np.int32) @ B.astype(np.int32))
    assert len({id(f) for f in compiled}) == len(first)
