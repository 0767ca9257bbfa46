# corpus: bytes that are not UTF-8 after the header (a Latin-1 comment)
# args: run {file}
# expect: {file}:14:41:
# expect: requires UTF-8 text, got byte e9 at byte offset
# exit: 2
from ir import script as T


@T.prim_func
def kernel(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j in T.grid(16, 16):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj]  # café au lait
