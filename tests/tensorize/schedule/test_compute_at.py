"""compute_at and reverse_compute_at: blocks move into each other's loop nests, results do not
change, and every broken precondition is refused by name."""

from __future__ import annotations

import doctest
import importlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir import BlockRealize, ScheduleError, structural_equal
from ir import script as T
from ir.verify import verify
from tensorize.schedule import Schedule, tree
from tests.tensorize.schedule.kernels import (assert_same_results, batch_matmul, conv2d_nhwc,
                                              gemm_int8, matmul_relu)


def refused(sch: Schedule, primitive: str, *args, match: str) -> None:
    before = sch.func
    with pytest.raises(ScheduleError, match=match) as info:
        getattr(sch, primitive)(*args)
    assert info.value.primitive == primitive
    assert sch.func is before


def blocks_under(sch: Schedule, loop) -> list[str]:
    return [b.name for b in sch.get_child_blocks(loop)]


def extents_of(sch: Schedule, block: str) -> list[int]:
    return [sch.get(loop).extent for loop in sch.get_loops(sch.get_block(block))]


def assert_replays(func, sch: Schedule) -> None:
    replayed = Schedule.replay(func, sch.replay_trace(), sch.registry)
    assert structural_equal(replayed.func, sch.func)


# -- compute_at ---------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [0, 1])
def test_matmul_under_each_relu_loop(depth):
    func = matmul_relu(8, 12, 4)
    sch = Schedule(func)
    loop = sch.get_loops(sch.get_block("C"))[depth]
    sch.compute_at(sch.get_block("Y"), loop)
    assert blocks_under(sch, loop) == ["Y", "C"]
    # Y keeps a loop for each iterator the relu's remaining loops do not fix; k runs whole.
    assert extents_of(sch, "Y") == [8, 12, 4][:depth + 1] + [12, 4][depth:]
    verify(sch.func)
    assert_same_results(func, sch.func)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_padding_under_convolution_loops(depth):
    func = conv2d_nhwc(6, 5, 4, 8)
    sch = Schedule(func)
    loop = sch.get_loops(sch.get_block("conv"))[depth]
    sch.compute_at(sch.get_block("pad"), loop)
    # An output row needs three padded rows (the 3x3 window); an output pixel, a 3x3 patch.
    want = {1: [1, 3, 7, 4], 2: [1, 3, 3, 4], 3: [1, 3, 3, 4]}[depth]
    pad = sch.get_loops(sch.get_block("pad"))
    assert [sch.get(l).extent for l in pad[depth + 1:]] == [w for w in want if w > 1]
    verify(sch.func)
    assert_same_results(func, sch.func)


@pytest.mark.parametrize("build,block", [(gemm_int8, "C"), (batch_matmul, "C")])
def test_staged_operands_under_every_loop(build, block):
    func = build()
    for depth in range(len(Schedule(func).get_loops(Schedule(func).get_block(block)))):
        sch = Schedule(func)
        stage_a = sch.cache_read(sch.get_block(block), "A", "shared")
        stage_b = sch.cache_read(sch.get_block(block), "B", "shared")
        loop = sch.get_loops(sch.get_block(block))[depth]
        sch.compute_at(stage_a, loop)
        sch.compute_at(stage_b, loop)
        assert blocks_under(sch, loop) == ["A_shared", "B_shared", block]
        verify(sch.func)
        assert_same_results(func, sch.func)


def test_split_then_compute_at_the_inner_loop_guards_the_overrun():
    func = gemm_int8(10, 8, 6)
    sch = Schedule(func)
    stage = sch.cache_read(sch.get_block("C"), "A", "shared")
    i, _, _ = sch.get_loops(sch.get_block("C"))
    _, inner = sch.split(i, [None, 4])
    sch.compute_at(stage, inner)
    copy = sch.get(stage)
    assert "< 10" in str(copy.predicate)  # the last tile runs past row 9
    assert extents_of(sch, "A_shared")[-1] == 6  # one row of A per row of C
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_reduction_producer_recomputes_only_the_needed_tile():
    func = matmul_relu(16, 16, 8)
    sch = Schedule(func)
    i, j = sch.get_loops(sch.get_block("C"))
    _, i1 = sch.split(i, [None, 4])
    j0, _ = sch.split(j, [None, 8])
    sch.reorder(j0, i1)
    sch.compute_at(sch.get_block("Y"), j0)
    assert extents_of(sch, "Y")[2:] == [4, 8, 8]
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_compute_at_trace_replays():
    func = conv2d_nhwc(4, 4, 2, 4)
    sch = Schedule(func)
    loops = sch.get_loops(sch.get_block("conv"))
    sch.split(loops[2], [None, 2])
    sch.compute_at(sch.get_block("pad"), sch.get_loops(sch.get_block("conv"))[2])
    assert "sch.compute_at(b1, l" in sch.trace.as_python()
    assert_replays(func, sch)


