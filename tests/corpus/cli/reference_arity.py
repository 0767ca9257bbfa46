# corpus: a reference() taking the wrong number of arguments
# args: run {file} --target npu
# expect: {file}:21: reference(A) requires to take the kernel's 2 input(s) (A, B) in parameter order

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


def reference(A):
    return A.astype(np.int32) @ A.astype(np.int32)
