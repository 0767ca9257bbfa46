"""Hand-tensorized NPU kernels, written in script syntax, for the backend's tests."""

from __future__ import annotations

from ir import PrimFunc
from ir import script as T


def tiled_gemm(m: int, n: int, k: int, tm: int = 64, t: int = 16) -> PrimFunc:
    """C = A @ B (int8 -> int32) as an NPU with a t x t array runs it: per t-column block n
    and t-deep step k, load a tm x t input tile and a t x t weight tile, run tm/t GEMMs
    (resetting at the first step), then store the tm x t accumulator tile. Needs t | m, n, k
    and tm | m."""
    template = _TILED.replace("16", str(t))
    return T.parse(template.format(m=m, n=n, k=k, tm=tm, mt=m // tm, nt=n // t, kt=k // t,
                                   it=tm // t))


_TILED = '''
@T.prim_func
def gemm(A: T.Buffer(({m}, {k}), "int8"), B: T.Buffer(({k}, {n}), "int8"),
         C: T.Buffer(({m}, {n}), "int32")):
    A_inp = T.alloc_buffer(({tm}, 16), "int8", scope="npu.inp")
    B_wgt = T.alloc_buffer((16, 16), "int8", scope="npu.wgt")
    C_acc = T.alloc_buffer(({tm}, 16), "int32", scope="npu.acc")
    for mo, no in T.grid({mt}, {nt}):
        for ko in range({kt}):
            for mi in range({it}):
                T.call_intrinsic("npu_load_inp", A_inp[mi * 16:mi * 16 + 16, 0:16],
                                 A[mo * {tm} + mi * 16:mo * {tm} + mi * 16 + 16,
                                   ko * 16:ko * 16 + 16])
            T.call_intrinsic("npu_load_wgt", B_wgt[0:16, 0:16],
                             B[ko * 16:ko * 16 + 16, no * 16:no * 16 + 16])
            for mi in range({it}):
                if ko == 0:
                    T.call_intrinsic("npu_gemm_reset", A_inp[mi * 16:mi * 16 + 16, 0:16],
                                     B_wgt[0:16, 0:16], C_acc[mi * 16:mi * 16 + 16, 0:16])
                else:
                    T.call_intrinsic("npu_gemm", A_inp[mi * 16:mi * 16 + 16, 0:16],
                                     B_wgt[0:16, 0:16], C_acc[mi * 16:mi * 16 + 16, 0:16])
        for mi in range({it}):
            T.call_intrinsic("npu_store_acc", C[mo * {tm} + mi * 16:mo * {tm} + mi * 16 + 16,
                                                no * 16:no * 16 + 16],
                             C_acc[mi * 16:mi * 16 + 16, 0:16])
'''
