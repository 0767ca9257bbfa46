"""pad_einsum: iteration spaces grow to multiples of a tile, results unchanged, and blocks whose
padded iterations would change the result are refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import ScheduleError, structural_equal
from ir import script as T
from ir.verify import verify
from tensorize.schedule import Schedule
from tests.tensorize.schedule.kernels import (assert_same_results, batch_matmul, conv2d_nhwc,
                                              gemm_int8, matmul_relu)

MAX_REDUCE = '''
@T.prim_func
def f(A: T.Buffer((6, 10), "int32"), C: T.Buffer((6,), "int32")):
    for i, k in T.grid(6, 10):
        with T.block("C"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                C[vi] = -100
            C[vi] = T.max(C[vi], A[vi, vk])
'''

SUM_PLUS_ONE = '''
@T.prim_func
def f(A: T.Buffer((6, 10), "int32"), C: T.Buffer((6,), "int32")):
    for i, k in T.grid(6, 10):
        with T.block("C"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                C[vi] = 0
            C[vi] = C[vi] + (A[vi, vk] + 1)
'''

NO_INIT = '''
@T.prim_func
def f(A: T.Buffer((6, 10), "int32"), C: T.Buffer((6,), "int32")):
    for i, k in T.grid(6, 10):
        with T.block("C"):
            vi, vk = T.axis.remap("SR", [i, k])
            C[vi] = C[vi] + A[vi, vk]
'''

DIVIDE = '''
@T.prim_func
def f(A: T.Buffer((6, 8), "int32"), B: T.Buffer((6, 8), "int32"),
      C: T.Buffer((6, 8), "int32")):
    for i, j in T.grid(6, 8):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] // B[vi, vj]
'''

TWO_STORES = '''
@T.prim_func
def f(A: T.Buffer((6,), "int32"), C: T.Buffer((6,), "int32"), D: T.Buffer((6,), "int32")):
    for i in range(6):
        with T.block("C"):
            vi = T.axis.spatial(6, i)
            C[vi] = A[vi]
            D[vi] = A[vi]
'''

ONE_LOOP_TWO_ITERATORS = '''
@T.prim_func
def f(A: T.Buffer((8, 8), "int32"), C: T.Buffer((8, 8), "int32")):
    for i, j in T.grid(8, 8):
        with T.block("C"):
            vi = T.axis.spatial(8, i)
            vj = T.axis.spatial(8, i)
            C[vi, vj] = A[vi, vj]
'''

SELF_TRANSPOSE = '''
@T.prim_func
def f(A: T.Buffer((6, 6), "int32"), C: T.Buffer((6, 6), "int32")):
    for i, j in T.grid(6, 6):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] * A[vj, vi]
'''


def refused(sch: Schedule, *args, match: str) -> None:
    before = sch.func
    with pytest.raises(ScheduleError, match=match) as info:
        sch.pad_einsum(*args)
    assert info.value.primitive == "pad_einsum"
    assert sch.func is before


def test_gemm_pads_to_the_tile_and_keeps_results():
    func = gemm_int8(100, 60, 36)
    sch = Schedule(func)
    block = sch.get_block("C")
    sch.pad_einsum(block, [16, 16, 16])
    assert [iv.extent for iv in sch.get(block).block.iter_vars] == [112, 64, 48]
    assert [sch.get(l).extent for l in sch.get_loops(block)] == [112, 64, 48]
    assert {b.name: b.shape for b in sch.func.allocs} == {
        "A_pad": (112, 48), "B_pad": (48, 64), "C_pad": (112, 64)}
    assert [p.shape for p in sch.func.params] == [(100, 36), (36, 60), (100, 60)]
    verify(sch.func)
    assert_same_results(func, sch.func)
    assert structural_equal(Schedule.replay(func, sch.replay_trace()).func, sch.func)


def test_output_is_copied_back_over_the_original_region_only():
    sch = Schedule(gemm_int8(10, 6, 4))
    sch.pad_einsum(sch.get_block("C"), [4, 4, 4])
    unpad = sch.get(sch.get_block("C_unpad")).block
    assert [iv.extent for iv in unpad.iter_vars] == [10, 6]
    assert str(unpad.body) == "C[vi, vj] = C_pad[vi, vj]"


def test_padded_inputs_are_zero_outside_the_original_bounds():
    sch = Schedule(gemm_int8(10, 6, 5))
    sch.pad_einsum(sch.get_block("C"), [4, 4, 4])
    copy = sch.get(sch.get_block("A_pad")).block
    assert str(copy.body) == ("A_pad[vi, vk] = T.if_then_else(vi < 10 and vk < 5, "
                              "A[T.min(vi, 9), T.min(vk, 4)], 0)")


def test_padding_only_a_reduction_leaves_the_output_alone():
    func = gemm_int8(16, 16, 10)
    sch = Schedule(func)
    sch.pad_einsum(sch.get_block("C"), [16, 16, 16])
    assert sorted(b.name for b in sch.func.allocs) == ["A_pad", "B_pad"]
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_sizes_that_divide_change_nothing():
    sch = Schedule(gemm_int8(32, 24, 16))
    before = sch.func
    sch.pad_einsum(sch.get_block("C"), [16, 8, 16])
    assert sch.func is before
    assert len(sch.trace) == 2


@pytest.mark.parametrize("build, block, padding", [
    (lambda: gemm_int8(13, 7, 5), "C", [4, 4, 4]),
    (lambda: batch_matmul(3, 9, 6, 5), "C", [2, 4, 4, 4]),
    (lambda: matmul_relu(9, 7, 5), "Y", [8, 8, 8]),
    (lambda: matmul_relu(9, 7, 5), "C", [4, 4]),
])
def test_padding_keeps_results(build, block, padding):
    func = build()
    sch = Schedule(func)
    sch.pad_einsum(sch.get_block(block), padding)
    verify(sch.func)
    assert_same_results(func, sch.func)
    assert structural_equal(Schedule.replay(func, sch.replay_trace()).func, sch.func)


def test_conv_after_reindexing_its_input_is_an_einsum():
    func = conv2d_nhwc(5, 5, 3, 6)
    sch = Schedule(func)
    block = sch.get_block("conv")
    sch.reindex(block, "pad")
    sch.pad_einsum(block, [1, 4, 4, 4, 1, 1, 4])
    assert [iv.extent for iv in sch.get(block).block.iter_vars] == [1, 8, 8, 8, 3, 3, 4]
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_a_max_reduction_may_pad_its_spatial_iterators():
    func = T.parse(MAX_REDUCE)
    sch = Schedule(func)
    sch.pad_einsum(sch.get_block("C"), [4, 5])
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_conv_is_refused_as_no_einsum():
    sch = Schedule(conv2d_nhwc())
    refused(sch, sch.get_block("conv"), [1, 1, 1, 1, 1, 1, 1],
            match="block conv indexes pad with vy \\+ vrh, not an iterator of the block; "
                  "pad_einsum requires an einsum block")


def test_a_body_of_two_stores_is_refused():
    sch = Schedule(T.parse(TWO_STORES))
    refused(sch, sch.get_block("C"), [4],
            match="block C's body is a SeqStmt, not one store")


def test_padding_a_max_reduction_is_refused():
    sch = Schedule(T.parse(MAX_REDUCE))
    refused(sch, sch.get_block("C"), [2, 4],
            match="block C is not a sum C = C \\+ ...; padding its reduce iterator vk would "
                  "fold extra values into the result")


def test_a_sum_that_padding_does_not_zero_is_refused():
    sch = Schedule(T.parse(SUM_PLUS_ONE))
    refused(sch, sch.get_block("C"), [2, 4],
            match="no factor of the summed product is a load indexed by reduce iterator vk")


def test_a_reduction_without_init_is_refused():
    sch = Schedule(T.parse(NO_INIT))
    refused(sch, sch.get_block("C"), [4, 4],
            match="block C reads C's earlier values \\(it has no init\\)")


def test_division_by_a_padded_input_is_refused():
    sch = Schedule(T.parse(DIVIDE))
    refused(sch, sch.get_block("C"), [4, 4],
            match="block C divides by a value read from B, which padding fills with zeros")


def test_two_read_patterns_of_one_input_are_refused():
    sch = Schedule(T.parse(SELF_TRANSPOSE))
    refused(sch, sch.get_block("C"), [4, 4],
            match="block C reads A with two index patterns \\(vi, vj and vj, vi\\)")


def test_two_iterators_bound_to_one_loop_are_refused():
    sch = Schedule(T.parse(ONE_LOOP_TWO_ITERATORS))
    refused(sch, sch.get_block("C"), [3, 3], match="block C binds two iterators to one loop")


def test_bad_padding_arguments_are_refused():
    sch = Schedule(gemm_int8())
    block = sch.get_block("C")
    refused(sch, block, [16, 16],
            match="argument 'padding': expected one size per iterator of block C \\(3\\)")
    refused(sch, block, [16, 0, 16], match="argument 'padding': expected positive ints")
    refused(sch, block, [16, True, 16], match="argument 'padding': expected positive ints")


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.integers(1, 12),
       st.lists(st.integers(1, 8), min_size=3, max_size=3))
def test_random_gemm_paddings_keep_results(m, n, k, padding):
    func = gemm_int8(m, n, k)
    sch = Schedule(func)
    sch.pad_einsum(sch.get_block("C"), padding)
    verify(sch.func)
    assert_same_results(func, sch.func)
