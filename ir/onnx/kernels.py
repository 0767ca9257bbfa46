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
    oh, ow = s.out_hw
    (kh, kw), (sh, sw), (dh, dw) = s.kernel, s.strides, s.dilations
    rh, rw = te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")
    acc = "float32" if dtype == "float32" else "int32"

    def product(a: ir.Expr, b: ir.Expr) -> ir.Expr:
        return a * b if dtype == "float32" else ir.cast(acc, a) * ir.cast(acc, b)

    if s.depthwise:
        Y = te.compute((s.n, oh, ow, s.c), lambda n, h, w, c: te.sum(
            product(X[n, h * sh + rh * dh, w * sw + rw * dw, c], W[rh, rw, c]),
            axis=[rh, rw]), "conv")
    elif s.groups == 1:
        rc = te.reduce_axis(s.c, "rc")
        Y = te.compute((s.n, oh, ow, s.out_channels), lambda n, h, w, o: te.sum(
            product(X[n, h * sh + rh * dh, w * sw + rw * dw, rc], W[rh, rw, rc, o]),
            axis=[rh, rw, rc]), "conv")
    else:
        cg, og = s.c // s.groups, s.out_channels // s.groups
        rc = te.reduce_axis(cg, "rc")
        Y = te.compute((s.n, oh, ow, s.out_channels), lambda n, h, w, o: te.sum(
            product(X[n, h * sh + rh * dh, w * sw + rw * dw, o // og * cg + rc],
                    W[rh, rw, rc, o]), axis=[rh, rw, rc]), "conv")
    return te.create_prim_func([X, W, Y], "conv2d")


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
