# corpus: --trace asked for, but no NPU program ran (fallback to the host)
# args: run {file} --target npu --allow-fallback --trace {tmp}/t.json
# expect: FAIL trace
# expect: no NPU program ran
# exit: 1

from ir import script as T


@T.prim_func
def gemm(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"),
         C: T.Buffer((16, 16), "float32")):
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0.0
            C[vi, vj] += A[vi, vk] * B[vk, vj]
