"""blockize: the loops under a loop become one outer block; results unchanged, clear refusals."""

from __future__ import annotations

import doctest
import importlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import IntImm, IterKind, ScheduleError, structural_equal
from ir import script as T
from ir.verify import verify
from tensorize.schedule import Schedule
from tests.tensorize.schedule.kernels import KERNELS, assert_same_results, conv2d_nhwc, gemm_int8


def tile_every_loop(sch: Schedule, block: str, factor: int):
    """Split every loop around ``block`` by ``factor`` and put all outer parts first; returns
    the inner loops, outermost first."""
    outers, inners = [], []
    for loop in sch.get_loops(sch.get_block(block)):
        outer, inner = sch.split(loop, [None, factor])
        outers.append(outer)
        inners.append(inner)
    sch.reorder(*outers, *inners)
    return inners


def iterators(sch: Schedule, block: str):
    block_node = sch.get(sch.get_block(block)).block
    return [(iv.var.name, iv.extent, iv.kind) for iv in block_node.iter_vars]


def test_gemm_tile_becomes_an_outer_block_over_the_outer_parts():
    func = gemm_int8(32, 24, 16)
    sch = Schedule(func)
    inner = tile_every_loop(sch, "C", 4)
    tile = sch.blockize(inner[0])
    assert tile.name == "C_o"
    S, R = IterKind.SPATIAL, IterKind.REDUCE
    assert iterators(sch, "C_o") == [("vi_o", 8, S), ("vj_o", 6, S), ("vk_o", 4, R)]
    outer = sch.get(tile).block
    assert outer.init is not None  # the reduction's init moved up: a reduce loop is outside
    assert sch.get(sch.get_block("C")).block.init is None
    assert [str(b) for b in sch.get(sch.get_block("C")).bindings] == \
        ["vi_o * 4 + i_1", "vj_o * 4 + j_1", "vk_o * 4 + k_1"]
    assert [str(r) for r in outer.writes] == ["C[vi_o * 4:vi_o * 4 + 4, vj_o * 4:vj_o * 4 + 4]"]
    verify(sch.func)
    assert_same_results(func, sch.func)


@pytest.mark.parametrize("factor", [2, 3, 4])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_blockize_after_tiling_keeps_results(name, factor):
    build, block = KERNELS[name]
    func = build()
    sch = Schedule(func)
    inner = tile_every_loop(sch, block, factor)  # 3 leaves predicates on uneven splits
    tile = sch.blockize(inner[0])
    verify(sch.func)
    outer = sch.get(tile).block
    for region in (*outer.reads, *outer.writes):  # guarded loops do not widen past bounds
        for rng, dim in zip(region.ranges, region.buffer.shape):
            if isinstance(rng.start, IntImm):
                assert 0 <= rng.start.value and rng.start.value + rng.extent.value <= dim
    assert_same_results(func, sch.func)


@pytest.mark.slow  # in CI's slow pass, for the default run's time
@settings(max_examples=25, deadline=None)
@given(factors=st.tuples(*[st.integers(1, 5)] * 3), outer_first=st.booleans(),
       at=st.integers(0, 5))
def test_blockize_anywhere_in_any_tiling_keeps_results(factors, outer_first, at):
    func = gemm_int8(12, 10, 9)
    sch = Schedule(func)
    outers, inners = [], []
    for loop, factor in zip(sch.get_loops(sch.get_block("C")), factors):
        outer, inner = sch.split(loop, [None, factor])
        outers.append(outer)
        inners.append(inner)
    if outer_first:
        sch.reorder(*outers, *inners)
    sch.blockize(sch.get_loops(sch.get_block("C"))[at])
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_conv2d_tile_over_channels_lifts_the_init():
    func = conv2d_nhwc()
    sch = Schedule(func)
    n, y, x, o, rh, rw, rc = sch.get_loops(sch.get_block("conv"))
    o_0, o_1 = sch.split(o, [None, 4])
    rc_0, rc_1 = sch.split(rc, [None, 4])
    sch.reorder(o_0, rh, rw, rc_0, o_1, rc_1)
    tile = sch.blockize(o_1)
    # n has extent 1: its iterator has no outer part left to iterate over.
    assert [name for name, _, _ in iterators(sch, "conv_o")] == \
        ["vy_o", "vx_o", "vo_o", "vrh_o", "vrw_o", "vrc_o"]
    assert sch.get(tile).block.init is not None
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_init_stays_inside_when_no_reduce_loop_is_outside():
    func = gemm_int8(16, 16, 8)
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i_0, i_1 = sch.split(i, [None, 4])
    sch.reorder(i_0, j, i_1)
    tile = sch.blockize(j)
    assert all(kind is IterKind.SPATIAL for _, _, kind in iterators(sch, "C_o"))
    assert sch.get(tile).block.init is None
    assert sch.get(sch.get_block("C")).block.init is not None
    assert_same_results(func, sch.func)


