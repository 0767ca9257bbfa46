"""A strided convolution, NCHW, float32, built with the TE builder: the same kernel as
``examples/script/conv2d_nchw.py`` (3x3 window, stride 2, padding 1 by default).

Blocks are named after their computes: ``pad`` fills the zero-padded input and ``conv``, the
output parameter, reads it at rows ``stride * h + rh`` and columns ``stride * w + rw``.
"""

import ir
from ir import te


def _inside(x: ir.Expr, low: int, high: int) -> ir.Expr:
    """``low <= x < high``, built as the script syntax builds it."""
    return ir.and_(ir.const(low, "int32") <= x, x < high)


def build(in_channels: int = 32, height: int = 28, width: int = 28, out_channels: int = 64,
          kernel: int = 3, stride: int = 2, pad: int = 1) -> ir.PrimFunc:
    """Batch 1; weights are OIHW."""
    out_h = (height + 2 * pad - kernel) // stride + 1
    out_w = (width + 2 * pad - kernel) // stride + 1
    I = te.placeholder((1, in_channels, height, width), "float32", "I")
    W = te.placeholder((out_channels, in_channels, kernel, kernel), "float32", "W")
    # A select evaluates both values, so the load is clamped inside the input everywhere.
    P = te.compute((1, in_channels, height + 2 * pad, width + 2 * pad),
                   lambda n, c, h, w: te.if_then_else(
                       ir.and_(_inside(h, pad, height + pad), _inside(w, pad, width + pad)),
                       I[n, c, ir.min_(ir.max_(h - pad, 0), height - 1),
                         ir.min_(ir.max_(w - pad, 0), width - 1)],
                       0.0), "pad")
    ci = te.reduce_axis(in_channels, "ci")
    rh = te.reduce_axis(kernel, "rh")
    rw = te.reduce_axis(kernel, "rw")
    O = te.compute((1, out_channels, out_h, out_w), lambda n, co, h, w: te.sum(
        P[n, ci, h * stride + rh, w * stride + rw] * W[co, ci, rh, rw], axis=[ci, rh, rw]),
        "conv")
    return te.create_prim_func([I, W, O], "conv2d_nchw")
