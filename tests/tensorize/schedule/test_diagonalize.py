"""diagonalize: a depthwise reduction becomes grouped GEMMs with diagonal weight tiles."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest

import ir
from ir import IterKind, ScheduleError, structural_equal, te
from ir.verify import verify
from targets import host
from tensorize.schedule import Schedule
from tests.tensorize.schedule.kernels import assert_same_results, gemm_int8


def depthwise(size: int, channels: int, dtype: str = "int8", acc: str = "int32"
              ) -> ir.PrimFunc:
    I = te.placeholder((1, size + 2, size + 2, channels), dtype, "I")
    W = te.placeholder((3, 3, channels), dtype, "W")
    rh, rw = te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw")
    O = te.compute((1, size, size, channels), lambda n, h, w, c: te.sum(
        ir.cast(acc, I[n, h + rh, w + rw, c]) * ir.cast(acc, W[rh, rw, c]), axis=[rh, rw]), "O")
    return te.create_prim_func([I, W, O], "depthwise")


def test_the_block_becomes_a_gemm_per_group_reading_the_diagonal_weights():
    sch = Schedule(depthwise(5, 32))
    built = sch.diagonalize(sch.get_block("O"), 16)
    block = sch.get(sch.get_block("O")).block
    assert [(iv.var.name, iv.extent, iv.kind) for iv in block.iter_vars] == [
        ("vc_g", 2, IterKind.SPATIAL), ("vn", 1, IterKind.SPATIAL),
        ("vh", 5, IterKind.SPATIAL), ("vw", 5, IterKind.SPATIAL),
        ("vc_o", 16, IterKind.SPATIAL), ("vrh", 3, IterKind.REDUCE),
        ("vrw", 3, IterKind.REDUCE), ("vc_i", 16, IterKind.REDUCE)]
    assert {r.buffer.name for r in block.reads} == {"O", "I", "W_diagonal"}
    diagonal = sch.get(built).block.writes[0].buffer
    assert (diagonal.name, diagonal.shape) == ("W_diagonal", (2, 3, 3, 16, 16))
    verify(sch.func)


@pytest.mark.parametrize(("size", "channels", "tile"),
                         [(15, 16, 16), (16, 32, 16), (17, 48, 16), (7, 33, 11), (5, 31, 31),
                          (4, 12, 4)])
def test_int8_results_are_exact(size, channels, tile):
    func = depthwise(size, channels)
    sch = Schedule(func)
    sch.diagonalize(sch.get_block("O"), tile)
    assert_same_results(func, sch.func, seed=size)


def test_extreme_int8_values_are_exact():
    func = depthwise(6, 32)
    sch = Schedule(func)
    sch.diagonalize(sch.get_block("O"), 16)
    I = np.full((1, 8, 8, 32), -128, np.int8)
    W = np.full((3, 3, 32), -128, np.int8)
    got = host.run(sch.func, {"I": I, "W": W})["O"]
    np.testing.assert_array_equal(got, np.full((1, 6, 6, 32), 9 * 128 * 128, np.int32))


def test_float_results_are_the_same_numbers():
    func = depthwise(9, 32, "float32", "float32")
    sch = Schedule(func)
    sch.diagonalize(sch.get_block("O"), 16)
    assert_same_results(func, sch.func, seed=4)


def test_the_trace_replays_to_an_equal_function():
    func = depthwise(4, 32)
    sch = Schedule(func)
    sch.diagonalize(sch.get_block("O"), 16)
    replayed = Schedule.replay(func, sch.replay_trace())
    assert structural_equal(replayed.func, sch.func)


def test_a_tile_that_does_not_divide_the_channels_is_refused():
    sch = Schedule(depthwise(4, 24))
    with pytest.raises(ScheduleError, match=r"multiple of the tile, got vc = 24 and tile 16"):
        sch.diagonalize(sch.get_block("O"), 16)


def test_a_gemm_has_no_channel_iterator():
    sch = Schedule(gemm_int8())
    before = sch.func
    with pytest.raises(ScheduleError, match="not a depthwise reduction") as err:
        sch.diagonalize(sch.get_block("C"), 8)
    assert "tensorize." not in str(err.value)
    assert sch.func is before


@pytest.mark.parametrize("tile", [0, -16, 2.5, True])
def test_the_tile_must_be_a_positive_int(tile):
    sch = Schedule(depthwise(4, 16))
    with pytest.raises(ScheduleError, match="argument 'tile': expected a positive int"):
        sch.diagonalize(sch.get_block("O"), tile)


def test_an_elementwise_block_is_refused():
    A = te.placeholder((4, 8), "int32", "A")
    B = te.compute((4, 8), lambda i, j: A[i, j] + 1, "B")
    sch = Schedule(te.create_prim_func([A, B], "add_one"))
    with pytest.raises(ScheduleError, match=r"requires the body O\[idx\] = O\[idx\] \+ a \* b"):
        sch.diagonalize(sch.get_block("B"), 4)


def test_both_operands_indexed_by_other_spatial_iterators_is_refused():
    A = te.placeholder((4, 8), "int8", "A")
    B = te.placeholder((4, 8), "int8", "B")
    r = te.reduce_axis(2, "r")
    C = te.compute((4, 8), lambda i, c: te.sum(
        ir.cast("int32", A[i, c]) * ir.cast("int32", B[i + r - r, c]), axis=[r]), "C")
    sch = Schedule(te.create_prim_func([A, B, C], "both"))
    with pytest.raises(ScheduleError, match="indexed by no spatial iterator"):
        sch.diagonalize(sch.get_block("C"), 4)


def test_a_block_whose_loops_were_split_is_refused():
    sch = Schedule(depthwise(4, 16))
    block = sch.get_block("O")
    sch.split(sch.get_loops(block)[1], [2, 2])
    with pytest.raises(ScheduleError, match="each iterator bound to one loop of its own"):
        sch.diagonalize(block, 16)


def test_docstring_example_runs():
    result = doctest.testmod(importlib.import_module(
        "tensorize.schedule.primitives.diagonalize"))
    assert result.attempted > 0 and result.failed == 0
