# corpus: a float built from a string that names no value
# args: run {file}
# expect: {file}:14:35:
# expect: T.float32 takes a string only for "inf", "-inf" or "nan"
# exit: 2
from ir import script as T


@T.prim_func
def kernel(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j in T.grid(16, 16):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = T.float32("banana")