# -- reverse_compute_at -------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [0, 1])
def test_relu_under_each_spatial_matmul_loop(depth):
    func = matmul_relu(8, 12, 4)
    sch = Schedule(func)
    loop = sch.get_loops(sch.get_block("Y"))[depth]
    sch.reverse_compute_at(sch.get_block("C"), loop)
    assert blocks_under(sch, loop) == ["Y", "C"]
    assert len(sch.get_loops(sch.get_block("C"))) == 2  # the loops it was given, or new ones
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_relu_per_tile_of_an_uneven_split():
    func = matmul_relu(8, 10, 4)
    sch = Schedule(func)
    _, j, _ = sch.get_loops(sch.get_block("Y"))
    j0, _ = sch.split(j, [None, 4])
    sch.reverse_compute_at(sch.get_block("C"), j0)
    assert "< 10" in str(sch.get(sch.get_block("C")).predicate)
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_write_back_moves_under_the_row_loop():
    func = gemm_int8(8, 8, 4)
    sch = Schedule(func)
    copy = sch.cache_write(sch.get_block("C"), "C", "local")
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.reverse_compute_at(copy, i)
    assert blocks_under(sch, i) == ["C", "C_local"]
    assert extents_of(sch, "C_local") == [8, 8]  # i, then one row of 8
    verify(sch.func)
    assert_same_results(func, sch.func)
    assert_replays(func, sch)


# -- refusals -----------------------------------------------------------------------------------

CHAIN = '''
@T.prim_func
def chain(A: T.Buffer((8,), "int32"), C: T.Buffer((8,), "int32")):
    B = T.alloc_buffer((8,), "int32")
    D = T.alloc_buffer((8,), "int32")
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            B[vi] = A[vi] * 2
    for i in range(8):
        with T.block("Z"):
            vi = T.axis.spatial(8, i)
            D[vi] = A[vi] + 1
    for i in range(8):
        with T.block("C"):
            vi = T.axis.spatial(8, i)
            C[vi] = B[vi] + D[vi]
'''


def chain() -> Schedule:
    return Schedule(T.parse(CHAIN))


def loop_of(sch: Schedule, block: str, depth: int = 0):
    return sch.get_loops(sch.get_block(block))[depth]


def test_chain_moves_when_nothing_in_between_conflicts():
    sch = chain()
    func = sch.func
    sch.compute_at(sch.get_block("B"), loop_of(sch, "C"))  # past Z, which B does not depend on
    sch.compute_at(sch.get_block("Z"), loop_of(sch, "C"))
    assert blocks_under(sch, loop_of(sch, "C")) == ["B", "Z", "C"]
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_compute_at_refuses_a_loop_around_the_block_itself():
    sch = Schedule(matmul_relu())
    refused(sch, "compute_at", sch.get_block("Y"), loop_of(sch, "Y"),
            match="loop i is around block 'Y' itself")


def test_compute_at_refuses_an_output_block():
    sch = Schedule(matmul_relu())
    refused(sch, "compute_at", sch.get_block("C"), loop_of(sch, "Y"),
            match="writes C, a parameter of matmul_relu")


def test_compute_at_refuses_a_second_writer():
    text = CHAIN.replace("D[vi] = A[vi] + 1", "B[vi] = A[vi] + 1")
    sch = Schedule(T.parse(text))
    refused(sch, "compute_at", sch.get_block("B"), loop_of(sch, "C"),
            match="block 'B' is not the only writer of B \\(also Z\\)")


