# corpus: T.if_then_else taken for a guard (it evaluates both sides)
# args: run {file}
# expect: {file}:14:49:
# expect: T.if_then_else evaluates both branches
# exit: 2
from ir import script as T


@T.prim_func
def kernel(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j in T.grid(16, 16):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = T.if_then_else(vi < 15, A[vi + 1, vj], 0.0)
