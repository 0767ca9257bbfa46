"""decompose_reduction: a reduction's init becomes its own block before the given loop,
results do not change, and loops where the init cannot go are refused."""

from __future__ import annotations

import doctest
import importlib

import pytest

from ir import BlockRealize, IterKind, ScheduleError, structural_equal
from ir import script as T
from ir.verify import verify
from tensorize.schedule import Schedule, tree
from tests.tensorize.schedule.kernels import KERNELS, assert_same_results, gemm_int8, matmul_relu


def refused(sch: Schedule, primitive: str, *args, match: str) -> None:
    before = sch.func
    with pytest.raises(ScheduleError, match=match) as info:
        getattr(sch, primitive)(*args)
    assert info.value.primitive == primitive
    assert sch.func is before


def block_order(func) -> list[str]:
    return [s.block.name for s, p in tree.walk_stmts(func) if isinstance(s, BlockRealize) and p]


def allowed_depths(name: str) -> list[int]:
    """The loops of a kernel's reduction from the outermost down to its first reduce loop."""
    build, block = KERNELS[name]
    realize = Schedule(build()).get(Schedule(build()).get_block(block))
    kinds = [iv.kind for iv in realize.block.iter_vars]
    return list(range(kinds.index(IterKind.REDUCE) + 1))


@pytest.mark.parametrize("name,depth", [(n, d) for n in sorted(KERNELS)
                                        for d in allowed_depths(n)])
def test_decompose_at_each_loop_down_to_the_first_reduce_loop(name, depth):
    build, block = KERNELS[name]
    func = build()
    sch = Schedule(func)
    loops = sch.get_loops(sch.get_block(block))
    init = sch.decompose_reduction(sch.get_block(block), loops[depth])
    assert init.name == f"{block}_init"
    init_block = sch.get(init).block
    assert all(iv.kind is IterKind.SPATIAL for iv in init_block.iter_vars)
    assert sch.get(sch.get_block(block)).block.init is None
    # The init shares the loops outside the given one and copies the spatial ones inside it.
    init_loops = sch.get_loops(init)
    assert [sch.get(l).var for l in init_loops[:depth]] == \
        [sch.get(l).var for l in loops[:depth]]
    assert len(init_loops) == len(init_block.iter_vars)
    order = block_order(sch.func)
    assert order.index(init.name) + 1 == order.index(block)
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_relu_per_tile_with_the_init_before_the_tile():
    func = matmul_relu(16, 16, 8)
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("Y"))
    j0, j1 = sch.split(j, [None, 4])
    sch.reorder(j0, i)
    sch.reverse_compute_at(sch.get_block("C"), j0)
    init = sch.decompose_reduction(sch.get_block("Y"), i)
    # Per tile of 4 columns: zero it, accumulate it, then the relu reads it.
    assert [b.name for b in sch.get_child_blocks(j0)] == [init.name, "Y", "C"]
    assert [sch.get(l).extent for l in sch.get_loops(sch.get_block("C"))] == [4, 16, 4]
    verify(sch.func)
    assert_same_results(func, sch.func)
    assert structural_equal(Schedule.replay(func, sch.replay_trace()).func, sch.func)


def test_uneven_reduce_split_leaves_the_init_unguarded():
    func = gemm_int8(8, 8, 10)
    sch = Schedule(func)
    _, _, k = sch.get_loops(sch.get_block("C"))
    k0, _ = sch.split(k, [None, 4])
    init = sch.decompose_reduction(sch.get_block("C"), k0)
    assert str(sch.get(init).predicate) == "True"
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_uneven_spatial_split_keeps_the_guard_on_the_init():
    func = gemm_int8(10, 8, 4)
    sch = Schedule(func)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    i0, _ = sch.split(i, [None, 4])
    init = sch.decompose_reduction(sch.get_block("C"), i0)
    assert "< 10" in str(sch.get(init).predicate)
    verify(sch.func)
    assert_same_results(func, sch.func)


ROWSUM = '''
@T.prim_func
def f(A: T.Buffer((4, 8), "int32"), D: T.Buffer((4,), "int32")):
    S = T.alloc_buffer((4,), "int32")
    for i in range(4):
        for k in range(8):
            with T.block("S"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    S[vi] = 0
                S[vi] += A[vi, vk]
        with T.block("D"):
            vi = T.axis.spatial(4, i)
            D[vi] = S[vi] * 2
'''


def test_a_reader_of_the_finished_row_may_share_the_loop():
    func = T.parse(ROWSUM)
    sch = Schedule(func)
    (i,) = sch.get_loops(sch.get_block("D"))
    sch.decompose_reduction(sch.get_block("S"), i)
    assert block_order(sch.func) == ["S_init", "S", "D"]
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_a_loop_outside_that_binds_no_iterator_keeps_its_resets():
    text = ROWSUM.replace("    for i in range(4):\n", "    for t, i in T.grid(2, 4):\n")
    func = T.parse(text)
    sch = Schedule(func)
    _, i, _ = sch.get_loops(sch.get_block("S"))
    sch.decompose_reduction(sch.get_block("S"), i)
    verify(sch.func)
    assert_same_results(func, sch.func)


