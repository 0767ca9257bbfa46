"""tensorize binds buffers to operands whichever way round the kernel writes + and *."""

from __future__ import annotations

import ir
from intrinsics import default_registry, lowerer
from ir import te
from tensorize.schedule import Schedule
from tests.tensorize.schedule.kernels import assert_same_results


def gemm_written_b_times_a(m=32, n=32, k=32) -> ir.PrimFunc:
    A = te.placeholder((m, k), "int8", "A")
    B = te.placeholder((k, n), "int8", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(ir.cast("int32", B[rk, j])
                                               * ir.cast("int32", A[i, rk]), axis=rk), "C")
    return te.create_prim_func([A, B, C], "gemm_ba")


def test_commuted_product_tensorizes(registry):
    func = gemm_written_b_times_a()
    sch = Schedule(func, registry)
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, [None, 16])
    jo, ji = sch.split(j, [None, 16])
    ko, ki = sch.split(k, [None, 16])
    sch.reorder(io, jo, ko, ii, ji, ki)
    sch.tensorize(ii, default_registry().get("npu_gemm"))
    call = sch.get(sch.get_block("C_o")).block.body
    assert [arg.buffer.name for arg in call.args] == ["A", "B", "C"]
    assert_same_results(func, sch.func, lower_intrinsic=lowerer(default_registry().get))
    # Given as an object, the intrinsic is recorded by name, so the trace replays.
    assert "sch.tensorize(l4, 'npu_gemm')" in sch.trace.as_python()
    assert ir.structural_equal(Schedule.replay(func, sch.replay_trace(), registry).func, sch.func)
