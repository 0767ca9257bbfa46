# corpus: a kernel whose buffers would need 48 GiB (random inputs alone: MemoryError)
# slow: yes
# args: run {file} --target npu
# expect: {file}: kernel big requires its buffers to fit in 4.0 GiB (--max-bytes), got 48.0 GiB
# expect: C (65536, 65536) int32: 16.0 GiB
# isolate: yes

from ir import script as T


@T.prim_func
def big(A: T.Buffer((65536, 65536), "int32"), B: T.Buffer((65536, 65536), "int32"),
        C: T.Buffer((65536, 65536), "int32")):
    for i, j, k in T.grid(65536, 65536, 65536):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
