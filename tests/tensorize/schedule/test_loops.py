"""split, fuse and reorder: results unchanged on every kernel, and clear refusals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import ScheduleError, structural_equal
from ir.verify import verify
from tensorize.schedule import Schedule
from tests.tensorize.schedule.kernels import KERNELS, assert_same_results, gemm_int8


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_split_every_loop_keeps_results(name):
    build, block = KERNELS[name]
    func = build()
    sch = Schedule(func)
    for loop in sch.get_loops(sch.get_block(block)):
        sch.split(loop, [None, 3])  # 3 divides few extents: exercises the guard predicate
    verify(sch.func)
    assert_same_results(func, sch.func)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_fuse_all_loops_keeps_results(name):
    build, block = KERNELS[name]
    func = build()
    sch = Schedule(func)
    fused = sch.fuse(*sch.get_loops(sch.get_block(block)))
    extent = 1
    for loop in Schedule(func).get_loops(Schedule(func).get_block(block)):
        extent *= Schedule(func).get(loop).extent
    assert sch.get(fused).extent == extent
    verify(sch.func)
    assert_same_results(func, sch.func)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_reverse_loop_order_keeps_results(name):
    build, block = KERNELS[name]
    func = build()
    sch = Schedule(func)
    loops = sch.get_loops(sch.get_block(block))
    sch.reorder(*reversed(loops))
    assert [sch.get(l).var for l in sch.get_loops(sch.get_block(block))] == \
        [sch.get(l).var for l in reversed(loops)]
    assert_same_results(func, sch.func)


def test_split_with_inferred_factor():
    sch = Schedule(gemm_int8(32, 24, 16))
    i, _, _ = sch.get_loops(sch.get_block("C"))
    outer, middle, inner = sch.split(i, [2, None, 4])
    assert [sch.get(l).extent for l in (outer, middle, inner)] == [2, 4, 4]


def test_dividing_split_adds_no_predicate():
    sch = Schedule(gemm_int8(32, 24, 16))
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 8])
    assert str(sch.get(sch.get_block("C")).predicate) == "True"


def test_uneven_split_guards_with_a_predicate():
    func = gemm_int8(10, 8, 4)
    sch = Schedule(func)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 4])
    assert "< 10" in str(sch.get(sch.get_block("C")).predicate)
    assert_same_results(func, sch.func)


def test_split_then_fuse_gives_back_the_plain_binding():
    func = gemm_int8(32, 24, 16)
    sch = Schedule(func)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.fuse(*sch.split(i, [None, 8]))
    assert str(sch.get(sch.get_block("C")).bindings[0]) == "i_0_i_1_fused"


def refused(sch: Schedule, primitive: str, *args, match: str) -> None:
    before = sch.func
    with pytest.raises(ScheduleError, match=match) as info:
        getattr(sch, primitive)(*args)
    assert info.value.primitive == primitive
    assert sch.func is before


def test_split_refuses_too_small_factors():
    sch = Schedule(gemm_int8(32, 24, 16))
    i, _, _ = sch.get_loops(sch.get_block("C"))
    refused(sch, "split", i, [2, 4], match="cover 8 iterations, fewer than loop i's extent 32")


def test_split_refuses_two_inferred_factors():
    sch = Schedule(gemm_int8())
    i, _, _ = sch.get_loops(sch.get_block("C"))
    refused(sch, "split", i, [None, None], match="at most one None")


def test_fuse_refuses_non_adjacent_loops():
    sch = Schedule(gemm_int8())
    i, _, k = sch.get_loops(sch.get_block("C"))
    refused(sch, "fuse", i, k, match="adjacent")


def test_fuse_refuses_loops_of_different_blocks():
    build, _ = KERNELS["matmul_relu"]
    sch = Schedule(build())
    i_y = sch.get_loops(sch.get_block("Y"))[0]
    i_c = sch.get_loops(sch.get_block("C"))[0]
    refused(sch, "fuse", i_y, i_c, match="does not directly contain")


def test_reorder_refuses_across_a_block_boundary():
    build, _ = KERNELS["matmul_relu"]
    sch = Schedule(build())
    i_y = sch.get_loops(sch.get_block("Y"))[0]
    i_c = sch.get_loops(sch.get_block("C"))[0]
    refused(sch, "reorder", i_c, i_y, match="different branches|not nested")


def test_reorder_refuses_a_loop_mixing_spatial_and_reduce_iterators():
    # After fusing j with k, the fused loop's halves each drive both vj and vk: running them
    # in another order would zero C[.., j] (the init at k == 0) after accumulating into it.
    sch = Schedule(gemm_int8(4, 2, 3))
    _, j, k = sch.get_loops(sch.get_block("C"))
    outer, inner = sch.split(sch.fuse(j, k), [None, 2])
    refused(sch, "reorder", inner, outer, match="drives both spatial and reduce iterators")


def test_primitive_on_a_replaced_loop_is_refused():
    sch = Schedule(gemm_int8())
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 4])
    refused(sch, "split", i, [None, 2], match="no longer in the function")


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.integers(1, 9), st.data())
def test_random_split_fuse_reorder_chains_keep_results(m, n, k, data):
    func = gemm_int8(m, n, k)
    sch = Schedule(func)
    for _ in range(data.draw(st.integers(1, 5))):
        loops = sch.get_loops(sch.get_block("C"))
        action = data.draw(st.sampled_from(["split", "fuse", "reorder"]))
        before = sch.func
        try:
            if action == "split":
                loop = data.draw(st.sampled_from(loops))
                sch.split(loop, [None, data.draw(st.integers(1, 5))])
            elif action == "fuse" and len(loops) >= 2:
                start = data.draw(st.integers(0, len(loops) - 2))
                sch.fuse(loops[start], loops[start + 1])
            else:
                sch.reorder(*data.draw(st.permutations(loops)))
        except ScheduleError:
            assert sch.func is before  # a refusal changes nothing
    verify(sch.func)
    assert_same_results(func, sch.func)
    assert structural_equal(Schedule.replay(func, sch.replay_trace()).func, sch.func)
