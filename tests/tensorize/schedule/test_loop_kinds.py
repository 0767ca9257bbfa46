"""parallel, vectorize, unroll and bind: the loop kind changes, results do not."""

from __future__ import annotations

import pytest

from ir import ForKind, ScheduleError
from ir.verify import verify
from tensorize.schedule import Schedule
from tests.tensorize.schedule.kernels import KERNELS, assert_same_results, gemm_int8


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kinds_on_spatial_loops_keep_results(name):
    build, block = KERNELS[name]
    func = build()
    sch = Schedule(func)
    loops = sch.get_loops(sch.get_block(block))
    sch.parallel(loops[0])
    sch.unroll(loops[-1])
    outer, inner = sch.split(loops[1], [None, 2])
    sch.vectorize(inner)
    assert sch.get(loops[0]).kind is ForKind.PARALLEL
    assert sch.get(inner).kind is ForKind.VECTORIZED
    assert sch.get(loops[-1]).kind is ForKind.UNROLLED
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_bind_sets_thread_tags():
    func = gemm_int8()
    sch = Schedule(func)
    i, j, _ = sch.get_loops(sch.get_block("C"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    assert (sch.get(i).kind, sch.get(i).thread) == (ForKind.THREAD_BINDING, "blockIdx.x")
    assert sch.get(j).thread == "threadIdx.x"
    assert_same_results(func, sch.func)


def refused(sch, primitive, *args, match):
    before = sch.func
    with pytest.raises(ScheduleError, match=match):
        getattr(sch, primitive)(*args)
    assert sch.func is before


@pytest.mark.parametrize("primitive", ["parallel", "vectorize"])
def test_reduction_loop_cannot_run_in_parallel(primitive):
    sch = Schedule(gemm_int8())
    _, _, k = sch.get_loops(sch.get_block("C"))
    refused(sch, primitive, k, match="loop k carries the reduction of C.vk")


def test_unroll_accepts_a_reduction_loop():
    func = gemm_int8()
    sch = Schedule(func)
    sch.unroll(sch.get_loops(sch.get_block("C"))[2])
    assert_same_results(func, sch.func)


def test_bind_refuses_unknown_tag():
    sch = Schedule(gemm_int8())
    refused(sch, "bind", sch.get_loops(sch.get_block("C"))[0], "warp.x",
            match="argument 'thread'")


def test_bind_refuses_nested_same_tag():
    sch = Schedule(gemm_int8())
    i, j, _ = sch.get_loops(sch.get_block("C"))
    sch.bind(i, "threadIdx.x")
    refused(sch, "bind", j, "threadIdx.x", match="already bound to threadIdx.x")


def test_kind_cannot_change_twice():
    sch = Schedule(gemm_int8())
    i = sch.get_loops(sch.get_block("C"))[0]
    sch.parallel(i)
    refused(sch, "unroll", i, match="already parallel")
