"""partition: a block's nest cut in two along a spatial iterator; with split_reduction on the
second half, the pattern of the stream-K hybrid (rows of whole tiles unsplit, the rest split)."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
from ir import IterKind, ScheduleError, structural_equal, te
from ir.verify import verify
from targets import host
from tensorize.schedule import Schedule, tree
from tests.tensorize.schedule.kernels import assert_same_results, batch_matmul, gemm_int8


def _partition(func: ir.PrimFunc, block: str, loop: int, at: int) -> Schedule:
    sch = Schedule(func)
    handle = sch.get_block(block)
    sch.partition(handle, sch.get_loops(handle)[loop], at)
    return sch


def test_the_block_keeps_the_first_rows_and_a_new_block_the_rest():
    sch = _partition(gemm_int8(10, 8, 32), "C", 0, 6)
    first = sch.get(sch.get_block("C")).block
    rest = sch.get(sch.get_block("C_rest")).block
    assert [(iv.extent, iv.kind) for iv in first.iter_vars] == [
        (6, IterKind.SPATIAL), (8, IterKind.SPATIAL), (32, IterKind.REDUCE)]
    assert [iv.extent for iv in rest.iter_vars] == [4, 8, 32]
    assert str(rest.body.indices[0]) == f"{rest.iter_vars[0].var.name} + 6"
    assert [sch.get(loop).extent for loop in sch.get_loops(sch.get_block("C_rest"))] == \
        [4, 8, 32]
    verify(sch.func)


@settings(max_examples=5, deadline=None)
@given(m=st.integers(2, 17), n=st.integers(1, 9), k=st.integers(1, 40), data=st.data())
def test_int8_gemm_results_are_exact_at_any_cut(m, n, k, data):
    at = data.draw(st.integers(1, m - 1))
    func = gemm_int8(m, n, k)
    assert_same_results(func, _partition(func, "C", 0, at).func, seed=m * n + at)


@settings(max_examples=5, deadline=None)
@given(rows=st.integers(1, 5), tile=st.sampled_from([1, 3, 16]), n=st.integers(1, 9),
       depth=st.integers(1, 6), parts=st.integers(2, 4), data=st.data())
def test_the_rest_split_along_k_is_exact(rows, tile, n, depth, parts, data):
    # The stream-K hybrid's pattern: whole rows of tiles unsplit, the remaining rows' k split.
    whole = data.draw(st.integers(1, rows))
    m = (rows + 1) * tile
    func = gemm_int8(m, n, depth * parts)
    sch = _partition(func, "C", 0, whole * tile)
    rest = sch.get_block("C_rest")
    sch.split_reduction(rest, sch.get_loops(rest)[2], parts)
    assert {"C", "C_rest", "C_rest_sum"} <= set(tree.block_names(sch.func))
    assert_same_results(func, sch.func, seed=rows * 7 + parts)


def test_extreme_values_wrap_as_the_whole_sum_does():
    func = gemm_int8(5, 3, 64)
    sch = _partition(func, "C", 0, 2)
    rest = sch.get_block("C_rest")
    sch.split_reduction(rest, sch.get_loops(rest)[2], 8)
    inputs = {"A": np.full((5, 64), -128, np.int8), "B": np.full((64, 3), -128, np.int8)}
    np.testing.assert_array_equal(host.run(sch.func, inputs)["C"],
                                  np.full((5, 3), 64 * 128 * 128, np.int32))


def test_a_batched_gemm_cuts_its_rows_in_every_batch():
    func = batch_matmul(3, 7, 5, 8)
    assert_same_results(func, _partition(func, "C", 1, 4).func, seed=2)


def test_a_float_result_is_the_same_value():
    A = te.placeholder((9, 40), "float32", "A")
    B = te.placeholder((40, 5), "float32", "B")
    rk = te.reduce_axis(40, "k")
    C = te.compute((9, 5), lambda i, j: te.sum(A[i, rk] * B[rk, j], axis=rk), "C")
    func = te.create_prim_func([A, B, C], "gemm_f32")
    rng = np.random.default_rng(4)
    inputs = {"A": rng.standard_normal((9, 40)).astype(np.float32),
              "B": rng.standard_normal((40, 5)).astype(np.float32)}
    # Each element is summed by one block, over the same terms in the same order.
    np.testing.assert_array_equal(host.run(_partition(func, "C", 0, 4).func, inputs)["C"],
                                  host.run(func, inputs)["C"])


def test_the_trace_replays_to_an_equal_function():
    func = gemm_int8(6, 4, 16)
    sch = _partition(func, "C", 1, 1)
    assert structural_equal(Schedule.replay(func, sch.replay_trace()).func, sch.func)


def test_a_reduce_loop_is_refused():
    sch = Schedule(gemm_int8(4, 4, 16))
    before = sch.func
    block = sch.get_block("C")
    with pytest.raises(ScheduleError, match="binds the reduce iterator vk"):
        sch.partition(block, sch.get_loops(block)[2], 8)
    assert sch.func is before


@pytest.mark.parametrize("at", [4, 9])
def test_a_cut_outside_the_extent_is_refused(at):
    sch = Schedule(gemm_int8(4, 4, 16))
    block = sch.get_block("C")
    with pytest.raises(ScheduleError, match=f"cut inside the extent of vi, got {at} of 4"):
        sch.partition(block, sch.get_loops(block)[0], at)


@pytest.mark.parametrize("at", [0, -2, 1.0, True])
def test_at_must_be_a_positive_int(at):
    sch = Schedule(gemm_int8(4, 4, 16))
    block = sch.get_block("C")
    with pytest.raises(ScheduleError, match="argument 'at': expected a positive int"):
        sch.partition(block, sch.get_loops(block)[0], at)


def test_docstring_example_runs():
    result = doctest.testmod(importlib.import_module("tensorize.schedule.primitives.partition"))
    assert result.attempted > 0 and result.failed == 0

