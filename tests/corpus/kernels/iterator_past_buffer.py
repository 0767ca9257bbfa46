# corpus: an iterator whose extent exceeds the dimension it indexes
# args: run {file}
# expect: {file}:14:35:
# expect: A[vi, vk]: index 1 ranges over [0, 16] but A has extent 16 in dimension 1
# exit: 2
from ir import script as T


@T.prim_func
def kernel(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, k in T.grid(16, 17):
        with T.block("C"):
            vi, vk = T.axis.remap("SR", [i, k])
            C[vi, 0] = C[vi, 0] + A[vi, vk]
