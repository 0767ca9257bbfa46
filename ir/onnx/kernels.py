"""The PrimFuncs of the layers a target can tensorize, built with the TE builder.

Convolutions are built channels-last (``NHWC`` activations, ``HWIO`` weights): that is the
layout in which the output pixels fuse onto a GEMM's M, the output channel onto N and the
window with the input channels onto K, with unit-stride operands. The ONNX tensors are
``NCHW``; the layer's pack and unpack transpose on the host, and the report says so.

Integer kernels compute the plain int8 x int8 -> int32 sum on an input the layer's pack has
padded with the input's zero point: every zero-point correction and the bias are then a
per-channel constant the host epilogue adds (:mod:`ir.onnx.linear`), so the kernel is exactly
the GEMM the hardware runs. Padding in the pack rather than in the kernel also makes the
kernel independent of the zero point, so all layers of one shape share one kernel.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import ir
from ir import te
from ir.function import PrimFunc


@dataclass(frozen=True, slots=True)
class ConvShape:
    """A 2-D convolution: input ``(n, c, h, w)``, ``out_channels``, ``kernel`` ``(kh, kw)``,
    ``strides``, ``pads`` ``(top, left, bottom, right)``, ``dilations``, ``groups``."""

    n: int
    c: int
    h: int
    w: int
    out_channels: int
    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]
    dilations: tuple[int, int]
    groups: int

    @property
    def out_hw(self) -> tuple[int, int]:
        """The output's height and width."""
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.strides, self.dilations
        top, left, bottom, right = self.pads
        return ((self.h + top + bottom - dh * (kh - 1) - 1) // sh + 1,
                (self.w + left + right - dw * (kw - 1) - 1) // sw + 1)

    @property
    def depthwise(self) -> bool:
        """One input and one output channel per group."""
        return self.groups == self.c == self.out_channels and self.groups > 1

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the convolution."""
        oh, ow = self.out_hw
        kh, kw = self.kernel
        return self.n * oh * ow * self.out_channels * kh * kw * (self.c // self.groups)

    @property
    def weight_shape(self) -> tuple[int, ...]:
        """The kernel's weight layout: ``(kh, kw, c)`` depthwise, else ``(kh, kw, c/g, o)``."""
        kh, kw = self.kernel
        if self.depthwise:
            return (kh, kw, self.c)
        return (kh, kw, self.c // self.groups, self.out_channels)


@functools.cache
def conv2d(shape: ConvShape, dtype: str, weight_dtype: str | None = None) -> PrimFunc:
    """``conv[n, oh, ow, o]``: the NHWC convolution of the padded input ``X`` (its height
    and width include the pads: the caller pads, with zeros or the zero point) by ``W``
    (layout :attr:`ConvShape.weight_shape`, dtype ``weight_dtype``, default ``dtype``);
    float32 accumulates in float32, integers in int32.

    Layers of one shape share one function (cached), so a target tensorizes and compiles
    it once however often the network repeats it.
    """
    s = shape
    top, left, bottom, right = s.pads
    X = te.placeholder((s.n, s.h + top + bottom, s.w + left + right, s.c), dtype, "X")
    W = te.placeholder(s.weight_shape, weight_dtype or dtype, "W")
    return te.create_prim_func([X, W, _convolution(s, X, W, dtype)], "conv2d")


def _convolution(s: ConvShape, X: te.Tensor, W: te.Tensor, dtype: str) -> te.Tensor:
    """The compute ``conv`` of :func:`conv2d` over the placeholders ``X`` and ``W``."""
    oh, ow = s.out_hw
    (kh, kw), (sh, sw), (dh, dw) = s.kernel, s.strides, s.dilations
    rh, rw = te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")
    acc = "float32" if dtype == "float32" else "int32"

    def product(a: ir.Expr, b: ir.Expr) -> ir.Expr:
        return a * b if dtype == "float32" else ir.cast(acc, a) * ir.cast(acc, b)

    if s.depthwise:
        return te.compute((s.n, oh, ow, s.c), lambda n, h, w, c: te.sum(
            product(X[n, h * sh + rh * dh, w * sw + rw * dw, c], W[rh, rw, c]),
            axis=[rh, rw]), "conv")
    if s.groups == 1:
        rc = te.reduce_axis(s.c, "rc")
        return te.compute((s.n, oh, ow, s.out_channels), lambda n, h, w, o: te.sum(
            product(X[n, h * sh + rh * dh, w * sw + rw * dw, rc], W[rh, rw, rc, o]),
            axis=[rh, rw, rc]), "conv")
    cg, og = s.c // s.groups, s.out_channels // s.groups
    rc = te.reduce_axis(cg, "rc")
    return te.compute((s.n, oh, ow, s.out_channels), lambda n, h, w, o: te.sum(
        product(X[n, h * sh + rh * dh, w * sw + rw * dw, o // og * cg + rc],
                W[rh, rw, rc, o]), axis=[rh, rw, rc]), "conv")


@functools.cache
def matmul(batch: int, m: int, k: int, n: int, dtype: str, batched_b: bool,
           b_dtype: str | None = None) -> PrimFunc:
    """``Y[b, i, j] = sum_k A[b, i, k] * B[b, k, j]``; without a batch (``batch == 0``) a
    plain GEMM ``Y[i, j]``. ``B`` has ``b_dtype`` (default ``dtype``); float32 accumulates
    in float32, integers in int32; cached like :func:`conv2d`."""
    acc = "float32" if dtype == "float32" else "int32"
    r = te.reduce_axis(k, "k")

    def product(a: ir.Expr, b: ir.Expr) -> ir.Expr:
        return a * b if dtype == "float32" else ir.cast(acc, a) * ir.cast(acc, b)

    if batch == 0:
        A = te.placeholder((m, k), dtype, "A")
        B = te.placeholder((k, n), b_dtype or dtype, "B")
        Y = te.compute((m, n), lambda i, j: te.sum(product(A[i, r], B[r, j]), axis=r), "matmul")
    elif batched_b:
        A = te.placeholder((batch, m, k), dtype, "A")
        B = te.placeholder((batch, k, n), b_dtype or dtype, "B")
        Y = te.compute((batch, m, n), lambda b, i, j: te.sum(
            product(A[b, i, r], B[b, r, j]), axis=r), "matmul")
    else:
        raise ValueError("a batched matmul with constant weights is flattened to a GEMM")
    return te.create_prim_func([A, B, Y], "matmul")


@dataclass(frozen=True, slots=True)
class Requantisation:
    """An integer layer's epilogue as a kernel computes it on the device: to each int32 sum
    add the output channel's ``Bias``, convert to float32, multiply by the channel's float32
    ``Scale``, round half to even, add ``zero_point`` and saturate to ``[low, high]``, then
    narrow to int8. The integers equal ``MlasRequantizeOutput``'s (:func:`ir.onnx.quant.
    requantize`), which clamps to ``[low - zero_point, high - zero_point]`` before rounding:
    both clamps are at integers, so clamping before or after the rounding agrees.

    The language's float-to-int cast truncates, so the kernel rounds as MLAS does: the value
    clamped to +-2**22 (far beyond any int8 result), plus and minus 1.5 * 2**23, at which
    float32's spacing is 1 and the sum rounds to the nearest even integer. That is the form
    the NPU's ``vec.requant`` intrinsic states, so the engine puts the block on it."""

    zero_point: int
    low: int = -128
    high: int = 127


_LIMIT = float(1 << 22)  # |value| beyond which no int8 result changes; 2**22 + 1.5 * 2**23 < 2**24
_ROUNDER = 1.5 * (1 << 23)


def _requantised(acc: te.Tensor, q: Requantisation) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    """``acc``'s epilogue blocks (channel last): the bias add, the requantisation (int32)
    and the narrowing to int8; returns the ``Bias`` and ``Scale`` placeholders and the
    int8 output."""
    channels = acc.shape[-1]
    bias = te.placeholder((channels,), "int32", "Bias")
    scale = te.placeholder((channels,), "float32", "Scale")
    biased = te.compute(acc.shape, lambda *i: acc[i] + bias[i[-1]], "biased")
    low, high = ir.const(-_LIMIT, "float32"), ir.const(_LIMIT, "float32")
    rounder = ir.const(_ROUNDER, "float32")

    def requantise(*i: ir.Expr) -> ir.Expr:
        value = ir.cast("float32", biased[i]) * scale[i[-1]]
        clamped = ir.min_(ir.max_(value, low), high)
        rounded = ir.cast("int32", clamped + rounder - rounder)
        return ir.min_(ir.max_(rounded + q.zero_point, q.low), q.high)

    requantised = te.compute(acc.shape, requantise, "requantised")
    narrowed = te.compute(acc.shape, lambda *i: ir.cast(
        "int8", ir.min_(ir.max_(requantised[i], -128), 127)), "narrowed")
    return bias, scale, narrowed


@functools.cache
def matmul_requantised(m: int, k: int, n: int, q: Requantisation) -> PrimFunc:
    """:func:`matmul` of int8 operands with the epilogue of :class:`Requantisation` after
    the sum: parameters ``A`` (m x k), ``B`` (k x n), ``Bias`` and ``Scale`` (one per
    column) and the int8 output; cached like :func:`matmul`."""
    r = te.reduce_axis(k, "k")
    A = te.placeholder((m, k), "int8", "A")
    B = te.placeholder((k, n), "int8", "B")
    acc = te.compute((m, n), lambda i, j: te.sum(
        ir.cast("int32", A[i, r]) * ir.cast("int32", B[r, j]), axis=r), "matmul")
    bias, scale, out = _requantised(acc, q)
    return te.create_prim_func([A, B, bias, scale, out], "matmul_requantised")
