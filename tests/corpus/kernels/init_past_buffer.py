# corpus: a reduction's init writing past its buffer
# args: run {file}
# expect: {file}:15:17:
# expect: C[vi, vj + 1]: index 1 ranges over [1, 16] but C has extent 16 in dimension 1
# exit: 2
from ir import script as T


@T.prim_func
def kernel(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj + 1] = 0.0
            C[vi, vj] = C[vi, vj] + A[vi, vk]
