"""fold_init: a resetting intrinsic takes over a tensorized tile's init."""

from __future__ import annotations

import pytest

from intrinsics import default_registry, lowerer
from ir import IfThenElse, ScheduleError
from tensorize.schedule import Schedule
from tests.tensorize.schedule.kernels import assert_same_results, gemm_int8


def tensorized_gemm(m=32, n=32, k=48) -> tuple:
    func = gemm_int8(m, n, k)
    sch = Schedule(func, default_registry())
    block = sch.get_block("C")
    i, j, kk = sch.get_loops(block)
    io, ii = sch.split(i, [None, 16])
    jo, ji = sch.split(j, [None, 16])
    ko, ki = sch.split(kk, [None, 16])
    sch.reorder(io, jo, ko, ii, ji, ki)
    sch.tensorize(ii, "npu_gemm")
    return func, sch


def test_reset_variant_replaces_the_init():
    func, sch = tensorized_gemm()
    sch.fold_init(sch.get_block("C_o"), "npu_gemm_reset")
    block = sch.get(sch.get_block("C_o")).block
    assert block.init is None and isinstance(block.body, IfThenElse)
    assert str(block.body.cond) == "vk_o == 0"
    assert block.body.then_case.intrinsic == "npu_gemm_reset"
    assert_same_results(func, sch.func, lower_intrinsic=lowerer(default_registry().get))


def test_an_accumulating_intrinsic_cannot_stand_for_the_init():
    _, sch = tensorized_gemm()
    before = sch.func
    with pytest.raises(ScheduleError, match="npu_gemm does not reset its accumulator"):
        sch.fold_init(sch.get_block("C_o"), "npu_gemm")
    assert sch.func is before


def test_a_block_without_init_is_refused():
    _, sch = tensorized_gemm()
    sch.fold_init(sch.get_block("C_o"), "npu_gemm_reset")
    with pytest.raises(ScheduleError, match="has no init to fold"):
        sch.fold_init(sch.get_block("C_o"), "npu_gemm_reset")


def test_an_untensorized_block_is_refused(registry):
    sch = Schedule(gemm_int8(), registry)
    with pytest.raises(ScheduleError, match="must be tensorized"):
        sch.fold_init(sch.get_block("C"), "npu_gemm_reset")
