"""cache_read and cache_write: a block reads or writes through a copy in another memory scope,
results do not change, and bad requests are refused."""

from __future__ import annotations

import doctest
import importlib

import pytest

from ir import BlockRealize, ScheduleError, structural_equal
from ir import script as T
from ir.verify import verify
from tensorize.schedule import BlockRV, Schedule, tree
from tests.tensorize.schedule.kernels import (KERNELS, assert_same_results, gemm_int8,
                                              matmul_relu)


def refused(sch: Schedule, primitive: str, *args, match: str) -> None:
    before = sch.func
    with pytest.raises(ScheduleError, match=match) as info:
        getattr(sch, primitive)(*args)
    assert info.value.primitive == primitive
    assert sch.func is before


def read_names(sch: Schedule, block: str) -> list[str]:
    return [r.buffer.name for r in sch.get(sch.get_block(block)).block.reads]


def top_level_blocks(func) -> list[str]:
    """Block names in program order."""
    return [s.block.name for s, p in tree.walk_stmts(func) if isinstance(s, BlockRealize) and p]


def assert_replays(func, sch: Schedule) -> None:
    assert structural_equal(Schedule.replay(func, sch.replay_trace(), sch.registry).func,
                            sch.func)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_cache_read_every_input_of_the_reduction(name):
    build, block = KERNELS[name]
    func = build()
    sch = Schedule(func)
    inputs = [b for b in read_names(sch, block) if b != block]
    copies = [sch.cache_read(sch.get_block(block), b, "shared") for b in inputs]
    assert [c.name for c in copies] == [f"{b}_shared" for b in inputs]
    assert read_names(sch, block) == [block] + [f"{b}_shared" for b in inputs]
    new = {b.name: b.scope for b in sch.func.allocs}
    assert all(new[f"{b}_shared"] == "shared" for b in inputs)
    # Each copy sits right before the loop nest of the block reading it.
    order = top_level_blocks(sch.func)
    assert order[order.index(block) - len(inputs):order.index(block)] == \
        [f"{b}_shared" for b in inputs]
    verify(sch.func)
    assert_same_results(func, sch.func)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_cache_write_the_reduction_output(name):
    build, block = KERNELS[name]
    func = build()
    sch = Schedule(func)
    output = sch.get(sch.get_block(block)).block.writes[0].buffer.name
    copy = sch.cache_write(sch.get_block(block), output, "local")
    assert copy.name == f"{output}_local"
    writes = sch.get(sch.get_block(block)).block.writes
    assert [w.buffer.name for w in writes] == [f"{output}_local"]
    order = top_level_blocks(sch.func)
    assert order[order.index(block) + 1] == copy.name
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_index_and_name_pick_the_same_buffer():
    by_name, by_index = Schedule(gemm_int8()), Schedule(gemm_int8())
    by_name.cache_read(by_name.get_block("C"), "B", "shared")
    by_index.cache_read(by_index.get_block("C"), 2, "shared")
    assert structural_equal(by_name.func, by_index.func)


@pytest.mark.parametrize("scope", ["wmma.matrix_a", "npu.inp", "arm.neon", "global"])
def test_intrinsic_scopes_are_accepted(scope, registry):
    func = gemm_int8(8, 8, 8)
    sch = Schedule(func, registry)
    copy = sch.cache_read(sch.get_block("C"), "A", scope)
    assert copy.name == "A_" + scope.replace(".", "_")
    assert [b.scope for b in sch.func.allocs] == [scope]
    assert_same_results(func, sch.func)


TWO_READERS = '''
@T.prim_func
def f(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32"), C: T.Buffer((8,), "int32")):
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            B[vi] = A[vi] * 2
    for i in range(8):
        with T.block("C"):
            vi = T.axis.spatial(8, i)
            C[vi] = A[vi] + 1
'''


def test_only_the_given_block_reads_the_copy_and_names_stay_unique():
    func = T.parse(TWO_READERS)
    sch = Schedule(func)
    first = sch.cache_read(sch.get_block("C"), "A", "shared")
    assert read_names(sch, "B") == ["A"]
    second = sch.cache_read(sch.get_block("B"), "A", "shared")
    assert (first.name, second.name) == ("A_shared", "A_shared_1")
    assert sorted(b.name for b in sch.func.allocs) == ["A_shared", "A_shared_1"]
    assert top_level_blocks(sch.func) == ["A_shared_1", "B", "A_shared", "C"]
    verify(sch.func)
    assert_same_results(func, sch.func)
    assert_replays(func, sch)


def test_cache_read_after_the_producer_inside_a_shared_loop():
    func = matmul_relu(8, 8, 4)
    sch = Schedule(func)
    i, _ = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("Y"), i)
    copy = sch.cache_read(sch.get_block("C"), "Y", "local")
    # Y is written in each iteration of i, so the copy goes inside i, after Y, one row long.
    assert [b.name for b in sch.get_child_blocks(i)] == ["Y", copy.name, "C"]
    assert [sch.get(l).extent for l in sch.get_loops(copy)] == [8, 8]
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_cache_write_of_an_unevenly_split_block():
    func = gemm_int8(10, 6, 4)
    sch = Schedule(func)
    i, j, _ = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 4])
    sch.split(j, [None, 4])
    sch.cache_write(sch.get_block("C"), "C", "local")
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_cache_then_stage_under_the_tile_loop(registry):
    func = gemm_int8(16, 16, 8)
    sch = Schedule(func, registry)
    copy_a = sch.cache_read(sch.get_block("C"), "A", "wmma.matrix_a")
    write = sch.cache_write(sch.get_block("C"), "C", "wmma.accumulator")
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 4])
    sch.compute_at(copy_a, i0)
    sch.reverse_compute_at(write, i0)
    assert [b.name for b in sch.get_child_blocks(i0)] == [copy_a.name, "C", write.name]
    verify(sch.func)
    assert_same_results(func, sch.func)
    assert_replays(func, sch)


