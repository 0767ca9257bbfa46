"""compact_buffer: a staging buffer shrinks to one iteration's tile, results unchanged."""

from __future__ import annotations

import pytest

from ir import ScheduleError
from ir import script as T
from ir.verify import verify
from tensorize.schedule import Schedule
from tests.tensorize.schedule.kernels import assert_same_results

STAGED = '''
@T.prim_func
def f(A: T.Buffer((64, 32), "int32"), C: T.Buffer((64, 32), "int32")):
    S = T.alloc_buffer((64, 32), "int32", scope="shared")
    for io in range(4):
        for i, j in T.grid(16, 32):
            with T.block("S"):
                vi = T.axis.spatial(64, io * 16 + i)
                vj = T.axis.spatial(32, j)
                S[vi, vj] = A[vi, vj] * 2
        for i, j in T.grid(16, 32):
            with T.block("C"):
                vi = T.axis.spatial(64, io * 16 + i)
                vj = T.axis.spatial(32, j)
                C[vi, vj] = S[vi, vj] + 1
'''


def test_staging_buffer_shrinks_to_one_tile():
    func = T.parse(STAGED)
    sch = Schedule(func)
    sch.compact_buffer("S")
    (S,) = sch.func.allocs
    assert S.shape == (16, 32) and S.scope == "shared"
    assert "S[vi % 16, vj]" in str(sch.func)
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_data_passed_between_iterations_is_refused():
    # C reads the tile the previous iteration staged: compacting would alias it.
    text = STAGED.replace("C[vi, vj] = S[vi, vj] + 1", "C[vi, vj] = S[(vi + 48) % 64, vj] + 1")
    sch = Schedule(T.parse(text))
    before = sch.func
    with pytest.raises(ScheduleError, match="do not cover what is read"):
        sch.compact_buffer("S")
    assert sch.func is before


def test_read_before_write_is_refused():
    text = STAGED.replace("S[vi, vj] = A[vi, vj] * 2", "S[vi, vj] = S[vi, vj] + A[vi, vj]")
    sch = Schedule(T.parse(text))
    with pytest.raises(ScheduleError, match="read before it is written in an iteration of io"):
        sch.compact_buffer("S")


def test_unknown_buffer_is_refused():
    sch = Schedule(T.parse(STAGED))
    with pytest.raises(ScheduleError, match="'A' is not an intermediate buffer of f"):
        sch.compact_buffer("A")


def test_whole_buffer_use_changes_nothing():
    text = STAGED.replace("for io in range(4):", "for io in range(1):").replace(
        "io * 16 + i", "io * 64 + i").replace("T.grid(16, 32)", "T.grid(64, 32)")
    func = T.parse(text)
    sch = Schedule(func)
    sch.compact_buffer("S")
    assert sch.func.allocs[0].shape == (64, 32)
