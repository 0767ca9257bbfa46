# corpus: a reference off by 2**32, which narrowing it to the int32 output would hide
# args: run {file}
# expect: FAIL reference   C against numpy reference(...): 256 of 256 elements differ
# exit: 1

import numpy as np

from ir import script as T


@T.prim_func
def gemm(A: T.Buffer((16, 16), "int8"), B: T.Buffer((16, 16), "int8"),
         C: T.Buffer((16, 16), "int32")):
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")


def reference(A, B):
    return A.astype(np.int64) @ B.astype(np.int64) + 2**32
