# corpus: a load from a buffer the kernel does not declare
# args: run {file}
# expect: {file}:14:25:
# expect: unknown buffer B; the buffers here are A, C
# exit: 2
from ir import script as T


@T.prim_func
def kernel(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j in T.grid(16, 16):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = B[vi, vj]
