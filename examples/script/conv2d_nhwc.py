"""A ResNet-50 3x3 convolution layer, NHWC, int8 -> int32.

Input 1 x 56 x 56 x 64, weights 3 x 3 x 64 x 64 (HWIO), stride 1, padding 1, output
1 x 56 x 56 x 64. A first block pads the input with zeros; the convolution reduces over the
window (rh, rw) and the input channels (rc).

A select evaluates both of its values, so the padding block clamps the index it loads with
to stay inside the input even where the zero is chosen.
"""

import numpy as np

from ir import script as T


@T.prim_func
def conv2d_nhwc(I: T.Buffer((1, 56, 56, 64), "int8"), W: T.Buffer((3, 3, 64, 64), "int8"),
                O: T.Buffer((1, 56, 56, 64), "int32")):
    P = T.alloc_buffer((1, 58, 58, 64), "int8")
    for n, h, w, c in T.grid(1, 58, 58, 64):
        with T.block("pad"):
            vn, vh, vw, vc = T.axis.remap("SSSS", [n, h, w, c])
            P[vn, vh, vw, vc] = T.if_then_else(
                1 <= vh < 57 and 1 <= vw < 57,
                I[vn, T.min(T.max(vh - 1, 0), 55), T.min(T.max(vw - 1, 0), 55), vc],
                T.int8(0))
    for n, h, w, co, rh, rw, rc in T.grid(1, 56, 56, 64, 3, 3, 64):
        with T.block("conv"):
            vn, vh, vw, vco, vrh, vrw, vrc = T.axis.remap(
                "SSSSRRR", [n, h, w, co, rh, rw, rc])
            with T.init():
                O[vn, vh, vw, vco] = 0
            O[vn, vh, vw, vco] += (T.cast(P[vn, vh + vrh, vw + vrw, vrc], "int32")
                                   * T.cast(W[vrh, vrw, vrc, vco], "int32"))


def reference(I, W):
    """Stride 1, padding 1 convolution, exact in int64 then narrowed to int32."""
    padded = np.pad(I.astype(np.int64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    height, width = I.shape[1:3]
    out = np.zeros((1, height, width, W.shape[3]), np.int64)
    for rh in range(3):
        for rw in range(3):
            window = padded[:, rh:rh + height, rw:rw + width, :]
            out += np.einsum("nhwc,co->nhwo", window, W[rh, rw].astype(np.int64))
    return out.astype(np.int32)