def test_init_stays_inside_when_the_predicate_uses_a_reduce_loop():
    func = gemm_int8(8, 8, 10)
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    k_0, k_1 = sch.split(k, [None, 4])  # guard k_0 * 4 + k_1 < 10 runs inside the tile
    tile = sch.blockize(k_1)
    assert iterators(sch, "C_o")[-1] == ("vk_o", 3, IterKind.REDUCE)
    assert sch.get(tile).block.init is None
    assert sch.get(sch.get_block("C")).block.init is not None
    assert str(sch.get(sch.get_block("C")).predicate) == "vk_o * 4 + k_1 < 10"
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_uneven_spatial_split_guards_the_lifted_init():
    func = gemm_int8(10, 8, 8)
    sch = Schedule(func)
    inner = tile_every_loop(sch, "C", 4)
    tile = sch.blockize(inner[0])
    outer = sch.get(tile).block
    assert outer.init is not None and "vi_o * 4 + i_1 < 10" in str(outer.init)
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_predicate_over_outer_loops_only_goes_to_the_outer_block():
    func = gemm_int8(10, 8, 8)
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 4])
    tile = sch.blockize(j)
    assert str(sch.get(tile).predicate) == "i_0 * 4 + i_1 < 10"
    assert str(sch.get(sch.get_block("C")).predicate) == "True"
    verify(sch.func)
    assert_same_results(func, sch.func)


BLOCK_DIAGONAL = '''
@T.prim_func
def diag(A: T.Buffer((16, 16), "int32"), D: T.Buffer((16,), "int32")):
    for i0, i1, k1 in T.grid(4, 4, 4):
        with T.block("D"):
            vi = T.axis.spatial(16, i0 * 4 + i1)
            vk = T.axis.reduce(16, i0 * 4 + k1)
            with T.init():
                D[vi] = 0
            D[vi] = D[vi] + A[vi, vk]
'''


def test_equal_outer_parts_share_one_outer_iterator_that_is_reduce():
    func = T.parse(BLOCK_DIAGONAL)
    sch = Schedule(func)
    _, i1, _ = sch.get_loops(sch.get_block("D"))
    tile = sch.blockize(i1)
    assert iterators(sch, "D_o") == [("vi_o", 4, IterKind.REDUCE)]
    # The shared iterator is spatial too, so the init cannot run once per outer reduction.
    assert sch.get(tile).block.init is None
    assert [str(b) for b in sch.get(sch.get_block("D")).bindings] == \
        ["vi_o * 4 + i1", "vi_o * 4 + k1"]
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_blockized_function_prints_and_parses_back():
    sch = Schedule(gemm_int8(16, 16, 16))
    inner = tile_every_loop(sch, "C", 4)
    sch.blockize(inner[0])
    assert structural_equal(T.parse(str(sch.func)), sch.func)


def test_trace_replays_blockize():
    func = gemm_int8(16, 16, 16)
    sch = Schedule(func)
    inner = tile_every_loop(sch, "C", 4)
    sch.blockize(inner[1])
    assert sch.trace.as_python().splitlines()[-1] == "b1 = sch.blockize(l6)"
    replayed = Schedule.replay(func, sch.replay_trace())
    assert structural_equal(replayed.func, sch.func)


TAKEN_NAME = '''
@T.prim_func
def taken(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32"), C: T.Buffer((8,), "int32")):
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            B[vi] = A[vi] + 1
    for i in range(8):
        with T.block("B_o"):
            vi = T.axis.spatial(8, i)
            C[vi] = A[vi] * 2
'''