@pytest.mark.parametrize(("rows", "at"), [(10, 4), (17, 16), (9, 1)])
def test_a_block_over_some_rows_caches_those_rows_alone(rows, at):
    # Each half of a partition reads and writes rows at a constant offset: its copies hold
    # those rows from 0, so the copy's loops run its whole domain and compute_at takes it.
    func = gemm_int8(rows, 8, 16)
    sch = Schedule(func)
    block = sch.get_block("C")
    rest = sch.partition(block, sch.get_loops(block)[0], at)
    for half, first, count in ((block, 0, at), (rest, at, rows - at)):
        copy = sch.cache_read(half, "A", "shared")
        stored = sch.cache_write(half, "C", "local")
        cached = sch.get(copy).block.writes[0].buffer
        assert cached.shape == (count, 16)
        loads = sch.get(copy).block.body.value.indices
        assert str(loads[0]) == (sch.get(copy).block.iter_vars[0].var.name
                                 + (f" + {first}" if first else ""))
        assert sch.get(stored).block.reads[0].buffer.shape == (count, 8)
        sch.compute_at(copy, sch.get_loops(half)[0])
        sch.reverse_compute_at(stored, sch.get_loops(half)[0])
    verify(sch.func)
    assert_same_results(func, sch.func, seed=rows + at)


def test_cache_trace_prints_names_and_scopes():
    sch = Schedule(gemm_int8())
    sch.cache_read(sch.get_block("C"), "A", "shared")
    sch.cache_write(sch.get_block("C"), 0, "local")
    assert sch.trace.as_python().splitlines() == [
        "b0 = sch.get_block('C')",
        "b1 = sch.cache_read(b0, 'A', 'shared')",
        "b2 = sch.cache_write(b0, 0, 'local')",
    ]
    assert_replays(gemm_int8(), sch)


# -- refusals -----------------------------------------------------------------------------------

def test_unknown_scope_is_refused_with_the_known_ones(registry):
    sch = Schedule(gemm_int8(), registry)
    refused(sch, "cache_read", sch.get_block("C"), "A", "texture",
            match="cache into an unknown scope 'texture'; known scopes: global, shared, local, "
                  ".*wmma.matrix_a.*npu.inp")
    refused(sch, "cache_write", sch.get_block("C"), "C", "wmma.fragment",
            match="cache into an unknown scope 'wmma.fragment'")


def test_without_a_registry_a_family_scope_is_taken_as_a_value_not_by_name(registry):
    func = gemm_int8(8, 8, 8)
    sch = Schedule(func)
    refused(sch, "cache_read", sch.get_block("C"), "A", "npu.inp",
            match=r"unknown scope 'npu.inp'; known scopes: global, shared, local \(a family's "
                  r"scope by name needs its registry: Schedule\(func, registry=...\)\)")
    copy = sch.cache_read(sch.get_block("C"), "A", registry.scope("npu.inp"))
    assert copy.name == "A_npu_inp"
    assert "sch.cache_read(b0, 'A', 'npu.inp')" in sch.trace.as_python()
    assert structural_equal(Schedule.replay(func, sch.replay_trace(), registry).func, sch.func)


def test_buffer_the_block_does_not_read_is_refused():
    sch = Schedule(gemm_int8())
    refused(sch, "cache_read", sch.get_block("C"), "Z", "shared",
            match="block 'C' does not read buffer 'Z'; it reads C, A, B")
    refused(sch, "cache_write", sch.get_block("C"), "A", "local",
            match="block 'C' does not write buffer 'A'; it writes C")


def test_index_out_of_range_and_bad_argument_are_refused():
    sch = Schedule(gemm_int8())
    refused(sch, "cache_read", sch.get_block("C"), 3, "shared",
            match="block 'C' reads 3 buffer\\(s\\) \\(C, A, B\\); index 3 is out of range")
    refused(sch, "cache_read", sch.get_block("C"), 1.0, "shared",
            match="argument 'buffer': expected a buffer name or an index")


def test_a_block_that_is_not_there_is_refused():
    sch = Schedule(gemm_int8())
    sch.cache_read(sch.get_block("C"), "A", "shared")
    refused(sch, "cache_read", BlockRV("D"), "A", "shared",
            match="no block named 'D'; blocks: A_shared, C")


def test_cache_read_of_a_buffer_the_block_updates_is_refused():
    sch = Schedule(gemm_int8())
    refused(sch, "cache_read", sch.get_block("C"), "C", "shared",
            match="block 'C' writes C as well as reading it")


def test_cache_write_of_an_update_without_init_is_refused():
    sch = Schedule(gemm_int8())
    sch.decompose_reduction(sch.get_block("C"), sch.get_loops(sch.get_block("C"))[2])
    refused(sch, "cache_write", sch.get_block("C"), "C", "local",
            match="block 'C' reads C before writing it and has no init")


def test_cache_write_of_a_block_writing_every_other_element_is_refused():
    text = '''
@T.prim_func
def f(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32")):
    for i in range(4):
        with T.block("B"):
            vi = T.axis.spatial(8, i * 2)
            B[vi] = A[vi]
'''
    sch = Schedule(T.parse(text))
    refused(sch, "cache_write", sch.get_block("B"), "B", "local",
            match="block 'B' does not write every element of B")


def test_docstring_examples_run():
    result = doctest.testmod(importlib.import_module("tensorize.schedule.primitives.cache"))
    assert result.attempted > 0 and result.failed == 0
