"""A strided convolution, NCHW, float32: stride 2, padding 1, 3x3 window.

Input 1 x 32 x 28 x 28, weights 64 x 32 x 3 x 3 (OIHW), output 1 x 64 x 14 x 14. A first
block pads the input with zeros (clamping the loaded index, since a select evaluates both
values); the convolution reads the padded input at rows 2 * h + rh and columns 2 * w + rw.
"""

import numpy as np

from ir import script as T


@T.prim_func
def conv2d_nchw(I: T.Buffer((1, 32, 28, 28), "float32"),
                W: T.Buffer((64, 32, 3, 3), "float32"),
                O: T.Buffer((1, 64, 14, 14), "float32")):
    P = T.alloc_buffer((1, 32, 30, 30), "float32")
    for n, c, h, w in T.grid(1, 32, 30, 30):
        with T.block("pad"):
            vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
            P[vn, vc, vh, vw] = T.if_then_else(
                1 <= vh < 29 and 1 <= vw < 29,
                I[vn, vc, T.min(T.max(vh - 1, 0), 27), T.min(T.max(vw - 1, 0), 27)],
                T.float32(0))
    for n, co, h, w, ci, rh, rw in T.grid(1, 64, 14, 14, 32, 3, 3):
        with T.block("conv"):
            vn, vco, vh, vw, vci, vrh, vrw = T.axis.remap(
                "SSSSRRR", [n, co, h, w, ci, rh, rw])
            with T.init():
                O[vn, vco, vh, vw] = T.float32(0)
            O[vn, vco, vh, vw] += P[vn, vci, vh * 2 + vrh, vw * 2 + vrw] * W[vco, vci, vrh, vrw]


def reference(I, W):
    """Stride 2, padding 1 convolution, computed in float64."""
    padded = np.pad(I.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, W.shape[0], 14, 14))
    for rh in range(3):
        for rw in range(3):
            window = padded[:, :, rh:rh + 28:2, rw:rw + 28:2]
            out += np.einsum("nchw,oc->nohw", window, W[:, :, rh, rw].astype(np.float64))
    return out
