# corpus: a kernel that is not valid Python
# args: run {file}
# expect: {file}:14:34:
# expect: invalid Python syntax: unmatched ']'
# exit: 2
from ir import script as T


@T.prim_func
def kernel(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j in T.grid(16, 16):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj]]
