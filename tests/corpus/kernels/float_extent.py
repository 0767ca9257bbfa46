# corpus: a loop extent written as a float literal
# args: run {file}
# expect: {file}:11:20:
# expect: range requires a constant integer, got 1e9
# exit: 2
from ir import script as T


@T.prim_func
def kernel(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i in range(1e9):
        with T.block("C"):
            vi = T.axis.spatial(16, i)
            C[vi, 0] = A[vi, 0]
