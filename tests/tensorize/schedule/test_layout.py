"""transform_layout, transform_block_layout and reindex: results unchanged, clear refusals,
and the im2col walk that turns a convolution into a GEMM."""

from __future__ import annotations

import numpy as np
import pytest

from ir import IterKind, ScheduleError, structural_equal
from ir import script as T
from ir.verify import verify
from targets import host
from tensorize.schedule import Schedule
from tensorize.schedule.index_map import IndexMap
from tests.tensorize.schedule.kernels import (assert_same_results, batch_matmul, conv2d_nhwc,
                                              gemm_int8, matmul_relu, random_inputs)

TILE = IndexMap.parse("lambda i, j: (i // 16, j // 16, i % 16, j % 16)")

# Two blocks under one loop: neither is alone under its loops.
SHARED_LOOP = '''
@T.prim_func
def f(A: T.Buffer((8, 8), "int32"), C: T.Buffer((8, 8), "int32")):
    B = T.alloc_buffer((8, 8), "int32")
    for i in range(8):
        for j in range(8):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] + 1
        for j in range(8):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = B[vi, vj] * 2
'''

# A block reading one buffer with two index patterns.
TWO_PATTERNS = '''
@T.prim_func
def f(A: T.Buffer((8, 8), "int32"), C: T.Buffer((8, 8), "int32")):
    for i, j in T.grid(8, 8):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] + A[vj, vi]
'''

# A block writing its output shifted by one, and one accumulating into it without an init.
SHIFTED_WRITE = '''
@T.prim_func
def f(A: T.Buffer((7,), "int32"), C: T.Buffer((8,), "int32")):
    for i in range(7):
        with T.block("C"):
            vi = T.axis.spatial(7, i)
            C[vi + 1] = A[vi]
'''

ACCUMULATE = '''
@T.prim_func
def f(A: T.Buffer((6, 4), "int32"), C: T.Buffer((6,), "int32")):
    for i, k in T.grid(6, 4):
        with T.block("C"):
            vi, vk = T.axis.remap("SR", [i, k])
            C[vi] = C[vi] + A[vi, vk]
'''

# A block whose body is an opaque intrinsic call over 16x32 tiles.
INTRINSIC = '''
@T.prim_func
def f(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32")):
    for i, j in T.grid(4, 2):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A[vi * 16:vi * 16 + 16, vj * 32:vj * 32 + 32])
            T.writes(B[vi * 16:vi * 16 + 16, vj * 32:vj * 32 + 32])
            T.call_intrinsic("copy", B[vi * 16:vi * 16 + 16, vj * 32:vj * 32 + 32],
                             A[vi * 16:vi * 16 + 16, vj * 32:vj * 32 + 32])
'''

# A block guarded by a predicate, reading past its last valid iteration's element.
GUARDED = '''
@T.prim_func
def f(A: T.Buffer((8,), "int32"), C: T.Buffer((8,), "int32")):
    for i in range(8):
        with T.block("C"):
            vi = T.axis.spatial(8, i)
            T.where(i < 7)
            C[vi] = A[vi + 1]
'''


def refused(sch: Schedule, primitive: str, *args, match: str) -> None:
    before = sch.func
    with pytest.raises(ScheduleError, match=match) as info:
        getattr(sch, primitive)(*args)
    assert info.value.primitive == primitive
    assert sch.func is before


def replays(func, sch: Schedule) -> bool:
    return structural_equal(Schedule.replay(func, sch.replay_trace()).func, sch.func)


def relayout(array: np.ndarray, index_map: IndexMap) -> np.ndarray:
    """``new[index_map(idx)] = array[idx]``, computed point by point."""
    out = np.zeros(index_map.target_shape(list(array.shape)), array.dtype)
    for point in np.ndindex(*array.shape):
        out[index_map.evaluate(point)] = array[point]
    return out


# -- transform_layout ---------------------------------------------------------------------------


