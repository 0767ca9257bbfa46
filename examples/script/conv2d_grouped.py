"""A grouped 3x3 convolution, NHWC, int8 -> int32: 64 channels in 4 groups of 16.

Input 1 x 28 x 28 x 64, weights 3 x 3 x 16 x 64 (HWIO, 16 input channels per output
channel), stride 1, padding 1, output 1 x 28 x 28 x 64. Output channel ``o`` reads input
channels ``o // 16 * 16 + rc``: the group is folded into the channel axes, as ONNX's
``group`` attribute is imported. On ``--target cuda`` it runs as a batched GEMM, one per
group.
"""

import numpy as np

from ir import script as T


@T.prim_func
def conv2d_grouped(I: T.Buffer((1, 28, 28, 64), "int8"), W: T.Buffer((3, 3, 16, 64), "int8"),
                   O: T.Buffer((1, 28, 28, 64), "int32")):
    P = T.alloc_buffer((1, 30, 30, 64), "int8")
    for n, h, w, c in T.grid(1, 30, 30, 64):
        with T.block("pad"):
            vn, vh, vw, vc = T.axis.remap("SSSS", [n, h, w, c])
            P[vn, vh, vw, vc] = T.if_then_else(
                1 <= vh < 29 and 1 <= vw < 29,
                I[vn, T.min(T.max(vh - 1, 0), 27), T.min(T.max(vw - 1, 0), 27), vc],
                T.int8(0))
    for n, h, w, co, rh, rw, rc in T.grid(1, 28, 28, 64, 3, 3, 16):
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
    height, width = I.shape[1:3]
    out = np.zeros((1, height, width, W.shape[3]), np.int64)
    for g in range(4):
        channels = slice(16 * g, 16 * g + 16)
        for rh in range(3):
            for rw in range(3):
                window = padded[:, rh:rh + height, rw:rw + width, channels]
                out[..., channels] += np.einsum("nhwc,co->nhwo", window,
                                                W[rh, rw, :, channels].astype(np.int64))
    return out.astype(np.int32)