def test_compute_at_refuses_a_reader_outside_the_loop():
    text = CHAIN.replace("D[vi] = A[vi] + 1", "D[vi] = B[vi] + 1")
    sch = Schedule(T.parse(text))
    refused(sch, "compute_at", sch.get_block("B"), loop_of(sch, "C"),
            match="block\\(s\\) Z read B but are not under loop i")


def test_compute_at_refuses_a_block_in_between_writing_its_input():
    text = CHAIN.replace("D[vi] = A[vi] + 1", "A[vi] = D[vi] + 1")
    sch = Schedule(T.parse(text))
    refused(sch, "compute_at", sch.get_block("B"), loop_of(sch, "C"),
            match="block 'Z' writes A, which block 'B' reads, between its place and loop i")


def test_compute_at_refuses_a_consumer_that_runs_first():
    text = '''
@T.prim_func
def f(A: T.Buffer((8,), "int32"), C: T.Buffer((8,), "int32")):
    B = T.alloc_buffer((8,), "int32")
    for i in range(8):
        with T.block("C"):
            vi = T.axis.spatial(8, i)
            C[vi] = B[vi] + 1
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            B[vi] = A[vi] * 2
'''
    sch = Schedule(T.parse(text))
    refused(sch, "compute_at", sch.get_block("B"), loop_of(sch, "C"),
            match="block 'B' runs after loop i; the consumers under i would run before it")


def test_compute_at_refuses_an_incomplete_producer():
    text = CHAIN.replace('''    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)''', '''    for i in range(4):
        with T.block("B"):
            vi = T.axis.spatial(8, i * 2)''')
    sch = Schedule(T.parse(text))
    refused(sch, "compute_at", sch.get_block("B"), loop_of(sch, "C"),
            match="block 'B' is not complete: its loops do not run every point")


def test_compute_at_refuses_a_reduction_without_init():
    sch = Schedule(matmul_relu())
    sch.decompose_reduction(sch.get_block("Y"), loop_of(sch, "Y", 2))
    refused(sch, "compute_at", sch.get_block("Y"), loop_of(sch, "C"),
            match="is not the only writer of Y \\(also Y_init\\)")


def test_compute_at_refuses_a_loop_of_another_scope():
    text = '''
@T.prim_func
def f(A: T.Buffer((8,), "int32"), C: T.Buffer((8,), "int32")):
    B = T.alloc_buffer((8,), "int32")
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            B[vi] = A[vi] * 2
    with T.block("outer"):
        for i in range(8):
            with T.block("C"):
                vi = T.axis.spatial(8, i)
                C[vi] = B[vi] + 1
'''
    sch = Schedule(T.parse(text))
    refused(sch, "compute_at", sch.get_block("B"), loop_of(sch, "C"),
            match="loop i is not in the scope of block 'B' \\(the block 'outer' holds it\\)")


def test_reverse_compute_at_refuses_reading_partial_sums():
    sch = Schedule(matmul_relu())
    refused(sch, "reverse_compute_at", sch.get_block("C"), loop_of(sch, "Y", 2),
            match="loop k carries the reduction of block 'Y' \\(iterator vk\\); under loop k, "
                  "block 'C' would read partial results")


def test_reverse_compute_at_refuses_a_block_in_between_writing_its_input():
    sch = chain()
    refused(sch, "reverse_compute_at", sch.get_block("C"), loop_of(sch, "B"),
            match="block 'Z' writes D, which block 'C' reads, between loop i and the block")


def test_reverse_compute_at_refuses_a_block_reading_its_output_first():
    text = CHAIN.replace("D[vi] = A[vi] + 1", "D[vi] = C[vi] + 1").replace(
        "C[vi] = B[vi] + D[vi]", "C[vi] = B[vi] + 1")
    sch = Schedule(T.parse(text))
    refused(sch, "reverse_compute_at", sch.get_block("C"), loop_of(sch, "B"),
            match="block 'Z' accesses C, which block 'C' writes, between loop i and the block")


