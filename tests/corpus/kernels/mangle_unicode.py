# corpus: non-ASCII kernel, buffer, block and iterator names (Python identifiers may be Unicode)
# args: run {file} --func größe
# expect: ok   execute
# expect: Ärger against numpy reference(...): all 1024 elements equal (exact)
# exit: 0
"""Non-ASCII names, once an internal UnicodeEncodeError (the JIT looks its symbol up in
ASCII): ``größe`` (int8) runs on the host, npu, arm and cuda, ``naïve`` (uint8 activations,
VPDPBUSD's operand types) on x86; see the mangle_unicode_* cases. ``gr__e`` and ``größe``
were one identifier when every non-ASCII letter became ``_``."""

import numpy as np

from ir import script as T


@T.prim_func
def größe(größe: T.Buffer((32, 32), "int8"), gr__e: T.Buffer((32, 32), "int8"),
          Ärger: T.Buffer((32, 32), "int32")):
    for i, jö, k in T.grid(32, 32, 32):
        with T.block("Ç"):
            vi, vj, vk = T.axis.remap("SSR", [i, jö, k])
            with T.init():
                Ärger[vi, vj] = 0
            Ärger[vi, vj] += T.cast(größe[vi, vk], "int32") * T.cast(gr__e[vk, vj], "int32")


@T.prim_func
def naïve(straße: T.Buffer((32, 32), "uint8"), π: T.Buffer((32, 32), "int8"),
          日本: T.Buffer((32, 32), "int32")):
    for ι, ж, k in T.grid(32, 32, 32):
        with T.block("Ω"):
            vi, vj, vk = T.axis.remap("SSR", [ι, ж, k])
            with T.init():
                日本[vi, vj] = 0
            日本[vi, vj] += T.cast(straße[vi, vk], "int32") * T.cast(π[vk, vj], "int32")


def reference(a, b):
    """The exact int32 product."""
    return a.astype(np.int32) @ b.astype(np.int32)
