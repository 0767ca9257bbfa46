# corpus: a loop of zero iterations
# args: run {file}
# expect: {file}:11:5:
# expect: loop j requires a positive constant extent, got 0
# exit: 2
from ir import script as T


@T.prim_func
def kernel(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j in T.grid(16, 0):
        with T.block("C"):
            vi = T.axis.spatial(16, i)
            C[vi, 0] = A[vi, 0]
