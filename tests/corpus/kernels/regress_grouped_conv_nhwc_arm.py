# corpus: a grouped NHWC convolution (4 groups folded into 64 channels) runs exactly on arm
# slow: yes
# args: run {file} --target arm
# expect: ok   tensorize   conv: arm_sdot_lane
# expect: ok   run         O on unicorn
# expect: ok   reference   O against numpy reference(...): all 16384 elements equal (exact)
# exit: 0
"""Issue 22, item 11: B (the input) depends on the output channel, the register tile's row,
so its register stage holds one panel a row; the engine once loaded it with ld1x4 as if it
held one, and the code generator refused the tile ("requires 64 contiguous int8 elements").

Input 1 x 16 x 16 x 64, weights 3 x 3 x 16 x 64 (HWIO, 16 input channels per output
channel), stride 1, padding 1: output channel ``o`` reads channels ``o // 16 * 16 + rc``.
"""

import numpy as np

from ir import script as T


@T.prim_func
def conv(I: T.Buffer((1, 16, 16, 64), "int8"), W: T.Buffer((3, 3, 16, 64), "int8"),
         O: T.Buffer((1, 16, 16, 64), "int32")):
    P = T.alloc_buffer((1, 18, 18, 64), "int8")
    for n, h, w, c in T.grid(1, 18, 18, 64):
        with T.block("pad"):
            vn, vh, vw, vc = T.axis.remap("SSSS", [n, h, w, c])
            P[vn, vh, vw, vc] = T.if_then_else(
                1 <= vh < 17 and 1 <= vw < 17,
                I[vn, T.min(T.max(vh - 1, 0), 15), T.min(T.max(vw - 1, 0), 15), vc],
                T.int8(0))
    for n, h, w, co, rh, rw, rc in T.grid(1, 16, 16, 64, 3, 3, 16):
        with T.block("conv"):
            vn, vh, vw, vco, vrh, vrw, vrc = T.axis.remap(
                "SSSSRRR", [n, h, w, co, rh, rw, rc])
            with T.init():
                O[vn, vh, vw, vco] = 0
            O[vn, vh, vw, vco] += (T.cast(P[vn, vh + vrh, vw + vrw, vco // 16 * 16 + vrc],
                                          "int32")
                                   * T.cast(W[vrh, vrw, vrc, vco], "int32"))


def reference(I, W):
    """Each group of 16 channels convolved with its own 16 filters, exact in int64."""
    padded = np.pad(I.astype(np.int64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((1, 16, 16, 64), np.int64)
    for g in range(4):
        channels = slice(16 * g, 16 * g + 16)
        for rh in range(3):
            for rw in range(3):
                window = padded[:, rh:rh + 16, rw:rw + 16, channels]
                out[..., channels] += np.einsum("nhwc,co->nhwo", window,
                                                W[rh, rw, :, channels].astype(np.int64))
    return out.astype(np.int32)
