"""The matmul + relu walk-through: split j by 4, reorder, reverse_compute_at the relu block,
decompose the reduction. The result must be the loop nest one would write by hand."""

from __future__ import annotations

import numpy as np

from ir import script as T
from ir import structural_equal
from targets import host
from tensorize.schedule import Schedule
from tests.tensorize.schedule.kernels import matmul_relu

EXPECTED = '''
@T.prim_func
def matmul_relu(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"),
                C: T.Buffer((16, 16), "float32")):
    Y = T.alloc_buffer((16, 16), "float32")
    for i, j_0 in T.grid(16, 4):
        for j_1_init in range(4):
            with T.block("Y_init"):
                vi_init = T.axis.spatial(16, i)
                vj_init = T.axis.spatial(16, j_0 * 4 + j_1_init)
                T.reads()
                T.writes(Y[vi_init, vj_init])
                Y[vi_init, vj_init] = 0.0
        for k, j_1 in T.grid(16, 4):
            with T.block("Y"):
                vi = T.axis.spatial(16, i)
                vj = T.axis.spatial(16, j_0 * 4 + j_1)
                vk = T.axis.reduce(16, k)
                T.reads(Y[vi, vj], A[vi, vk], B[vk, vj])
                T.writes(Y[vi, vj])
                Y[vi, vj] += A[vi, vk] * B[vk, vj]
        for ax0 in range(4):
            with T.block("C"):
                vi = T.axis.spatial(16, i)
                vj = T.axis.spatial(16, j_0 * 4 + ax0)
                T.reads(Y[vi, vj])
                T.writes(C[vi, vj])
                C[vi, vj] = T.max(Y[vi, vj], 0.0)
'''


def numpy_loops(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """The same loop structure written by hand over numpy arrays."""
    Y = np.empty((16, 16), np.float32)
    C = np.empty((16, 16), np.float32)
    for i in range(16):
        for j0 in range(4):
            for j1 in range(4):
                Y[i, j0 * 4 + j1] = 0
            for k in range(16):
                for j1 in range(4):
                    j = j0 * 4 + j1
                    Y[i, j] = Y[i, j] + A[i, k] * B[k, j]
            for j1 in range(4):
                j = j0 * 4 + j1
                C[i, j] = max(Y[i, j], 0)
    return C


def walk_through() -> Schedule:
    sch = Schedule(matmul_relu(16, 16, 16))
    block_y = sch.get_block("Y")
    i, j, k = sch.get_loops(block_y)
    j0, j1 = sch.split(j, [None, 4])
    sch.reorder(j0, k, j1)
    sch.reverse_compute_at(sch.get_block("C"), j0)
    sch.decompose_reduction(block_y, k)
    return sch


def test_walk_through_gives_the_hand_written_loop_nest():
    assert structural_equal(walk_through().func, T.parse(EXPECTED))


def test_walk_through_computes_what_the_numpy_loops_compute():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((16, 16)).astype(np.float32)
    B = rng.standard_normal((16, 16)).astype(np.float32)
    got = host.run(walk_through().func, [A, B])["C"]
    np.testing.assert_allclose(got, numpy_loops(A, B), rtol=1e-5, atol=1e-5)


def test_walk_through_trace_replays():
    sch = walk_through()
    replayed = Schedule.replay(matmul_relu(16, 16, 16), sch.replay_trace())
    assert structural_equal(replayed.func, sch.func)
