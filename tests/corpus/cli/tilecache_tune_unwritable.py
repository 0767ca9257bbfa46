# corpus: --tune with the cache directory pointing at a file (nothing can be read or saved there)
# slow: yes
# args: run {file} --target arm --quiet --tune
# env: TENSORIZE_CACHE_DIR={tmp}/not_a_directory
# expect: warning: tile cache {tmp}/not_a_directory/cpu_tiles/arm.json is ignored: it cannot be read (Not a directory)
# expect: warning: tile cache {tmp}/not_a_directory/cpu_tiles/arm.json is not saved:
# expect: measured best
# expect: all 800 elements equal (exact)
# exit: 0

import os
from pathlib import Path

import numpy as np

from ir import script as T

# Planted when the run imports this file, before it reads the cache.
Path(os.environ["TENSORIZE_CACHE_DIR"]).write_text("a file, not a directory\n")


@T.prim_func
def gemm(A: T.Buffer((40, 24), "int8"), B: T.Buffer((24, 20), "int8"),
         C: T.Buffer((40, 20), "int32")):
    for i, j, k in T.grid(40, 20, 24):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")


def reference(A, B):
    return A.astype(np.int32) @ B.astype(np.int32)
