"""The trace prints as Python that replays the schedule to the same function."""

from __future__ import annotations

from ir import structural_equal
from tensorize.schedule import Schedule
from tests.tensorize.schedule.kernels import gemm_int8


def test_trace_prints_each_primitive_with_named_handles():
    sch = Schedule(gemm_int8())
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 4])
    sch.reorder(i0, j, i1)
    sch.parallel(i0)
    assert sch.trace.as_python().splitlines() == [
        "b0 = sch.get_block('C')",
        "l0, l1, l2 = sch.get_loops(b0)",
        "l3, l4 = sch.split(l0, [None, 4])",
        "sch.reorder(l3, l1, l4)",
        "sch.parallel(l3)",
    ]


def test_replayed_trace_gives_a_structurally_equal_function():
    func = gemm_int8(20, 12, 8)
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    fused = sch.fuse(i, j)
    outer, inner = sch.split(fused, [None, 7])
    sch.reorder(k, outer)
    sch.unroll(inner)
    replayed = Schedule.replay(func, sch.replay_trace())
    assert structural_equal(replayed.func, sch.func)
    assert replayed.trace.as_python() == sch.trace.as_python()


def test_replay_of_an_empty_trace_is_the_original():
    func = gemm_int8()
    assert Schedule.replay(func, Schedule(func).replay_trace()).func is func


def test_a_lambda_index_map_is_recorded_as_text_and_replays():
    func = gemm_int8(8, 4, 2)
    sch = Schedule(func)
    sch.transform_block_layout(sch.get_block("C"), lambda i, j, k: (i * 4 + j, k))
    assert "lambda" in sch.trace.as_python() and "<function" not in sch.trace.as_python()
    assert structural_equal(Schedule.replay(func, sch.replay_trace()).func, sch.func)


def test_a_lookup_of_handles_already_bound_is_printed_once():
    sch = Schedule(gemm_int8())
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.get_block("C")
    sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 4])
    sch.get_loops(sch.get_block("C"))  # the split's loops, and j and k: all bound
    assert sch.trace.as_python().splitlines() == [
        "b0 = sch.get_block('C')",
        "l0, l1, l2 = sch.get_loops(b0)",
        "l3, l4 = sch.split(l0, [None, 4])",
    ]


def test_the_npu_rewrite_binds_each_handle_once_and_replays(registry, machine):
    from tensorize.engine import auto_tensorize

    func = gemm_int8(64, 48, 40)
    result = auto_tensorize(func, "npu", registry=registry, config=machine)
    text = result.schedule.trace.as_python()
    lookups = [line for line in text.splitlines() if "sch.get_" in line]
    assert len(lookups) == len(set(lookups))
    blocks = [line.split(" = ")[1] for line in lookups if "get_block" in line]
    assert len(blocks) == len(set(blocks))
    replayed = Schedule.replay(func, result.schedule.replay_trace(), registry)
    assert structural_equal(replayed.func, result.func)
    assert replayed.trace.as_python() == text