def test_tiling_an_intermediate_keeps_results():
    func = matmul_relu(32, 32, 8)
    sch = Schedule(func)
    sch.transform_layout(sch.get_block("Y"), "Y", TILE)
    (Y,) = sch.func.allocs
    assert Y.shape == (2, 2, 16, 16)
    assert "Y[vi // 16, vj // 16, vi % 16, vj % 16]" in str(sch.get(sch.get_block("C")))
    verify(sch.func)
    assert_same_results(func, sch.func)
    assert replays(func, sch)


def test_transforming_parameters_changes_their_layout():
    func = gemm_int8(8, 12, 4)
    a_map = IndexMap.parse("lambda i, k: (k, i)")
    c_map = IndexMap.parse("lambda i, j: (j // 4, i, j % 4)")
    sch = Schedule(func)
    block = sch.get_block("C")
    sch.transform_layout(block, "A", a_map)
    sch.transform_layout(block, ("write", 0), c_map)
    assert [p.shape for p in sch.func.params] == [(4, 8), (4, 12), (3, 8, 4)]
    verify(sch.func)
    A, B, C = random_inputs(func)
    want = host.run(func, [A, B, C])["C"]
    got = host.run(sch.func, [relayout(A, a_map), B, relayout(C, c_map)])["C"]
    np.testing.assert_array_equal(got, relayout(want, c_map))
    assert replays(func, sch)


def test_lambda_and_text_maps_are_accepted():
    func = batch_matmul(2, 8, 8, 4)
    sch = Schedule(func)
    sch.transform_layout(sch.get_block("C"), ("read", 2), "lambda b, k, j: (j, b, k)")
    sch.transform_layout(sch.get_block("C"), "A", lambda b, i, k: (b * 8 + i, k))
    assert [p.shape for p in sch.func.params[:2]] == [(16, 4), (8, 2, 4)]
    verify(sch.func)


def test_conv_padding_buffer_in_channel_major_layout_keeps_results():
    func = conv2d_nhwc(6, 6, 4, 8)
    sch = Schedule(func)
    sch.transform_layout(sch.get_block("pad"), "pad", "lambda n, h, w, c: (n, c, h, w)")
    assert sch.func.allocs[0].shape == (1, 4, 8, 8)
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_transform_layout_refuses_a_padding_map():
    sch = Schedule(matmul_relu(20, 16, 8))
    refused(sch, "transform_layout", sch.get_block("Y"), "Y", TILE,
            match=r"not a bijection of buffer Y's shape \(20, 16\) \(transform_layout does not "
                  r"pad\): i // 16 takes 2 values but i has 20")


def test_transform_layout_refuses_a_map_of_the_wrong_arity():
    sch = Schedule(gemm_int8())
    refused(sch, "transform_layout", sch.get_block("C"), "A", "lambda i: i",
            match="takes 1 indices but buffer A has 2 dimensions")


def test_transform_layout_refuses_an_unknown_buffer():
    sch = Schedule(gemm_int8())
    refused(sch, "transform_layout", sch.get_block("C"), "X", TILE,
            match="block C does not access a buffer named 'X'; it reads C, A, B and writes C")
    refused(sch, "transform_layout", sch.get_block("C"), ("read", 5), TILE,
            match="block C has 3 read regions, so read 5 does not exist")
    refused(sch, "transform_layout", sch.get_block("C"), 3, TILE,
            match="argument 'buffer': expected a buffer name")


def test_transform_layout_refuses_a_bad_index_map():
    sch = Schedule(gemm_int8())
    refused(sch, "transform_layout", sch.get_block("C"), "A", 7,
            match="argument 'index_map': expected an IndexMap, a lambda or lambda text, got 7")
    refused(sch, "transform_layout", sch.get_block("C"), "A", "lambda i, k: (k, q)",
            match="argument 'index_map': .*unknown index q")


def test_transform_layout_refuses_an_intrinsic_operand():
    sch = Schedule(T.parse(INTRINSIC))
    refused(sch, "transform_layout", sch.get_block("B"), "A", "lambda i, j: (j, i)",
            match="buffer A is an operand of intrinsic call copy; transform its layout before "
                  "tensorizing")


# -- transform_block_layout ---------------------------------------------------------------------


