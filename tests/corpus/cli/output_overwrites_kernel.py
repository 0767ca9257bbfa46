# corpus: -o naming the kernel file itself
# args: run {file} --target npu --emit ir -o {file}
# expect: -o {file} would overwrite the kernel file {file}

from ir import script as T


@T.prim_func
def gemm(A: T.Buffer((16, 16), "int8"), B: T.Buffer((16, 16), "int8"),
         C: T.Buffer((16, 16), "int32")):
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
