# corpus: a reference() returning more arrays than the kernel has outputs
# args: run {file}
# expect: {file}: reference(...) requires to return one array per output (C), 1 in all, got 2

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
    return A.astype(np.int32) @ B.astype(np.int32), A
