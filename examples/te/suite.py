"""The matching suite: small kernels of every shape the auto-tensorizer is meant to handle,
built with the TE builder.

Each builder takes its sizes as keywords (defaults keep every kernel between a few thousand
and a million multiply-accumulates) and names its blocks after its computes: a convolution's
``pad`` block fills the zero-padded input and its ``conv`` block reduces over the window.
:func:`kernels` builds them all at their default sizes.
"""

from __future__ import annotations

import ir
from ir import te


def _inside(x: ir.Expr, low: int, high: int) -> ir.Expr:
    """``low <= x < high``."""
    return ir.and_(ir.const(low, "int32") <= x, x < high)


def _clamp(x: ir.Expr, extent: int) -> ir.Expr:
    """``x`` clamped into ``[0, extent)``: a select evaluates both values, so a padded load
    must stay inside its input everywhere."""
    return ir.min_(ir.max_(x, 0), extent - 1)


def _i32(value: ir.Expr) -> ir.Expr:
    return ir.cast("int32", value)


def _padded_nhwc(I: te.Tensor, pad: int) -> te.Tensor:
    """``I`` (N, H, W, C) with ``pad`` zero rows and columns on every side."""
    n, h, w, c = I.shape
    return te.compute((n, h + 2 * pad, w + 2 * pad, c), lambda vn, y, x, vc: te.if_then_else(
        ir.and_(_inside(y, pad, h + pad), _inside(x, pad, w + pad)),
        I[vn, _clamp(y - pad, h), _clamp(x - pad, w), vc], ir.const(0, I.dtype)), "pad")


def _gemm(name: str, m: int, n: int, k: int, a: str, b: str, acc: str) -> ir.PrimFunc:
    A = te.placeholder((m, k), a, "A")
    B = te.placeholder((k, n), b, "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(
        ir.cast(acc, A[i, rk]) * ir.cast(acc, B[rk, j]), axis=rk), "C")
    return te.create_prim_func([A, B, C], name)


def gemm_int8(m: int = 64, n: int = 64, k: int = 64) -> ir.PrimFunc:
    """C[i, j] = sum_k i32(A[i, k]) * i32(B[k, j]), int8 operands; block ``C``."""
    return _gemm("gemm_int8", m, n, k, "int8", "int8", "int32")


def gemm_int8_odd(m: int = 100, n: int = 60, k: int = 36) -> ir.PrimFunc:
    """The int8 GEMM at sizes no tile divides (100 x 60 x 36); block ``C``."""
    return _gemm("gemm_int8_odd", m, n, k, "int8", "int8", "int32")


def gemm_u8s8(m: int = 64, n: int = 64, k: int = 64) -> ir.PrimFunc:
    """C = A @ B with A uint8 and B int8, accumulated in int32; block ``C``."""
    return _gemm("gemm_u8s8", m, n, k, "uint8", "int8", "int32")


def gemm_fp16(m: int = 64, n: int = 64, k: int = 64) -> ir.PrimFunc:
    """C = A @ B with float16 operands accumulated in float32; block ``C``."""
    return _gemm("gemm_fp16", m, n, k, "float16", "float16", "float32")


