"""Counting executed intrinsic calls: loops walked, guards evaluated."""

from __future__ import annotations

from ir import script as T
from tensorize.engine.count import count_calls
from tests.targets.npu.kernels import tiled_gemm


def test_counts_follow_the_loop_extents_and_branches():
    counts = count_calls(tiled_gemm(64, 32, 48, 32))
    tiles = 2 * 2  # (m / tm) x (n / 16)
    assert counts == {"npu_load_inp": tiles * 3 * 2, "npu_load_wgt": tiles * 3,
                      "npu_gemm_reset": tiles * 2, "npu_gemm": tiles * 2 * 2,
                      "npu_store_acc": tiles * 2}


def test_a_false_predicate_skips_the_call():
    func = T.parse('''
@T.prim_func
def f(A: T.Buffer((48, 16), "int8"), B: T.Buffer((48, 16), "int8")):
    for io in range(3):
        with T.block("copy"):
            vi = T.axis.spatial(3, io)
            T.where(io * 16 < 40 - 16)
            T.reads(A[vi * 16:vi * 16 + 16, 0:16])
            T.writes(B[vi * 16:vi * 16 + 16, 0:16])
            T.call_intrinsic("npu_load_inp", B[vi * 16:vi * 16 + 16, 0:16],
                             A[vi * 16:vi * 16 + 16, 0:16])
''')
    assert count_calls(func) == {"npu_load_inp": 2}
