# corpus: a planted tile cache entry holding the block to an intrinsic no description declares (the block would go untensorized)
# slow: yes
# args: run {file} --target arm --quiet
# env: TENSORIZE_CACHE_DIR={tmp}/cache
# expect: warning: tile cache {tmp}/cache/cpu_tiles/arm.json: entry "arm_sdot_lane 40x5x6 int8,int8,int32 +neon,+dotprod" is ignored: it holds its block to intrinsic "arm_sdot_v9", which no loaded description of target arm declares
# expect: ok   tensorize   C: arm_sdot_lane
# expect: all 800 elements equal (exact)
# exit: 0

import json
import os
from pathlib import Path

import numpy as np

from intrinsics import default_registry
from ir import script as T
from tensorize import __version__
from tensorize.engine.cpu_tune import description_hash

# Planted when the run imports this file, before it reads the cache: current (this version,
# these descriptions), so the entries are read.
CACHE = Path(os.environ["TENSORIZE_CACHE_DIR"]) / "cpu_tiles" / "arm.json"
CACHE.parent.mkdir(parents=True, exist_ok=True)
CACHE.write_text(json.dumps({
    "version": __version__, "description": description_hash("arm", default_registry()),
    "tiles": {"arm_sdot_lane 40x5x6 int8,int8,int32 +neon,+dotprod":
              {"rows": 8, "vectors": 2, "intrinsic": "arm_sdot_v9"},
              "arm_sdot_v9 40x5x6 int8,int8,int32 +neon,+dotprod": {"rows": 8, "vectors": 2}}}))


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
