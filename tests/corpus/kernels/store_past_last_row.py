# corpus: a store one row past the end of its buffer
# args: run {file}
# expect: {file}:14:13:
# expect: C[vi + 1, vj]: index 0 ranges over [1, 16] but C has extent 16 in dimension 0
# exit: 2
from ir import script as T


@T.prim_func
def kernel(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j in T.grid(16, 16):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi + 1, vj] = A[vi, vj]
