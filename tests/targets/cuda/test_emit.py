"""targets.cuda.emit: the CUDA C++ source, launches and refusals."""

from __future__ import annotations

import re

import pytest

from ir import script as T
from targets import cuda
from tests.targets.cuda.helpers import WMMA, WMMA_INT8, emitted


def test_int8_gemm_transposes_b_then_launches_one_block_of_four_warps():
    kernel = emitted("gemm_int8", intrinsic=WMMA_INT8)
    # B (k rows of n) is first stored n rows of k, into B_global, by a kernel of one 64 x 64
    # tile per block of 8 warps, through shared memory.
    assert [(l.grid, l.block, l.tiled, l.tensorized) for l in kernel.launches] == [
        ((1, 1, 1), (32, 8, 1), True, False), ((1, 1, 1), (32, 2, 2), True, True)]
    assert kernel.params == ("A", "B", "C", "B_global") and kernel.outputs == ("C",)
    assert "B_global[(v1) * 64 + v0] = tz_shared_load(B_shared, " in kernel.source


def test_each_warp_declares_only_its_own_fragments():
    source = emitted("gemm_int8", intrinsic=WMMA_INT8).source
    # The 64x64 accumulator is 4x4 fragments; each of the 2x2 warps keeps 2x2 of them, and
    # two copies of its A and B fragments (double-buffered across the pipeline's barrier).
    assert "int> C_wmma_accumulator[2][2];" in source
    assert "row_major> A_shared_wmma_matrix_a[2][2][1];" in source
    # The int8 B tile is stored transposed in shared memory: its fragments load col_major,
    # with the panel's 16-byte pitch as ldm, and its copies move 16 bytes of k at once.
    assert "col_major> B_global_shared_wmma_matrix_b[2][1][2];" in source
    assert re.search(r"load_matrix_sync\(B_global_shared_wmma_matrix_b\[copy_?\d*\]\[0\]\[\w+\], "
                     r"\(&B_global_shared\[\(stage_?\d*\) \* 1024 \+ \(\(v1_o_?\d* \* 16\)\) "
                     r"\* 16 \+ \(0\)\]\), 16\);", source)
    assert "tz_cp_async16(&B_global_shared[(0) * 1024 + " in source


def test_shared_stage_is_fenced_before_and_after_its_readers():
    source = emitted("gemm_fp16", pipeline=False).source
    loop = source[source.index("for (int k_0"):]
    assert loop.count("__syncthreads();") == 2
    assert loop.index("__syncthreads();") < loop.index("load_matrix_sync")


def test_double_buffered_step_keeps_the_tensor_pipe_busy_across_its_barrier():
    source = emitted("gemm_fp16").source
    before, loop = source.split("for (int k_0", 1)
    # Prologue: both stage-0 copies are issued and committed, then waited for, and the
    # warps load the first slice's fragments into copy 0 before the loop, which is
    # unrolled by its 2 stages (64^3 has two 32-deep steps of two 16-deep slices).
    assert before.count("tz_cp_async16(&") == 2
    head = before[before.rindex("tz_cp_async_commit();"):]
    assert head.index("tz_cp_async_wait_group<0>();") < head.index("__syncthreads();") < (
        head.index("load_matrix_sync(A_shared_wmma_matrix_a[copy]"))
    assert head.rstrip().endswith("#pragma unroll 2")
    # Slice 0 loads slice 1's fragments, then issues and commits the prefetch, then
    # computes; slice 1 waits and passes the barrier, loads the next step's first slice
    # (guarded) and computes on the fragments loaded before the barrier.
    order = ["load_matrix_sync", "if (((k_0 + 1) < 2))",
             "tz_cp_async16(&A_shared[(((k_0 + 1) % 2)) * 2560 + ", "tz_cp_async_commit();",
             "mma_sync", "tz_cp_async_wait_group<0>();", "__syncthreads();",
             "if (((k_0 + 1) < 2))", "load_matrix_sync", "mma_sync"]
    position = 0
    for text in order:
        position = loop.index(text, position) + len(text)
    assert loop.count("__syncthreads();") == 1
    # Slice 1's fragments come from the current stage into copy 1; the next step's from
    # its stage into copy 0.
    copies = re.findall(r"const int (stage_?\d*) = ([^;]+);\n +const int copy_?\d* = (\d);",
                        loop)
    assert {(stage, copy) for _, stage, copy in copies} == {
        ("(k_0 % 2)", "1"), ("((k_0 + 1) % 2)", "0")}


