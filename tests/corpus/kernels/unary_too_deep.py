# corpus: operands nested inside operands past the limit (unary minus)
# args: run {file}
# expect: {file}:14:25:
# expect: expression nests operands 121 levels deep
# exit: 2
from ir import script as T


@T.prim_func
def kernel(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j in T.grid(16, 16):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = ------------------------------------------------------------------------------------------------------------------------A[vi, vj]
