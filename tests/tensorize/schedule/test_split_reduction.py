"""split_reduction: a reduction becomes partial sums over slices of one reduce iterator and
a block adding them up."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
from ir import IterKind, ScheduleError, structural_equal, te
from ir import script as T
from ir.verify import verify
from targets import host
from tensorize.schedule import Schedule
from tests.tensorize.schedule.kernels import assert_same_results, gemm_int8


def _split(func: ir.PrimFunc, block: str, loop: int, parts: int) -> Schedule:
    sch = Schedule(func)
    handle = sch.get_block(block)
    sch.split_reduction(handle, sch.get_loops(handle)[loop], parts)
    return sch


def conv_int8(size: int, channels: int, filters: int) -> ir.PrimFunc:
    """An NHWC 3x3 convolution with three reduce iterators (rh, rw, rc)."""
    I = te.placeholder((1, size + 2, size + 2, channels), "int8", "I")
    W = te.placeholder((3, 3, channels, filters), "int8", "W")
    rh, rw, rc = te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw"), te.reduce_axis(channels, "rc")
    O = te.compute((1, size, size, filters), lambda n, h, w, f: te.sum(
        ir.cast("int32", I[n, h + rh, w + rw, rc]) * ir.cast("int32", W[rh, rw, rc, f]),
        axis=[rh, rw, rc]), "O")
    return te.create_prim_func([I, W, O], "conv")


def test_the_block_computes_partial_sums_and_a_new_block_adds_them():
    sch = _split(gemm_int8(8, 8, 32), "C", 2, 4)
    block = sch.get(sch.get_block("C")).block
    assert [(iv.var.name, iv.extent, iv.kind) for iv in block.iter_vars] == [
        ("vk_s", 4, IterKind.SPATIAL), ("vi", 8, IterKind.SPATIAL),
        ("vj", 8, IterKind.SPATIAL), ("vk", 8, IterKind.REDUCE)]
    assert (block.writes[0].buffer.name, block.writes[0].buffer.shape) == ("C_part", (4, 8, 8))
    summed = sch.get(sch.get_block("C_sum")).block
    assert [(iv.extent, iv.kind) for iv in summed.iter_vars] == [
        (8, IterKind.SPATIAL), (8, IterKind.SPATIAL), (4, IterKind.REDUCE)]
    assert summed.writes[0].buffer.name == "C"
    verify(sch.func)


@settings(max_examples=8, deadline=None)
@given(m=st.integers(1, 9), n=st.integers(1, 9), depth=st.integers(1, 6),
       parts=st.integers(2, 5), seed=st.integers(0, 2**16))
def test_int8_gemm_results_are_exact(m, n, depth, parts, seed):
    func = gemm_int8(m, n, depth * parts)
    assert_same_results(func, _split(func, "C", 2, parts).func, seed=seed)


@pytest.mark.parametrize(("loop", "parts"), [(4, 3), (5, 3), (6, 2), (6, 4)])
def test_each_reduce_iterator_of_a_convolution_splits_exactly(loop, parts):
    func = conv_int8(5, 8, 4)
    assert_same_results(func, _split(func, "O", loop, parts).func, seed=loop * parts)


def test_extreme_values_wrap_as_the_unsplit_sum_does():
    func = gemm_int8(2, 2, 64)
    split = _split(func, "C", 2, 8).func
    inputs = {"A": np.full((2, 64), -128, np.int8), "B": np.full((64, 2), -128, np.int8)}
    np.testing.assert_array_equal(host.run(split, inputs)["C"],
                                  np.full((2, 2), 64 * 128 * 128, np.int32))


def test_a_float_sum_is_the_same_within_rounding():
    A = te.placeholder((6, 48), "float32", "A")
    B = te.placeholder((48, 5), "float32", "B")
    rk = te.reduce_axis(48, "k")
    C = te.compute((6, 5), lambda i, j: te.sum(A[i, rk] * B[rk, j], axis=rk), "C")
    func = te.create_prim_func([A, B, C], "gemm_f32")
    assert_same_results(func, _split(func, "C", 2, 6).func, seed=3)


def test_the_trace_replays_to_an_equal_function():
    func = gemm_int8(4, 4, 16)
    sch = _split(func, "C", 2, 2)
    assert structural_equal(Schedule.replay(func, sch.replay_trace()).func, sch.func)


def test_a_spatial_loop_is_refused():
    sch = Schedule(gemm_int8(4, 4, 16))
    before = sch.func
    block = sch.get_block("C")
    with pytest.raises(ScheduleError, match="binds the spatial iterator vi"):
        sch.split_reduction(block, sch.get_loops(block)[0], 2)
    assert sch.func is before


def test_parts_that_do_not_divide_the_extent_are_refused():
    sch = Schedule(gemm_int8(4, 4, 12))
    block = sch.get_block("C")
    with pytest.raises(ScheduleError, match="multiple of the parts, got 12 and 5"):
        sch.split_reduction(block, sch.get_loops(block)[2], 5)


@pytest.mark.parametrize("parts", [1, 0, 2.0, True])
def test_parts_must_be_an_int_of_at_least_two(parts):
    sch = Schedule(gemm_int8(4, 4, 12))
    block = sch.get_block("C")
    with pytest.raises(ScheduleError, match="argument 'parts': expected an int of at least 2"):
        sch.split_reduction(block, sch.get_loops(block)[2], parts)


@T.prim_func
def _reads_its_output(A: T.Buffer((4, 8), "int32"), O: T.Buffer((4,), "int32")):
    for i, k in T.grid(4, 8):
        with T.block("O"):
            vi, vk = T.axis.remap("SR", [i, k])
            O[vi] = O[vi] + A[vi, vk] * O[vi]


@T.prim_func
def _output_without_a_spatial_iterator(A: T.Buffer((4, 2, 8), "int32"),
                                       O: T.Buffer((4,), "int32")):
    for i, j, k in T.grid(4, 2, 8):
        with T.block("O"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            O[vi] = O[vi] + A[vi, vj, vk]


@T.prim_func
def _output_at_a_stride(A: T.Buffer((4, 8), "int32"), O: T.Buffer((8,), "int32")):
    for i, k in T.grid(4, 8):
        with T.block("O"):
            vi, vk = T.axis.remap("SR", [i, k])
            O[vi * 2] = O[vi * 2] + A[vi, vk]


@pytest.mark.parametrize(("func", "reason"), [
    (_reads_its_output, r"requires the body O\[idx\] = O\[idx\] \+ v, v not reading O"),
    (_output_without_a_spatial_iterator, "output indexed by its spatial iterators, each once"),
    (_output_at_a_stride, "each plus at most a constant; got O"),
])
def test_a_block_that_is_no_plain_sum_is_refused(func, reason):
    sch = Schedule(func)
    block = sch.get_block("O")
    with pytest.raises(ScheduleError, match=reason):
        sch.split_reduction(block, sch.get_loops(block)[-1], 2)


def test_an_output_at_an_offset_keeps_its_partial_sums_from_zero():
    # The rest of a partition writes O[i + 3]: its partial sums are indexed by i alone.
    sch = Schedule(gemm_int8(7, 4, 16))
    block = sch.get_block("C")
    rest = sch.partition(block, sch.get_loops(block)[0], 3)
    sch.split_reduction(rest, sch.get_loops(rest)[2], 4)
    parted = sch.get(sch.get_block("C_rest")).block
    assert parted.writes[0].buffer.shape == (4, 4, 4)
    summed = sch.get(sch.get_block("C_rest_sum")).block
    assert str(summed.body.indices[0]) == f"{summed.iter_vars[0].var.name} + 3"
    assert_same_results(gemm_int8(7, 4, 16), sch.func, seed=9)


def test_a_row_sum_splits_exactly():
    A = te.placeholder((4, 8), "int32", "A")
    r = te.reduce_axis(8, "r")
    B = te.compute((4,), lambda i: te.sum(A[i, r], axis=r), "B")
    func = te.create_prim_func([A, B], "rowsum")
    assert_same_results(func, _split(func, "B", 1, 4).func, seed=1)


def test_docstring_example_runs():
    result = doctest.testmod(importlib.import_module(
        "tensorize.schedule.primitives.split_reduction"))
    assert result.attempted > 0 and result.failed == 0
