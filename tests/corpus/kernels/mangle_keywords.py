# corpus: kernel, buffer, block and iterator names that are C++ keywords or CUDA built-ins
# args: run {file} --func asm
# expect: ok   execute
# expect: threadIdx against numpy reference(...): all 1024 elements equal (exact)
# exit: 0
"""Names generated code cannot hold as they are: ``asm``, ``int``, ``register``, ``new``,
``delete``, ``auto``, ``char`` (C++ keywords), ``threadIdx``, ``blockIdx``, ``blockDim``,
``gridDim`` (CUDA's built-in variables; macros in the host emulation), blocks ``class`` and
``template``. ``asm`` (int8) runs on the host, npu, arm and cuda, ``register`` (uint8
activations, VPDPBUSD's operand types) on x86; see the mangle_keywords_* cases."""

import numpy as np

from ir import script as T


@T.prim_func
def asm(asm: T.Buffer((32, 32), "int8"), int: T.Buffer((32, 32), "int8"),
        threadIdx: T.Buffer((32, 32), "int32")):
    for blockIdx, new, register in T.grid(32, 32, 32):
        with T.block("class"):
            vi, vj, vk = T.axis.remap("SSR", [blockIdx, new, register])
            with T.init():
                threadIdx[vi, vj] = 0
            threadIdx[vi, vj] += T.cast(asm[vi, vk], "int32") * T.cast(int[vk, vj], "int32")


@T.prim_func
def register(new: T.Buffer((32, 32), "uint8"), delete: T.Buffer((32, 32), "int8"),
             blockDim: T.Buffer((32, 32), "int32")):
    for gridDim, auto, char in T.grid(32, 32, 32):
        with T.block("template"):
            vi, vj, vk = T.axis.remap("SSR", [gridDim, auto, char])
            with T.init():
                blockDim[vi, vj] = 0
            blockDim[vi, vj] += T.cast(new[vi, vk], "int32") * T.cast(delete[vk, vj], "int32")


def reference(a, b):
    """The exact int32 product."""
    return a.astype(np.int32) @ b.astype(np.int32)
