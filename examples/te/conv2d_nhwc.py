"""A ResNet-50 3x3 convolution layer, NHWC, int8 -> int32, built with the TE builder: the same
kernel as ``examples/script/conv2d_nhwc.py``.

Blocks are named after their computes: ``pad`` fills the zero-padded input and ``conv``, the
output parameter, reduces over the window and the input channels.
"""

import ir
from ir import te


def _inside(x: ir.Expr, low: int, high: int) -> ir.Expr:
    """``low <= x < high``, built as the script syntax builds it."""
    return ir.and_(ir.const(low, "int32") <= x, x < high)


def build(height: int = 56, width: int = 56, in_channels: int = 64,
          out_channels: int = 64) -> ir.PrimFunc:
    """Batch 1, 3x3 window, stride 1, padding 1: the output has the input's height and width."""
    I = te.placeholder((1, height, width, in_channels), "int8", "I")
    W = te.placeholder((3, 3, in_channels, out_channels), "int8", "W")
    # A select evaluates both values, so the load is clamped inside the input everywhere.
    P = te.compute((1, height + 2, width + 2, in_channels), lambda n, h, w, c: te.if_then_else(
        ir.and_(_inside(h, 1, height + 1), _inside(w, 1, width + 1)),
        I[n, ir.min_(ir.max_(h - 1, 0), height - 1), ir.min_(ir.max_(w - 1, 0), width - 1), c],
        0), "pad")
    rh = te.reduce_axis(3, "rh")
    rw = te.reduce_axis(3, "rw")
    rc = te.reduce_axis(in_channels, "rc")
    O = te.compute((1, height, width, out_channels), lambda n, h, w, co: te.sum(
        ir.cast("int32", P[n, h + rh, w + rw, rc]) * ir.cast("int32", W[rh, rw, rc, co]),
        axis=[rh, rw, rc]), "conv")
    return te.create_prim_func([I, W, O], "conv2d_nhwc")
