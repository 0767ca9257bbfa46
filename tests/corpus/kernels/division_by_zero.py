# corpus: integer division by zero in an index
# args: run {file}
# expect: {file}:14:27:
# expect: '//' requires a nonzero divisor, got 0
# exit: 2
from ir import script as T


@T.prim_func
def kernel(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j in T.grid(16, 16):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi // 0, vj]