def test_outer_block_name_is_made_unique():
    func = T.parse(TAKEN_NAME)
    sch = Schedule(func)
    tile = sch.blockize(sch.get_loops(sch.get_block("B"))[0])
    assert tile.name == "B_o1"
    assert_same_results(func, sch.func)


def test_blockizing_an_outer_block_nests_a_second_level():
    func = gemm_int8(16, 16, 16)
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.blockize(k)
    assert sch.blockize(j).name == "C_o_o"
    verify(sch.func)
    assert_same_results(func, sch.func)


# -- refusals ------------------------------------------------------------------------------------

TWO_BLOCKS = '''
@T.prim_func
def two(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32"), C: T.Buffer((8,), "int32")):
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            B[vi] = A[vi] + 1
        with T.block("C"):
            vi = T.axis.spatial(8, i)
            C[vi] = A[vi] * 2
'''

BRANCH = '''
@T.prim_func
def branch(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32")):
    for i in range(8):
        if i < 4:
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                B[vi] = A[vi] + 1
'''

OVERLAPPING = '''
@T.prim_func
def overlap(A: T.Buffer((72,), "int32"), B: T.Buffer((72,), "int32")):
    for i0, i1 in T.grid(8, 16):
        with T.block("B"):
            vi = T.axis.spatial(72, i0 * 8 + i1)
            B[vi] = A[vi] + 1
'''

STRANDED = '''
@T.prim_func
def stranded(A: T.Buffer((16,), "int32"), B: T.Buffer((16,), "int32")):
    for a, b, i1 in T.grid(2, 2, 4):
        with T.block("B"):
            vi = T.axis.spatial(16, a * 8 + b * 4 + i1)
            T.where(b * 4 + i1 < 7)
            B[vi] = A[vi] + 1
'''


def refuse(func, pick_loop, *fragments: str) -> None:
    sch = Schedule(func)
    loop = pick_loop(sch)
    before = sch.func
    with pytest.raises(ScheduleError) as info:
        sch.blockize(loop)
    assert info.value.primitive == "blockize"
    for fragment in fragments:
        assert fragment in str(info.value)
    assert sch.func is before
    assert all(step.primitive != "blockize" for step in sch.trace.steps)


def test_refuses_a_loop_holding_two_blocks():
    refuse(T.parse(TWO_BLOCKS), lambda sch: sch.get_loops(sch.get_block("B"))[0],
           "loop i requires exactly one block under it, got 2 ('B', 'C')")


def test_refuses_a_loop_holding_a_branch():
    refuse(T.parse(BRANCH), lambda sch: sch.get_loops(sch.get_block("B"))[0],
           "loop i requires only loops around one block under it, got a branch (if)")


def test_refuses_a_binding_that_mixes_inner_and_outer_loops():
    def fused_then_split(sch: Schedule):
        i, j, _ = sch.get_loops(sch.get_block("C"))
        fused = sch.fuse(i, j)
        _, inner = sch.split(fused, [None, 16])  # 16 does not divide j's extent 24
        return inner

    refuse(gemm_int8(32, 24, 16), fused_then_split, "block 'C' requires each binding to split",
           "mixes loop i_j_fused_1 (inside) with loop i_j_fused_0 (outside)")


def test_refuses_an_inner_part_wider_than_the_outer_step():
    refuse(T.parse(OVERLAPPING), lambda sch: sch.get_loops(sch.get_block("B"))[1],
           "vi = i0 * 8 + i1", "takes 16 values while the part outside moves in steps of 8")


def test_refuses_a_predicate_that_cannot_be_lifted():
    refuse(T.parse(STRANDED), lambda sch: sch.get_loops(sch.get_block("B"))[2],
           "got b * 4 + i1 < 7 using loop b")


def test_refuses_a_block_handle():
    sch = Schedule(gemm_int8())
    with pytest.raises(ScheduleError, match="argument 'loop': expected a loop handle"):
        sch.blockize(sch.get_block("C"))


def test_docstring_example_runs():
    module = importlib.import_module("tensorize.schedule.primitives.blockize")
    assert doctest.testmod(module).failed == 0