# -- refusals -----------------------------------------------------------------------------------

def test_a_block_without_init_is_refused():
    sch = Schedule(matmul_relu())
    refused(sch, "decompose_reduction", sch.get_block("C"),
            sch.get_loops(sch.get_block("C"))[0], match="block 'C' has no init to decompose")


def test_a_loop_not_around_the_block_is_refused():
    sch = Schedule(matmul_relu())
    refused(sch, "decompose_reduction", sch.get_block("Y"),
            sch.get_loops(sch.get_block("C"))[0],
            match="loop i is not around block 'Y' \\(its loops: i, j, k\\)")


def test_a_reduce_loop_outside_the_given_loop_is_refused():
    sch = Schedule(gemm_int8())
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(k, i)
    refused(sch, "decompose_reduction", sch.get_block("C"), j,
            match="loop k, outside loop j, carries the reduction of block 'C'; the init would "
                  "run again before each of its steps \\(decompose at loop k or further out\\)")


def test_a_later_reduce_loop_of_a_convolution_is_refused():
    build, _ = KERNELS["conv2d_nhwc"]
    sch = Schedule(build())
    loops = sch.get_loops(sch.get_block("conv"))
    refused(sch, "decompose_reduction", sch.get_block("conv"), loops[5],
            match="loop rh, outside loop rw, carries the reduction")


def test_a_loop_fused_from_spatial_and_reduce_is_refused():
    sch = Schedule(gemm_int8())
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.fuse(j, k)
    refused(sch, "decompose_reduction", sch.get_block("C"), i,
            match="loop j_k_fused binds both a spatial and a reduce iterator of block 'C'")


def test_a_loop_inside_that_binds_no_iterator_is_refused():
    text = ROWSUM.replace("    for i in range(4):\n", "    for t, i in T.grid(2, 4):\n")
    sch = Schedule(T.parse(text))
    t, _, _ = sch.get_loops(sch.get_block("S"))
    refused(sch, "decompose_reduction", sch.get_block("S"), t,
            match="loop t binds no iterator of block 'S': each of its iterations re-runs")


def test_a_reduction_that_does_not_start_at_zero_is_refused():
    text = ROWSUM.replace('vi, vk = T.axis.remap("SR", [i, k])',
                          'vi = T.axis.spatial(4, i)\n                vk = T.axis.reduce(8, 7 - k)')
    sch = Schedule(T.parse(text))
    _, k = sch.get_loops(sch.get_block("S"))
    refused(sch, "decompose_reduction", sch.get_block("S"), k,
            match="reduce iterator vk of block 'S' is not 0 where its loops start")


def test_a_reader_before_the_block_under_the_loop_is_refused():
    text = ROWSUM.replace('''        for k in range(8):
            with T.block("S"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    S[vi] = 0
                S[vi] += A[vi, vk]
        with T.block("D"):
            vi = T.axis.spatial(4, i)
            D[vi] = S[vi] * 2
''', '''        with T.block("D"):
            vi = T.axis.spatial(4, i)
            D[vi] = S[vi] * 2
        for k in range(8):
            with T.block("S"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    S[vi] = 0
                S[vi] += A[vi, vk]
''')
    sch = Schedule(T.parse(text))
    (i,) = sch.get_loops(sch.get_block("D"))
    refused(sch, "decompose_reduction", sch.get_block("S"), i,
            match="block 'D' reads S before block 'S' under loop i")


def test_a_reader_of_other_rows_under_the_loop_is_refused():
    text = ROWSUM.replace("D[vi] = S[vi] * 2", "D[vi] = S[3 - vi] * 2")
    sch = Schedule(T.parse(text))
    (i,) = sch.get_loops(sch.get_block("D"))
    refused(sch, "decompose_reduction", sch.get_block("S"), i,
            match="block 'D' reads S beyond what block 'S' writes in one iteration of loop i")


def test_another_writer_under_the_loop_is_refused():
    text = ROWSUM.replace("D[vi] = S[vi] * 2", "S[vi] = S[vi] * 2")
    sch = Schedule(T.parse(text))
    (i,) = sch.get_loops(sch.get_block("D"))
    refused(sch, "decompose_reduction", sch.get_block("S"), i,
            match="block 'D' under loop i also writes S")


def test_docstring_examples_run():
    result = doctest.testmod(importlib.import_module("tensorize.schedule.primitives.reduction"))
    assert result.attempted > 0 and result.failed == 0
