# corpus: an integer literal far past int32 as a loop extent
# args: run {file}
# expect: {file}:11:5:
# expect: loop i requires an extent of at most 2147483647 (its variable is int32)
# exit: 2
from ir import script as T


@T.prim_func
def kernel(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i in range(100000000000000000000000000000):
        with T.block("C"):
            vi = T.axis.spatial(16, i)
            C[vi, 0] = A[vi, 0]
