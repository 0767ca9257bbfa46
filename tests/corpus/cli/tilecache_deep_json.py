# corpus: a tile cache file of a million nested JSON arrays (the parser runs out of recursion)
# slow: yes
# args: run {file} --target arm --quiet
# env: TENSORIZE_CACHE_DIR={tmp}/cache
# expect: warning: tile cache {tmp}/cache/cpu_tiles/arm.json is ignored: it cannot be read (maximum recursion depth exceeded
# expect: all 800 elements equal (exact)
# exit: 0

import os
from pathlib import Path

import numpy as np

from ir import script as T

# Planted when the run imports this file, before it reads the cache.
CACHE = Path(os.environ["TENSORIZE_CACHE_DIR"]) / "cpu_tiles" / "arm.json"
CACHE.parent.mkdir(parents=True, exist_ok=True)
CACHE.write_text("[" * 1_000_000)


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