def batch_matmul_int8(batch: int = 4, m: int = 32, n: int = 32, k: int = 32) -> ir.PrimFunc:
    """C[b, i, j] = sum_k i32(A[b, i, k]) * i32(B[b, k, j]); block ``C``."""
    A = te.placeholder((batch, m, k), "int8", "A")
    B = te.placeholder((batch, k, n), "int8", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((batch, m, n), lambda b, i, j: te.sum(
        _i32(A[b, i, rk]) * _i32(B[b, rk, j]), axis=rk), "C")
    return te.create_prim_func([A, B, C], "batch_matmul_int8")


def dense_int8(m: int = 64, n: int = 32, k: int = 64) -> ir.PrimFunc:
    """Y[i, j] = sum_k i32(X[i, k]) * i32(W[j, k]): the weight stored transposed; block ``Y``."""
    X = te.placeholder((m, k), "int8", "X")
    W = te.placeholder((n, k), "int8", "W")
    rk = te.reduce_axis(k, "k")
    Y = te.compute((m, n), lambda i, j: te.sum(_i32(X[i, rk]) * _i32(W[j, rk]), axis=rk), "Y")
    return te.create_prim_func([X, W, Y], "dense_int8")


def conv2d_nhwc_int8(batch: int = 2, height: int = 8, width: int = 8, in_channels: int = 16,
                     out_channels: int = 16) -> ir.PrimFunc:
    """3x3 convolution, NHWC input, HWIO weights, stride 1, padding 1; blocks ``pad``, ``conv``."""
    I = te.placeholder((batch, height, width, in_channels), "int8", "I")
    W = te.placeholder((3, 3, in_channels, out_channels), "int8", "W")
    P = _padded_nhwc(I, 1)
    rh, rw, rc = te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw"), te.reduce_axis(in_channels, "rc")
    O = te.compute((batch, height, width, out_channels), lambda n, h, w, co: te.sum(
        _i32(P[n, h + rh, w + rw, rc]) * _i32(W[rh, rw, rc, co]), axis=[rh, rw, rc]), "conv")
    return te.create_prim_func([I, W, O], "conv2d_nhwc_int8")


def conv2d_nchw_int8(in_channels: int = 16, height: int = 16, width: int = 16,
                     out_channels: int = 32) -> ir.PrimFunc:
    """3x3 convolution, NCHW input, OIHW weights, stride 2, padding 1, batch 1; blocks ``pad``,
    ``conv``."""
    out_h, out_w = (height - 1) // 2 + 1, (width - 1) // 2 + 1
    I = te.placeholder((1, in_channels, height, width), "int8", "I")
    W = te.placeholder((out_channels, in_channels, 3, 3), "int8", "W")
    P = te.compute((1, in_channels, height + 2, width + 2), lambda n, c, y, x: te.if_then_else(
        ir.and_(_inside(y, 1, height + 1), _inside(x, 1, width + 1)),
        I[n, c, _clamp(y - 1, height), _clamp(x - 1, width)], ir.const(0, "int8")), "pad")
    ci, rh, rw = te.reduce_axis(in_channels, "ci"), te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw")
    O = te.compute((1, out_channels, out_h, out_w), lambda n, co, h, w: te.sum(
        _i32(P[n, ci, h * 2 + rh, w * 2 + rw]) * _i32(W[co, ci, rh, rw]), axis=[ci, rh, rw]),
        "conv")
    return te.create_prim_func([I, W, O], "conv2d_nchw_int8")


def conv2d_dilated_int8(height: int = 12, width: int = 12, in_channels: int = 16,
                        out_channels: int = 16) -> ir.PrimFunc:
    """3x3 convolution with dilation 2, NHWC, stride 1, padding 2, batch 1; blocks ``pad``,
    ``conv``."""
    I = te.placeholder((1, height, width, in_channels), "int8", "I")
    W = te.placeholder((3, 3, in_channels, out_channels), "int8", "W")
    P = _padded_nhwc(I, 2)
    rh, rw, rc = te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw"), te.reduce_axis(in_channels, "rc")
    O = te.compute((1, height, width, out_channels), lambda n, h, w, co: te.sum(
        _i32(P[n, h + rh * 2, w + rw * 2, rc]) * _i32(W[rh, rw, rc, co]), axis=[rh, rw, rc]),
        "conv")
    return te.create_prim_func([I, W, O], "conv2d_dilated_int8")


def conv1d_int8(width: int = 64, in_channels: int = 16, out_channels: int = 32) -> ir.PrimFunc:
    """1-D convolution, NWC input, WIO weights, window 3, stride 1, padding 1, batch 1; blocks
    ``pad``, ``conv``."""
    I = te.placeholder((1, width, in_channels), "int8", "I")
    W = te.placeholder((3, in_channels, out_channels), "int8", "W")
    P = te.compute((1, width + 2, in_channels), lambda n, x, c: te.if_then_else(
        _inside(x, 1, width + 1), I[n, _clamp(x - 1, width), c], ir.const(0, "int8")), "pad")
    rw, rc = te.reduce_axis(3, "rw"), te.reduce_axis(in_channels, "rc")
    O = te.compute((1, width, out_channels), lambda n, w, co: te.sum(
        _i32(P[n, w + rw, rc]) * _i32(W[rw, rc, co]), axis=[rw, rc]), "conv")
    return te.create_prim_func([I, W, O], "conv1d_int8")


def conv1x1_int8(height: int = 8, width: int = 8, in_channels: int = 32,
                 out_channels: int = 32) -> ir.PrimFunc:
    """1x1 convolution (a GEMM over pixels), NHWC, batch 1, no padding; block ``conv``."""
    I = te.placeholder((1, height, width, in_channels), "int8", "I")
    W = te.placeholder((in_channels, out_channels), "int8", "W")
    rc = te.reduce_axis(in_channels, "rc")
    O = te.compute((1, height, width, out_channels), lambda n, h, w, co: te.sum(
        _i32(I[n, h, w, rc]) * _i32(W[rc, co]), axis=rc), "conv")
    return te.create_prim_func([I, W, O], "conv1x1_int8")


def matmul_relu_fp16(m: int = 32, n: int = 32, k: int = 32) -> ir.PrimFunc:
    """Y = A @ B (float16 operands, float32 sums), then C = max(Y, 0); blocks ``Y``, ``C``."""
    A = te.placeholder((m, k), "float16", "A")
    B = te.placeholder((k, n), "float16", "B")
    rk = te.reduce_axis(k, "k")
    Y = te.compute((m, n), lambda i, j: te.sum(
        ir.cast("float32", A[i, rk]) * ir.cast("float32", B[rk, j]), axis=rk), "Y")
    C = te.compute((m, n), lambda i, j: ir.max_(Y[i, j], 0.0), "C")
    return te.create_prim_func([A, B, C], "matmul_relu_fp16")


def matmul_requant_int8(m: int = 32, n: int = 32, k: int = 64, multiplier: int = 1 << 20,
                        shift: int = 28) -> ir.PrimFunc:
    """A quantised dense layer in four blocks: ``acc`` (int8 GEMM into int32), ``biased``
    (+ bias), ``scaled`` (multiply by ``multiplier``, then a rounding shift right by ``shift``)
    and ``out`` (clip to int8)."""
    A = te.placeholder((m, k), "int8", "A")
    B = te.placeholder((k, n), "int8", "B")
    bias = te.placeholder((n,), "int32", "bias")
    rk = te.reduce_axis(k, "k")
    acc = te.compute((m, n), lambda i, j: te.sum(_i32(A[i, rk]) * _i32(B[rk, j]), axis=rk),
                     "acc")
    biased = te.compute((m, n), lambda i, j: acc[i, j] + bias[j], "biased")
    half, scale = ir.const(1 << (shift - 1), "int64"), ir.const(1 << shift, "int64")
    scaled = te.compute((m, n), lambda i, j: _i32(
        (ir.cast("int64", biased[i, j]) * ir.const(multiplier, "int64") + half) // scale),
        "scaled")
    out = te.compute((m, n), lambda i, j: ir.cast("int8", ir.min_(ir.max_(scaled[i, j], -128),
                                                                  127)), "out")
    return te.create_prim_func([A, B, bias, out], "matmul_requant_int8")


def depthwise_conv2d_int8(height: int = 8, width: int = 8, channels: int = 16) -> ir.PrimFunc:
    """3x3 depthwise convolution, NHWC, one filter per channel, stride 1, padding 1, batch 1;
    blocks ``pad``, ``conv``."""
    I = te.placeholder((1, height, width, channels), "int8", "I")
    W = te.placeholder((3, 3, channels), "int8", "W")
    P = _padded_nhwc(I, 1)
    rh, rw = te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw")
    O = te.compute((1, height, width, channels), lambda n, h, w, c: te.sum(
        _i32(P[n, h + rh, w + rw, c]) * _i32(W[rh, rw, c]), axis=[rh, rw]), "conv")
    return te.create_prim_func([I, W, O], "depthwise_conv2d_int8")


def add(m: int = 64, n: int = 64) -> ir.PrimFunc:
    """C = A + B elementwise in int32: no reduction; block ``C``."""
    A = te.placeholder((m, n), "int32", "A")
    B = te.placeholder((m, n), "int32", "B")
    C = te.compute((m, n), lambda i, j: A[i, j] + B[i, j], "C")
    return te.create_prim_func([A, B, C], "add")


BUILDERS = (gemm_int8, gemm_int8_odd, gemm_u8s8, gemm_fp16, batch_matmul_int8, dense_int8,
            conv2d_nhwc_int8, conv2d_nchw_int8, conv2d_dilated_int8, conv1d_int8, conv1x1_int8,
            matmul_relu_fp16, matmul_requant_int8, depthwise_conv2d_int8, add)


def kernels() -> dict[str, ir.PrimFunc]:
    """Every suite kernel at its default sizes, by name."""
    return {builder.__name__: builder() for builder in BUILDERS}