def test_fusing_gemm_rows_and_columns_keeps_results():
    func = gemm_int8(8, 6, 4)
    sch = Schedule(func)
    block = sch.get_block("C")
    sch.transform_block_layout(block, IndexMap.parse("lambda i, j, k: (i * 6 + j, k)"))
    iter_vars = sch.get(block).block.iter_vars
    assert [(iv.extent, iv.kind) for iv in iter_vars] == [(48, IterKind.SPATIAL),
                                                          (4, IterKind.REDUCE)]
    assert [sch.get(l).extent for l in sch.get_loops(block)] == [48, 4]
    verify(sch.func)
    assert_same_results(func, sch.func)
    assert replays(func, sch)


def test_splitting_and_reordering_iterators_keeps_results():
    func = batch_matmul(2, 8, 6, 4)
    sch = Schedule(func)
    sch.transform_block_layout(sch.get_block("C"),
                               lambda b, i, j, k: (j, b * 2 + i // 4, k, i % 4))
    assert [iv.extent for iv in sch.get(sch.get_block("C")).block.iter_vars] == [6, 4, 4, 4]
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_a_map_making_more_iterators_than_it_takes_keeps_results():
    func = gemm_int8(8, 6, 4)
    sch = Schedule(func)
    sch.transform_block_layout(sch.get_block("C"),
                               lambda i, j, k: (i // 4, j, i % 4, k // 2, k % 2))
    iter_vars = sch.get(sch.get_block("C")).block.iter_vars
    assert [(iv.extent, iv.kind.value) for iv in iter_vars] == [
        (2, "spatial"), (6, "spatial"), (4, "spatial"), (2, "reduce"), (2, "reduce")]
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_fusing_conv_iterators_keeps_results():
    func = conv2d_nhwc(4, 4, 2, 8)
    sch = Schedule(func)
    block = sch.get_block("conv")
    sch.transform_block_layout(block, "lambda n, h, w, co, rh, rw, rc: "
                                      "(n * 16 + h * 4 + w, co, rh * 6 + rw * 2 + rc)")
    iter_vars = sch.get(block).block.iter_vars
    assert [(iv.extent, iv.kind.value) for iv in iter_vars] == [
        (16, "spatial"), (8, "spatial"), (18, "reduce")]
    verify(sch.func)
    assert_same_results(func, sch.func)


def test_an_intrinsic_block_keeps_its_regions_in_the_new_iterators():
    sch = Schedule(T.parse(INTRINSIC))
    block = sch.get_block("B")
    sch.transform_block_layout(block, "lambda i, j: i * 2 + j")
    (read,) = sch.get(block).block.reads
    assert str(read) == ("A[vi_vj // 2 * 16:vi_vj // 2 * 16 + 16, "
                         "vi_vj % 2 * 32:vi_vj % 2 * 32 + 32]")
    verify(sch.func)


def test_transform_block_layout_refuses_a_map_of_the_wrong_arity():
    sch = Schedule(gemm_int8())
    refused(sch, "transform_block_layout", sch.get_block("C"), "lambda i, j: (j, i)",
            match="takes 2 indices but block C has 3 iterators")


def test_transform_block_layout_refuses_a_predicate():
    sch = Schedule(T.parse(GUARDED))
    refused(sch, "transform_block_layout", sch.get_block("C"), "lambda i: i",
            match="block C has the predicate i < 7; transform_block_layout requires none")


def test_transform_block_layout_refuses_mixing_spatial_and_reduce():
    sch = Schedule(gemm_int8(8, 6, 4))
    refused(sch, "transform_block_layout", sch.get_block("C"), "lambda i, j, k: (i, j * 4 + k)",
            match="new iterator vj \\* 4 \\+ vk of block C mixes spatial and reduce iterators "
                  "\\(vj: spatial, vk: reduce\\)")


def test_transform_block_layout_refuses_a_non_bijection():
    sch = Schedule(gemm_int8(8, 6, 4))
    refused(sch, "transform_block_layout", sch.get_block("C"), "lambda i, j, k: (i, j, k, i)",
            match=r"not a bijection of block C's iteration space \(8, 6, 4\): .* uses i in two "
                  "places")


def test_transform_block_layout_refuses_a_block_sharing_its_loops():
    sch = Schedule(T.parse(SHARED_LOOP))
    refused(sch, "transform_block_layout", sch.get_block("C"), "lambda i, j: (j, i)",
            match="block C is not alone under loop i")


def test_transform_block_layout_refuses_loops_that_do_not_bind_iterators_one_to_one():
    sch = Schedule(gemm_int8(8, 6, 4))
    block = sch.get_block("C")
    i, _, _ = sch.get_loops(block)
    sch.split(i, [2, 4])
    refused(sch, "transform_block_layout", block, "lambda i, j, k: (j, i, k)",
            match="block C sits under 4 loops but has 3 iterators")


def test_transform_block_layout_refuses_reordered_loops():
    sch = Schedule(gemm_int8(8, 6, 4))
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    sch.reorder(j, i)
    refused(sch, "transform_block_layout", block, "lambda i, j, k: (j, i, k)",
            match="iterator vi of block C is bound to i; .* its own loop of the same extent, "
                  "in order")


def test_transform_block_layout_refuses_a_parallel_loop():
    sch = Schedule(gemm_int8(8, 6, 4))
    block = sch.get_block("C")
    sch.parallel(sch.get_loops(block)[0])
    refused(sch, "transform_block_layout", block, "lambda i, j, k: (j, i, k)",
            match="loop i is parallel; transform_block_layout requires serial loops")


# -- reindex ------------------------------------------------------------------------------------


def test_reindex_of_a_gemm_input_copies_it_before_the_block():
    func = gemm_int8(8, 6, 4)
    sch = Schedule(func)
    block = sch.get_block("C")
    copy = sch.reindex(block, "A")
    assert copy.name == "A_reindex"
    assert [r.block.name for r in [sch.get(sch.get_block(n)) for n in ("A_reindex", "C")]] == \
        ["A_reindex", "C"]
    assert "A_reindex[vi, vk] = A[vi, vk]" in str(sch.func)
    assert "T.cast(A_reindex[vi, vk], \"int32\")" in str(sch.get(block))
    verify(sch.func)
    assert_same_results(func, sch.func)
    assert replays(func, sch)


def test_reindex_of_a_gemm_output_copies_it_back_after_the_block():
    func = gemm_int8(8, 6, 4)
    sch = Schedule(func)
    copy = sch.reindex(sch.get_block("C"), ("write", 0))
    text = str(sch.func)
    assert text.index('T.block("C")') < text.index('T.block("C_reindex")')
    assert "C[vi, vj] = C_reindex[vi, vj]" in str(sch.get(copy))
    verify(sch.func)
    assert_same_results(func, sch.func)
    assert replays(func, sch)


def test_reindex_of_a_conv_input_is_indexed_by_the_block_iterators():
    func = conv2d_nhwc(4, 4, 2, 4)
    sch = Schedule(func)
    sch.reindex(sch.get_block("conv"), "pad")
    buffer = next(b for b in sch.func.allocs if b.name == "pad_reindex")
    assert buffer.shape == (1, 4, 4, 3, 3, 2)
    assert "pad_reindex[vn, vy, vx, vrh, vrw, vrc]" in str(sch.get(sch.get_block("conv")))
    verify(sch.func)
    assert_same_results(func, sch.func)


@pytest.mark.parametrize("build, block, buffer", [
    (batch_matmul, "C", ("read", 2)),
    (matmul_relu, "C", "Y"),
    (matmul_relu, "Y", "Y"),
])
def test_reindex_keeps_results(build, block, buffer):
    func = build()
    sch = Schedule(func)
    sch.reindex(sch.get_block(block), buffer)
    verify(sch.func)
    assert_same_results(func, sch.func)
    assert replays(func, sch)


def test_reindex_refuses_a_non_affine_access():
    sch = Schedule(conv2d_nhwc(4, 4, 2, 4))
    refused(sch, "reindex", sch.get_block("pad"), "I",
            match=r"index T.min\(T.max\(vy - 1, 0\), 3\) of I\[.*\] in block pad is not an "
                  "affine function of the block's iterators")


def test_reindex_refuses_two_index_patterns():
    sch = Schedule(T.parse(TWO_PATTERNS))
    refused(sch, "reindex", sch.get_block("C"), "A",
            match=r"block C accesses A with 2 index patterns \(A\[vi, vj\], A\[vj, vi\]\)")


def test_reindex_refuses_the_read_of_a_written_buffer():
    sch = Schedule(gemm_int8())
    refused(sch, "reindex", sch.get_block("C"), ("read", 0),
            match="block C both reads and writes C; reindex its write instead")


def test_reindex_refuses_a_write_that_is_not_one_to_one_onto_a_box():
    sch = Schedule(T.parse(SHIFTED_WRITE))
    refused(sch, "reindex", sch.get_block("C"), "C",
            match=r"block C writes C\[vi \+ 1\]; reindexing a write requires its indices to "
                  r"map the block's iterators one-to-one onto a box from 0: vi \+ 1 adds the "
                  "constant 1")


def test_reindex_refuses_a_write_under_a_predicate():
    sch = Schedule(gemm_int8(10, 6, 4))
    block = sch.get_block("C")
    sch.split(sch.get_loops(block)[0], [None, 4])
    refused(sch, "reindex", block, "C",
            match="block C writes C under the predicate .*; the copy back would write "
                  "elements the block skips")


def test_reindex_refuses_a_write_whose_earlier_values_are_read():
    sch = Schedule(T.parse(ACCUMULATE))
    refused(sch, "reindex", sch.get_block("C"), "C",
            match="block C reads C's earlier values \\(it has no init\\)")


def test_reindex_refuses_an_intrinsic_block():
    sch = Schedule(T.parse(INTRINSIC))
    refused(sch, "reindex", sch.get_block("B"), "A",
            match="block B holds an intrinsic call; reindex before tensorizing")


def test_reindex_refuses_an_index_outside_the_buffer():
    sch = Schedule(T.parse(GUARDED))
    refused(sch, "reindex", sch.get_block("C"), "A",
            match=r"index vi \+ 1 of A\[vi \+ 1\] in block C leaves \[0, 7\] for some "
                  "iterator values")


def test_reindex_refuses_a_block_sharing_its_loops():
    sch = Schedule(T.parse(SHARED_LOOP))
    refused(sch, "reindex", sch.get_block("C"), "B",
            match="block C shares its loops with block B")


# -- the im2col walk ----------------------------------------------------------------------------


def test_im2col_turns_a_convolution_into_a_gemm():
    func = conv2d_nhwc(4, 4, 2, 8)
    sch = Schedule(func)
    conv = sch.get_block("conv")
    sch.reindex(conv, "pad")
    sch.reindex(conv, "W")
    sch.reindex(conv, "conv")
    sch.transform_block_layout(conv, "lambda n, h, w, co, rh, rw, rc: "
                                     "(n * 16 + h * 4 + w, co, rh * 6 + rw * 2 + rc)")
    verify(sch.func)
    assert_same_results(func, sch.func)
    sch.transform_layout(conv, "pad_reindex",
                         "lambda n, h, w, rh, rw, rc: (n * 16 + h * 4 + w, rh * 6 + rw * 2 + rc)")
    sch.transform_layout(conv, "W_reindex", "lambda co, rh, rw, rc: (rh * 6 + rw * 2 + rc, co)")
    sch.transform_layout(conv, "conv_reindex", "lambda n, h, w, co: (n * 16 + h * 4 + w, co)")
    body = " ".join(str(sch.get(conv).block.body).split())
    assert body == ('conv_reindex[vn_vy_vx, vo] += T.cast(pad_reindex[vn_vy_vx, vrh_vrw_vrc], '
                    '"int32") * T.cast(W_reindex[vrh_vrw_vrc, vo], "int32")')
    assert {b.name: b.shape for b in sch.func.allocs if "reindex" in b.name} == {
        "pad_reindex": (16, 18), "W_reindex": (18, 8), "conv_reindex": (16, 8)}
    verify(sch.func)
    assert_same_results(func, sch.func)
    assert replays(func, sch)
