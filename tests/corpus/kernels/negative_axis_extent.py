# corpus: a block iterator with a negative extent
# args: run {file}
# expect: {file}:13:18:
# expect: iterator vi requires a positive constant extent, got -16
# exit: 2
from ir import script as T


@T.prim_func
def kernel(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i in range(16):
        with T.block("C"):
            vi = T.axis.spatial(-16, i)
            C[vi, 0] = A[vi, 0]
