"""A 3x3 convolution, NHWC, float16 inputs accumulated in float32.

Input 1 x 14 x 14 x 32, weights 3 x 3 x 32 x 32 (HWIO), stride 1, padding 1, output
1 x 14 x 14 x 32. A first block pads the input with zeros; the convolution reduces over the
window (rh, rw) and the input channels (rc), which the engine fuses into one GEMM's K.
``tensorize run examples/script/conv2d_nhwc_fp16.py --target cuda`` (WMMA or ``mma.sync``), or
``--target arm --features +fp16fml`` (FMLAL).

A select evaluates both of its values, so the padding block clamps the index it loads with
to stay inside the input even where the zero is chosen.
"""

import numpy as np

from ir import script as T


@T.prim_func
def conv2d_nhwc_fp16(I: T.Buffer((1, 14, 14, 32), "float16"),
                   W: T.Buffer((3, 3, 32, 32), "float16"),
                   O: T.Buffer((1, 14, 14, 32), "float32")):
    P = T.alloc_buffer((1, 16, 16, 32), "float16")
    for n, h, w, c in T.grid(1, 16, 16, 32):
        with T.block("pad"):
            vn, vh, vw, vc = T.axis.remap("SSSS", [n, h, w, c])
            P[vn, vh, vw, vc] = T.if_then_else(
                1 <= vh < 15 and 1 <= vw < 15,
                I[vn, T.min(T.max(vh - 1, 0), 13), T.min(T.max(vw - 1, 0), 13), vc],
                T.float16(0))
    for n, h, w, co, rh, rw, rc in T.grid(1, 14, 14, 32, 3, 3, 32):
        with T.block("conv"):
            vn, vh, vw, vco, vrh, vrw, vrc = T.axis.remap(
                "SSSSRRR", [n, h, w, co, rh, rw, rc])
            with T.init():
                O[vn, vh, vw, vco] = T.float32(0)
            O[vn, vh, vw, vco] += (T.cast(P[vn, vh + vrh, vw + vrw, vrc], "float32")
                                   * T.cast(W[vrh, vrw, vrc, vco], "float32"))


def reference(I, W):
    """Stride 1, padding 1 convolution in float64 (every product exact there), rounded once
    to float32."""
    padded = np.pad(I.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    height, width = I.shape[1:3]
    out = np.zeros((1, height, width, W.shape[3]), np.float64)
    for rh in range(3):
        for rw in range(3):
            window = padded[:, rh:rh + height, rw:rw + width, :]
            out += np.einsum("nhwc,co->nhwo", window, W[rh, rw].astype(np.float64))
    return out.astype(np.float32)