def test_reverse_compute_at_refuses_a_loop_with_no_producer_under_it():
    sch = chain()
    refused(sch, "reverse_compute_at", sch.get_block("B"), loop_of(sch, "Z"),
            match="no block under loop i writes what block 'B' reads \\(A\\)")


def test_reverse_compute_at_refuses_a_consumer_that_runs_first():
    sch = Schedule(matmul_relu())
    refused(sch, "reverse_compute_at", sch.get_block("Y"), loop_of(sch, "C"),
            match="no block under loop i writes what block 'Y' reads")


def test_reverse_compute_at_refuses_a_stencil_reading_the_next_element():
    text = '''
@T.prim_func
def f(A: T.Buffer((9,), "int32"), C: T.Buffer((8,), "int32")):
    B = T.alloc_buffer((9,), "int32")
    for i in range(9):
        with T.block("B"):
            vi = T.axis.spatial(9, i)
            B[vi] = A[vi] * 2
    for i in range(8):
        with T.block("C"):
            vi = T.axis.spatial(8, i)
            C[vi] = B[vi] + B[vi + 1]
'''
    sch = Schedule(T.parse(text))
    refused(sch, "reverse_compute_at", sch.get_block("C"), loop_of(sch, "B"),
            match="reads B\\[vi:\\+2\\], wider than the 1 elements produced per iteration")


def test_reverse_compute_at_refuses_losing_part_of_the_domain():
    text = '''
@T.prim_func
def f(A: T.Buffer((8,), "int32"), C: T.Buffer((7,), "int32")):
    B = T.alloc_buffer((8,), "int32")
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            B[vi] = A[vi] * 2
    for i in range(7):
        with T.block("C"):
            vi = T.axis.spatial(7, i)
            C[vi] = B[vi] + B[vi + 1]
'''
    sch = Schedule(T.parse(text))
    tile, _ = sch.split(loop_of(sch, "B"), [2, 4])
    # A tile of B finishes 4 elements, enough for 3 outputs; output 3 needs both tiles.
    refused(sch, "reverse_compute_at", sch.get_block("C"), tile,
            match="under loop i_0, block 'C' would not run its whole domain")


# -- random chains ------------------------------------------------------------------------------

def stages_feeding(sch: Schedule, block: str) -> list:
    """Handles of the blocks whose output ``block`` reads."""
    reads = {r.buffer for r in sch.get(sch.get_block(block)).block.reads}
    return [sch.get_block(stmt.block.name) for stmt, path in tree.walk_stmts(sch.func)
            if isinstance(stmt, BlockRealize) and path and stmt.block.name != block
            and {w.buffer for w in stmt.block.writes} & reads]


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 6), st.data())
def test_random_split_reorder_cache_read_compute_at_chains_keep_results(registry, m, n, k,
                                                                       data):
    func = gemm_int8(m, n, k)
    sch = Schedule(func, registry)
    for _ in range(data.draw(st.integers(1, 6))):
        action = data.draw(st.sampled_from(["split", "reorder", "cache_read", "compute_at"]))
        loops = sch.get_loops(sch.get_block("C"))
        if action == "split":
            sch.split(data.draw(st.sampled_from(loops)), [None, data.draw(st.integers(1, 4))])
        elif action == "reorder":
            before = sch.func
            try:
                sch.reorder(*data.draw(st.permutations(loops)))
            except ScheduleError:  # a staged copy inside the nest breaks the perfect chain
                assert sch.func is before
        elif action == "cache_read":
            sch.cache_read(sch.get_block("C"), data.draw(st.sampled_from([1, 2])),
                           data.draw(st.sampled_from(["shared", "local", "wmma.matrix_a"])))
        else:
            stages = stages_feeding(sch, "C")
            if not stages:
                continue
            stage = data.draw(st.sampled_from(stages))
            around = {id(sch.get(l).var) for l in sch.get_loops(stage)}
            free = [l for l in loops if id(sch.get(l).var) not in around]
            if free:
                sch.compute_at(stage, data.draw(st.sampled_from(free)))
    verify(sch.func)
    assert_same_results(func, sch.func)
    assert_replays(func, sch)


def test_docstring_examples_run():
    module = importlib.import_module("tensorize.schedule.primitives.compute_at")
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
