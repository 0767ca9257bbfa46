"""Hand-tensorized NPU kernels, written in script syntax, for the backend's tests."""

from __future__ import annotations

from ir import PrimFunc
from ir import script as T


def tiled_gemm(m: int, n: int, k: int, tm: int = 64) -> PrimFunc:
    """C = A @ B (int8 -> int32) as the NPU runs it: per 16-column block n and 16-deep step
    k, load a tm x 16 input tile and a 16 x 16 weight tile, run tm/16 GEMMs (resetting at the
    first step), then store the tm x 16 accumulator tile. Needs 16 | m, n, k and tm | m."""
    return T.parse(f'''
@T.prim_func
def gemm(A: T.Buffer(({m}, {k}), "int8"), B: T.Buffer(({k}, {n}), "int8"),
         C: T.Buffer(({m}, {n}), "int32")):
    A_inp = T.alloc_buffer(({tm}, 16), "int8", scope="npu.inp")
    B_wgt = T.alloc_buffer((16, 16), "int8", scope="npu.wgt")
    C_acc = T.alloc_buffer(({tm}, 16), "int32", scope="npu.acc")
    for mo, no in T.grid({m // tm}, {n // 16}):
        for ko in range({k // 16}):
            for mi in range({tm // 16}):
                T.call_intrinsic("npu_load_inp", A_inp[mi * 16:mi * 16 + 16, 0:16],
                                 A[mo * {tm} + mi * 16:mo * {tm} + mi * 16 + 16,
                                   ko * 16:ko * 16 + 16])
            T.call_intrinsic("npu_load_wgt", B_wgt[0:16, 0:16],
                             B[ko * 16:ko * 16 + 16, no * 16:no * 16 + 16])
            for mi in range({tm // 16}):
                if ko == 0:
                    T.call_intrinsic("npu_gemm_reset", A_inp[mi * 16:mi * 16 + 16, 0:16],
                                     B_wgt[0:16, 0:16], C_acc[mi * 16:mi * 16 + 16, 0:16])
                else:
                    T.call_intrinsic("npu_gemm", A_inp[mi * 16:mi * 16 + 16, 0:16],
                                     B_wgt[0:16, 0:16], C_acc[mi * 16:mi * 16 + 16, 0:16])
        for mi in range({tm // 16}):
            T.call_intrinsic("npu_store_acc", C[mo * {tm} + mi * 16:mo * {tm} + mi * 16 + 16,
                                                no * 16:no * 16 + 16],
                             C_acc[mi * 16:mi * 16 + 16, 0:16])
''')
