# corpus: --require-tensorized on arm with a kernel no arm intrinsic takes: fails before emulating
# args: run {file} --target arm --require-tensorized
# expect: FAIL tensorize   C: not tensorized
# expect: error: block 'C' is not tensorized: C is float32
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