def test_copies_into_shared_memory_move_16_bytes_at_once():
    source = emitted("gemm_fp16", pipeline=False).source
    # 64 x 32 halves of A and 32 x 64 of B: 256 pieces of 8 each, one per thread.
    assert source.count("tz_copy16(&") == 2
    assert "scalar copy" not in source


def test_narrow_int8_tiles_still_move_16_bytes_and_a_guarded_copy_says_why_not():
    # 100 x 60 x 36 goes to m8n32k16 tiles: the 8-wide operand is stored with its 16 k
    # values as rows (transposed), so both operands' copies move 16 bytes at once; the
    # unpadding store after each fragment is guarded at the edges and stays scalar.
    source = emitted("gemm_int8_odd", pipeline=False).source
    assert source.count("tz_copy16(&") == 2
    assert "// scalar copy: the copy is guarded by a predicate" in source


@pytest.mark.parametrize("name", ["matmul_relu_fp16", "matmul_requant_int8"])
def test_epilogues_run_in_the_gemm_kernel_on_a_staging_tile_per_warp(name):
    kernel = emitted(name, intrinsic=WMMA.get(name))
    # One kernel, after the int8 B operand's transpose.
    assert [l.tensorized for l in kernel.launches] == ([False, True] if "int8" in name else [True])
    source = kernel.source
    # 2 x 2 warps of 32 x 32 / 4 = 16 x 16 tiles, 20 elements a row (16 + 16 bytes padding).
    stage = "acc_shared" if "requant" in name else "Y_shared"
    assert f"{stage}[1280];" in source
    assert f"store_matrix_sync((&{stage}[tz_warp * 320 + " in source
    # Lanes read the tile only after the store, and the next store waits for their reads.
    after_store = source[source.index("store_matrix_sync"):]
    assert after_store.count("__syncwarp();") == 2


def test_packing_stages_become_data_parallel_kernels():
    # The weights' reindexing (the padding is the GEMM's zero-filling copy, the output's
    # transpose back its epilogue).
    kernel = emitted("conv2d_nhwc_int8")
    assert [l.tensorized for l in kernel.launches] == [False, True]
    assert [l.block for l in kernel.launches].count((256, 1, 1)) == 1


def test_an_nhwc_im2col_is_gathered_by_the_tiles_copy():
    # Implicit GEMM: the im2col of the activations is in the address of each 16-byte copy
    # of the B tile, read from the input (16 channels of one pixel at a time, zeros for the
    # halo); no kernel writes the im2col buffer or the padded input.
    kernel = emitted("conv2d_nhwc_int8")
    assert {"pad", "pad_reindex"}.isdisjoint(b.name for b in kernel.buffers)
    assert re.search(r"tz_cp_async16_zfill\(&pad_reindex_shared\[[^;]*\], "
                     r"&I\[\(\(ax0_\d+ / 64\)\) \* 1024 \+ [^;]*, tz_inside\w*\);", kernel.source)
    # NCHW: the k digits end in a column offset (w + rw), so the gather would not be 16
    # bytes; its im2col stays a kernel of its own.
    assert "pad_reindex" in [b.name for b in emitted("conv2d_nchw_int8").buffers]


def test_a_transposed_reindex_is_read_in_place():
    # dense: Y = X W^T computed as Y^T = W X^T; X^T's reindexing folds into the tiles' copy
    # of X itself, so the GEMM is the one launch.
    kernel = emitted("dense_int8")
    assert [l.tensorized for l in kernel.launches] == [True]
    assert kernel.params == ("X", "W", "Y")


@T.prim_func
def _bare_call(A: T.Buffer((16, 16), "float16"), B: T.Buffer((16, 16), "float16"),
               C: T.Buffer((16, 16), "float32")):
    Af = T.alloc_buffer((16, 16), "float16", scope="wmma.matrix_a")
    for i in T.thread_binding(1, thread="blockIdx.x"):
        with T.block("load"):
            T.reads(A[0:16, 0:16])
            T.writes(Af[0:16, 0:16])
            T.call_intrinsic("wmma_load_a_row_m16n16k16_f16", Af[0:16, 0:16], A[0:16, 0:16])


def test_warp_collective_call_outside_warp_loops_is_refused(registry):
    with pytest.raises(cuda.EmitError, match="outside any warp loop"):
        cuda.emit(_bare_call, registry)


@T.prim_func
def _fragment_element(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    Cf = T.alloc_buffer((16, 16), "float32", scope="wmma.accumulator")
    for i, j in T.grid(16, 16):
        with T.block("peek"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = Cf[vi, vj]


def test_fragment_read_element_by_element_is_refused(registry):
    with pytest.raises(cuda.EmitError, match="opaque to plain loads"):
        cuda.emit(_fragment_element, registry)
