"""The PrimFuncs of the layers a target can tensorize, built with the TE builder.

Convolutions are built channels-last (``NHWC`` activations, ``HWIO`` weights): that is the
layout in which the output pixels fuse onto a GEMM's M, the output channel onto N and the
window with the input channels onto K, with unit-stride operands. The ONNX tensors are
``NCHW``; the layer's pack and unpack transpose on the host, and the report says so.

Float kernels accumulate in float32: float32 operands as they are, float16 ones widened
(every float16 product is exact in float32), the form of Arm's FMLAL and of WMMA's f16 -> f32,
whose result the layer rounds to float16 after its bias, as onnxruntime's float16 path does.
Integer kernels compute the plain int8 x int8 -> int32 sum on an input the layer's pack has
padded with the input's zero point: every zero-point correction and the bias are then a
per-channel constant the host epilogue adds (:mod:`ir.onnx.linear`), so the kernel is exactly
the GEMM the hardware runs. Padding in the pack rather than in the kernel also makes the
kernel independent of the zero point, so all layers of one shape share one kernel.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import ir
from ir import te
from ir.buffer import Buffer
from ir.function import PrimFunc, make_root
from ir.onnx.host_ops import qlinear_add_terms
from ir.onnx.quant import QuantisedAdd
from ir.stmt import seq
from ir.visitor import replace_buffers


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
    (layout :attr:`ConvShape.weight_shape`, dtype ``weight_dtype``, default ``dtype``),
    accumulated in :func:`accumulator` of ``dtype``.

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
    product = _product(dtype)
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
    plain GEMM ``Y[i, j]``. ``B`` has ``b_dtype`` (default ``dtype``); the sum is in
    :func:`accumulator` of ``dtype``; cached like :func:`conv2d`."""
    r = te.reduce_axis(k, "k")
    product = _product(dtype)
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


def accumulator(dtype: str) -> str:
    """The dtype a kernel of ``dtype`` operands sums in: float32 for a float (float16 is
    widened: its products are exact in float32), int32 for an integer."""
    return "float32" if ir.dtype(dtype).is_float else "int32"


def _product(dtype: str) -> Callable[[ir.Expr, ir.Expr], ir.Expr]:
    """The product of two ``dtype`` operands in :func:`accumulator` of ``dtype``: as they
    are when that is their own type, else each cast to it first."""
    acc = accumulator(dtype)
    if acc == dtype:
        return lambda a, b: a * b
    return lambda a, b: ir.cast(acc, a) * ir.cast(acc, b)


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


def _requantised(acc: te.Tensor, q: Requantisation, grouped: bool = False
                 ) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    """``acc``'s epilogue blocks (channel last): the bias add, the requantisation (int32)
    and the narrowing to int8; returns the ``Bias`` and ``Scale`` placeholders and the
    int8 output. ``grouped``: ``acc``'s first dimension is a group of its own channels,
    and the placeholders hold one row per group."""
    bias, scale, requantised = _requantise(acc, q, grouped)
    return bias, scale, _narrowed(requantised)


def _narrowed(values: te.Tensor) -> te.Tensor:
    """int32 ``values`` saturated to int8 (the block a narrowing store computes)."""
    return te.compute(values.shape, lambda *i: ir.cast(
        "int8", ir.min_(ir.max_(values[i], -128), 127)), "narrowed")


def _requantise(acc: te.Tensor, q: Requantisation, grouped: bool = False
                ) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    """The bias add and the requantisation of :func:`_requantised`, without the narrowing:
    the ``Bias`` and ``Scale`` placeholders and the int32 result in ``[q.low, q.high]``."""
    rows = (acc.shape[0], acc.shape[-1]) if grouped else (acc.shape[-1],)
    bias = te.placeholder(rows, "int32", "Bias")
    scale = te.placeholder(rows, "float32", "Scale")

    def channel(i: tuple[ir.Expr, ...]) -> tuple[ir.Expr, ...]:
        return (i[0], i[-1]) if grouped else (i[-1],)

    biased = te.compute(acc.shape, lambda *i: acc[i] + bias[channel(i)], "biased")
    low, high = ir.const(-_LIMIT, "float32"), ir.const(_LIMIT, "float32")
    rounder = ir.const(_ROUNDER, "float32")

    def requantise(*i: ir.Expr) -> ir.Expr:
        value = ir.cast("float32", biased[i]) * scale[channel(i)]
        clamped = ir.min_(ir.max_(value, low), high)
        rounded = ir.cast("int32", clamped + rounder - rounder)
        return ir.min_(ir.max_(rounded + q.zero_point, q.low), q.high)

    return bias, scale, te.compute(acc.shape, requantise, "requantised")


@functools.cache
def matmul_requantised(m: int, k: int, n: int, q: Requantisation) -> PrimFunc:
    """:func:`matmul` of int8 operands with the epilogue of :class:`Requantisation` after
    the sum: parameters ``A`` (m x k), ``B`` (k x n), ``Bias`` and ``Scale`` (one per
    column) and the int8 output; cached like :func:`matmul`."""
    A = te.placeholder((m, k), "int8", "A")
    B = te.placeholder((k, n), "int8", "B")
    bias, scale, out = _requantised(_int8_gemm(A, B), q)
    return te.create_prim_func([A, B, bias, scale, out], "matmul_requantised")


@functools.cache
def grouped_matmul_requantised(groups: int, m: int, k: int, n: int, q: Requantisation
                               ) -> PrimFunc:
    """``groups`` GEMMs of int8 operands, each with the epilogue of :class:`Requantisation`
    on its own channels: parameters ``A`` (groups x m x k), ``B`` (groups x k x n), ``Bias``
    and ``Scale`` (groups x n) and the int8 output (groups x m x n); cached like
    :func:`matmul`. A depthwise layer on a GEMM array takes this form (:mod:`ir.onnx.
    depthwise`)."""
    r = te.reduce_axis(k, "k")
    A = te.placeholder((groups, m, k), "int8", "A")
    B = te.placeholder((groups, k, n), "int8", "B")
    acc = te.compute((groups, m, n), lambda g, i, j: te.sum(
        ir.cast("int32", A[g, i, r]) * ir.cast("int32", B[g, r, j]), axis=r), "matmul")
    bias, scale, out = _requantised(acc, q, grouped=True)
    return te.create_prim_func([A, B, bias, scale, out], "grouped_matmul_requantised")


@functools.cache
def grouped_requantised(groups: int, m: int, n: int, q: Requantisation) -> PrimFunc:
    """The epilogue of :func:`grouped_matmul_requantised` as a kernel of its own, on the
    int32 sums ``X`` (groups x m x n): the layer run unfused (cached like :func:`matmul`)."""
    X = te.placeholder((groups, m, n), "int32", "X")
    bias, scale, out = _requantised(X, q, grouped=True)
    return te.create_prim_func([X, bias, scale, out], "grouped_requantised")


@dataclass(frozen=True, slots=True)
class ResidualAdd:
    """A residual block's end after an integer layer: onnxruntime's QLinearAdd of the
    layer's int8 output ``a`` and a skip tensor ``b`` (int8, the layer's shape), then, with
    ``relu``, a ReLU. The scales and zero points reach the kernel as data (the ``AddParams``
    rows of :func:`qadd_parameters`), so layers of one shape share one kernel; the kernel
    knows only the output's ``zero_point`` (where a ReLU clips) and range ``[low, high]``."""

    zero_point: int
    relu: bool = False
    low: int = -128
    high: int = 127

    @property
    def bounds(self) -> tuple[int, int]:
        """The add's output range: ``[low, high]``, its lower end the zero point with a
        ReLU."""
        return (max(self.low, self.zero_point) if self.relu else self.low), self.high


@dataclass(frozen=True, slots=True)
class KernelFamily:
    """A fused form's kernel apart from its quantisation constants: ``key`` names the
    builder and its other arguments, ``requantisation`` and (a joined add's) ``add`` are
    the constants. Kernels of one key differ in these alone: a device whose program holds
    them as immediates of its requantising instructions can compile one kernel of a key
    and retarget its program to the others."""

    key: tuple
    requantisation: Requantisation
    add: ResidualAdd | None = None


def qadd_parameters(a_scale: float, a_zero_point: int, b_scale: float, b_zero_point: int,
                    y_scale: float, y_zero_point: int, channels: int) -> np.ndarray:
    """The ``AddParams`` input of :func:`matmul_requantised_add` (3 x ``channels`` float32):
    rows ``ratio_a = a_scale / y_scale``, ``ratio_b = b_scale / y_scale`` and ``offset =
    y_zp - fma(ratio_a, a_zp, ratio_b * b_zp)``, each computed in float32 as onnxruntime's
    QLinearAdd computes them (:func:`ir.onnx.host_ops.qlinear_add_terms`), repeated per
    channel."""
    terms = qlinear_add_terms(a_scale, a_zero_point, b_scale, b_zero_point, y_scale,
                              y_zero_point)
    return np.repeat(np.array(terms, np.float32).reshape(3, 1), channels, axis=1)


def qadd_parameters_of(add: QuantisedAdd, channels: int) -> np.ndarray:
    """:func:`qadd_parameters` of a quantised add's operands and output (one scale and zero
    point each)."""
    a, b, y = add.a, add.b, add.y
    return qadd_parameters(float(a.scale.reshape(())), a.scalar_zero_point(),
                           float(b.scale.reshape(())), b.scalar_zero_point(),
                           float(y.scale.reshape(())), y.scalar_zero_point(), channels)


def _quantised_add(a: te.Tensor, b: te.Tensor, params: te.Tensor, add: ResidualAdd
                   ) -> te.Tensor:
    """``clip(rint(fma(f32(a), ratio_a, fma(f32(b), ratio_b, offset))), lo, hi)`` as int32,
    the parameters ``params[0..2, j]`` per channel; a fused multiply-add is written as its
    float64 value rounded to float32 (the float64 product of two float32 values is exact).
    With ``relu`` the lower bound is the zero point: ReLU on the quantised values."""
    low, high = add.bounds

    def fma(x: ir.Expr, y: ir.Expr, z: ir.Expr) -> ir.Expr:
        wide = ir.cast("float64", x) * ir.cast("float64", y) + ir.cast("float64", z)
        return ir.cast("float32", wide)

    def value(*i: ir.Expr) -> ir.Expr:
        channel = i[-1]
        inner = fma(ir.cast("float32", b[i]), params[1, channel], params[2, channel])
        total = fma(ir.cast("float32", a[i]), params[0, channel], inner)
        rounded = ir.Call("rint", (total,), ir.dtype("float32"))
        clipped = ir.min_(ir.max_(rounded, ir.cast("float32", ir.const(low, "int32"))),
                          ir.cast("float32", ir.const(high, "int32")))
        return ir.cast("int32", clipped)

    return te.compute(a.shape, value, "added")


@functools.cache
def matmul_requantised_add(m: int, k: int, n: int, q: Requantisation,
                           add: ResidualAdd) -> PrimFunc:
    """:func:`matmul_requantised` followed by :class:`ResidualAdd`: parameters ``A`` (m x k
    int8), ``B`` (k x n int8), ``Bias`` (n int32), ``Scale`` (n float32), ``Skip`` (m x n
    int8, the residual input), ``AddParams`` (3 x n float32, :func:`qadd_parameters`) and
    the int8 output. The requantised values feed the add as they are: ``q``'s bounds lie in
    int8, so they equal the narrowed tensor onnxruntime adds. Cached like :func:`matmul`."""
    if not -128 <= q.low <= q.high <= 127:
        raise ValueError(f"matmul_requantised_add requires the layer's output in int8, got "
                         f"bounds [{q.low}, {q.high}]")
    A = te.placeholder((m, k), "int8", "A")
    B = te.placeholder((k, n), "int8", "B")
    bias, scale, requantised = _requantise(_int8_gemm(A, B), q)
    skip = te.placeholder((m, n), "int8", "Skip")
    params = te.placeholder((3, n), "float32", "AddParams")
    out = _narrowed(_quantised_add(requantised, skip, params, add))
    return te.create_prim_func([A, B, bias, scale, skip, params, out],
                               "matmul_requantised_add")


def _image_rows(shape: ConvShape, rows: int, depth: int) -> tuple[te.Tensor, te.Tensor]:
    """The padded channels-last input ``X`` of a convolution (as for :func:`conv2d`) and its
    GEMM rows as a copy, ``rows x depth``: one row per output pixel, its window in ``(kh,
    kw, c)`` order, the order of the HWIO weights flattened; zeros past the convolution's
    rows and depth."""
    X = _padded_input(shape)
    element = _window(shape, X, rows, depth, shape.c)
    return X, te.compute((rows, depth), lambda i, j: element(i, j), "im2col")


def _padded_input(shape: ConvShape) -> te.Tensor:
    """The padded channels-last int8 input ``X`` of a convolution, as :func:`conv2d`'s."""
    top, left, bottom, right = shape.pads
    return te.placeholder((shape.n, shape.h + top + bottom, shape.w + left + right, shape.c),
                          "int8", "X")


def _window(shape: ConvShape, X: te.Tensor, rows: int, depth: int, width: int
            ) -> Callable[[ir.Expr, ir.Expr, ir.Expr], ir.Expr]:
    """Element ``(i, j, first)`` of a convolution's GEMM rows over ``width`` channels from
    ``first`` on (None: from the first), gathered from ``X``: row ``i`` output pixel ``i``,
    column ``j`` channel ``first + j % width`` at tap ``j // width`` of its window; zeros
    past the pixels and taps, for rows and depth padded to ``rows`` and ``depth``."""
    s = shape
    oh, ow = s.out_hw
    (kh, kw), (sh, sw), (dh, dw) = s.kernel, s.strides, s.dilations
    m, k = s.n * oh * ow, kh * kw * width

    def element(i: ir.Expr, j: ir.Expr, first: ir.Expr | None = None) -> ir.Expr:
        # Wrapped into range, the loads of the rows and columns past the convolution's stay
        # inside X (a select evaluates both of its values); they take the select's zero.
        y, x = (i % m if rows > m else i), (j % k if depth > k else j)
        channel = x % width if first is None else first + x % width
        value = X[y // (oh * ow), y // ow % oh * sh + x // (kw * width) * dh,
                  y % ow * sw + x // width % kw * dw, channel]
        if (rows, depth) == (m, k):
            return value
        inside = i < m if depth == k else (j < k if rows == m else ir.and_(i < m, j < k))
        return te.if_then_else(inside, value, ir.const(0, "int8"))

    return element


def _int8_gemm(A: te.Tensor, B: te.Tensor) -> te.Tensor:
    """The int32 sums ``A @ B`` of int8 operands."""
    r = te.reduce_axis(A.shape[1], "k")
    return te.compute((A.shape[0], B.shape[1]), lambda i, j: te.sum(
        ir.cast("int32", A[i, r]) * ir.cast("int32", B[r, j]), axis=r), "matmul")


@functools.cache
def conv_rows_requantised(shape: ConvShape, rows: int, depth: int, cols: int,
                          q: Requantisation) -> PrimFunc:
    """:func:`matmul_requantised` (``rows x depth x cols``) of a convolution's GEMM, its
    rows gathered from the padded input ``X`` by a copy in the kernel (:func:`_image_rows`)
    rather than by the caller: parameters ``X``, ``B`` (``depth x cols``), ``Bias``,
    ``Scale`` and the int8 output (``rows x cols``). A device whose transfers gather does
    that copy in them (an implicit GEMM). Cached like :func:`conv2d`."""
    X, A = _image_rows(shape, rows, depth)
    B = te.placeholder((depth, cols), "int8", "B")
    bias, scale, out = _requantised(_int8_gemm(A, B), q)
    return te.create_prim_func([X, B, bias, scale, out], "conv_rows_requantised")


@functools.cache
def conv_rows_requantised_add(shape: ConvShape, rows: int, depth: int, cols: int,
                              q: Requantisation, add: ResidualAdd) -> PrimFunc:
    """:func:`matmul_requantised_add` with the rows gathered as in
    :func:`conv_rows_requantised`: parameters ``X``, ``B``, ``Bias``, ``Scale``, ``Skip``,
    ``AddParams`` and the int8 output."""
    if not -128 <= q.low <= q.high <= 127:
        raise ValueError(f"conv_rows_requantised_add requires the layer's output in int8, got "
                         f"bounds [{q.low}, {q.high}]")
    X, A = _image_rows(shape, rows, depth)
    B = te.placeholder((depth, cols), "int8", "B")
    bias, scale, requantised = _requantise(_int8_gemm(A, B), q)
    skip = te.placeholder((rows, cols), "int8", "Skip")
    params = te.placeholder((3, cols), "float32", "AddParams")
    out = _narrowed(_quantised_add(requantised, skip, params, add))
    return te.create_prim_func([X, B, bias, scale, skip, params, out],
                               "conv_rows_requantised_add")


@functools.cache
def requantised(m: int, n: int, q: Requantisation) -> PrimFunc:
    """The epilogue of :func:`matmul_requantised` as a kernel of its own, on an int32 ``X``
    (m x n) already summed: parameters ``X``, ``Bias`` and ``Scale`` (one per column) and
    the int8 output. A device that runs it after a GEMM that stored its int32 sums runs
    the layer unfused (cached like :func:`matmul`)."""
    X = te.placeholder((m, n), "int32", "X")
    bias, scale, out = _requantised(X, q)
    return te.create_prim_func([X, bias, scale, out], "requantised")


@functools.cache
def quantised_add(m: int, n: int, add: ResidualAdd) -> PrimFunc:
    """:class:`ResidualAdd` as a kernel of its own, on two int8 ``(m, n)`` tensors ``A``
    and ``Skip`` already in memory: parameters ``A``, ``Skip``, ``AddParams`` (3 x n
    float32, :func:`qadd_parameters`) and the int8 output. ``A`` is widened to int32 first,
    the form a device that adds on its accumulator reads it in (cached like
    :func:`matmul`)."""
    A = te.placeholder((m, n), "int8", "A")
    widened = te.compute((m, n), lambda i, j: ir.cast("int32", A[i, j]), "widened")
    skip = te.placeholder((m, n), "int8", "Skip")
    params = te.placeholder((3, n), "float32", "AddParams")
    out = _narrowed(_quantised_add(widened, skip, params, add))
    return te.create_prim_func([A, skip, params, out], "quantised_add")


@functools.cache
def max_of_tiles(m: int, n: int, count: int) -> PrimFunc:
    """The elementwise max of ``count`` int8 ``(m, n)`` tensors ``W0``, ``W1``, ...: the
    first widened to int32, each next one maxed in by a block of its own (the form a vector
    unit takes them in, one tile at a time), the result narrowed to int8 (a max pool's
    windows, gathered one tensor per offset; cached like :func:`matmul`)."""
    if count < 2:
        raise ValueError(f"max_of_tiles requires at least 2 tensors, got {count}")
    tiles = [te.placeholder((m, n), "int8", f"W{w}") for w in range(count)]
    best = te.compute((m, n), lambda i, j: ir.cast("int32", tiles[0][i, j]), "widened")
    for w, tile in enumerate(tiles[1:], start=1):
        best = _max_with(best, tile, f"max{w}")
    return te.create_prim_func([*tiles, _narrowed(best)], "max_of_tiles")


def _max_with(best: te.Tensor, tile: te.Tensor, name: str) -> te.Tensor:
    """``max(best, int32(tile))``, elementwise."""
    return te.compute(best.shape, lambda i, j: ir.max_(best[i, j], ir.cast("int32", tile[i, j])),
                      name)


@functools.cache
def max_pool_nhwc(n: int, h: int, w: int, c: int, kernel: tuple[int, int],
                  strides: tuple[int, int]) -> PrimFunc:
    """The int8 max pool of a channels-last ``X`` ``(n, h, w, c)`` already padded (with
    -128, which never wins): one elementwise block per window offset, each maxing that
    offset's pixels into the running max, so every block's inner loop runs along the
    channels, unit stride (cached like :func:`matmul`)."""
    (kh, kw), (sh, sw) = kernel, strides
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    if oh < 1 or ow < 1 or kh * kw < 2:
        raise ValueError(f"max_pool_nhwc: a {kh}x{kw} window on {h}x{w}")
    X = te.placeholder((n, h, w, c), "int8", "X")
    offsets = [(dy, dx) for dy in range(kh) for dx in range(kw)]
    best = te.compute((n, oh, ow, c), lambda b, i, j, k: X[b, i * sh, j * sw, k], "first")
    for number, offset in enumerate(offsets[1:], start=1):
        best = _window_max(best, X, offset, strides, f"max{number}")
    return te.create_prim_func([X, best], "max_pool_nhwc")


def _window_max(best: te.Tensor, X: te.Tensor, offset: tuple[int, int],
                strides: tuple[int, int], name: str) -> te.Tensor:
    """``max(best, X)`` at each output pixel's window ``offset`` ``(dy, dx)``."""
    (dy, dx), (sh, sw) = offset, strides
    return te.compute(best.shape, lambda b, i, j, k: ir.max_(
        best[b, i, j, k], X[b, i * sh + dy, j * sw + dx, k]), name)


@functools.cache
def depthwise_requantised(shape: ConvShape, q: Requantisation) -> PrimFunc:
    """A depthwise int8 convolution, channels last, with the epilogue of
    :class:`Requantisation`: parameters ``X`` (the input already padded, as
    :func:`conv2d`'s), ``W`` (``(kh, kw, c)``), ``Bias`` and ``Scale`` (one per channel) and
    the int8 ``(n, oh, ow, c)`` output. Its window is a short reduction inside each
    channel's element, so a CPU target's compiler unrolls it and vectorises along the
    channels, unit stride (cached like :func:`matmul`)."""
    if not shape.depthwise:
        raise ValueError(f"depthwise_requantised requires a depthwise convolution, got "
                         f"{shape.groups} groups of {shape.c} channels")
    top, left, bottom, right = shape.pads
    X = te.placeholder((shape.n, shape.h + top + bottom, shape.w + left + right, shape.c),
                       "int8", "X")
    W = te.placeholder(shape.weight_shape, "int8", "W")
    bias, scale, out = _requantised(_convolution(shape, X, W, "int8"), q)
    return te.create_prim_func([X, W, bias, scale, out], "depthwise_requantised")


@functools.cache
def grouped_conv_rows_requantised(shape: ConvShape, rows: int, depth: int, width: int,
                                  q: Requantisation) -> PrimFunc:
    """:func:`grouped_matmul_requantised` of a depthwise convolution (its channels in
    groups of ``width``, each group's window taps times ``width`` deep, padded to ``depth``,
    its rows padded to ``rows``), the rows gathered from the padded channels-last input
    ``X`` by a copy in the kernel, as :func:`conv_rows_requantised` gathers a convolution's:
    ``A[g, p, t * width + i]`` is channel ``g * width + i`` of output pixel ``p``'s window
    at tap ``t``, zeros past the pixels and taps. Parameters ``X``, ``B`` (``groups x depth x
    width``, diagonal tiles), ``Bias`` and ``Scale`` (``groups x width``) and the int8
    output (``groups x rows x width``). Cached like :func:`conv2d`."""
    if not shape.depthwise or shape.c % width:
        raise ValueError(f"grouped_conv_rows_requantised requires a depthwise convolution "
                         f"of whole groups of {width} channels, got {shape.groups} groups "
                         f"of {shape.c} channels")
    groups = shape.c // width
    X = _padded_input(shape)
    element = _window(shape, X, rows, depth, width)

    def window(g: ir.Expr, i: ir.Expr, j: ir.Expr) -> ir.Expr:
        return element(i, j, g * width)

    A = te.compute((groups, rows, depth), window, "im2col")
    B = te.placeholder((groups, depth, width), "int8", "B")
    r = te.reduce_axis(depth, "k")
    acc = te.compute((groups, rows, width), lambda g, i, j: te.sum(
        ir.cast("int32", A[g, i, r]) * ir.cast("int32", B[g, r, j]), axis=r), "matmul")
    bias, scale, out = _requantised(acc, q, grouped=True)
    return te.create_prim_func([X, B, bias, scale, out], "grouped_conv_rows_requantised")


def stored_in_image(func: PrimFunc, image: tuple[int, int, int], padded: tuple[int, int]
                    ) -> PrimFunc:
    """``func`` (whose last parameter is an int8 output of a row per pixel of an ``image``
    = ``(n, h, w)`` in order, rows past them padding: ``rows x channels``, or ``groups x
    rows x width``, a depthwise layer's channels by group) with that output copied into the
    image a convolution after it reads: ``Image``, ``(n,) + padded + (channels,)`` (grouped:
    ``(groups, width)`` in place of ``channels``, the same bytes), each pixel ``(b, y, x)``
    at ``Image[b, y, x]``. Placed ``top * padded[1] + left`` pixels into the next
    convolution's padded input, that is its interior (with ``padded`` the image's own size,
    the input itself); the rest of ``Image`` is left as it was (the halo the caller fills).
    The output becomes an intermediate and the copy a block after the kernel's, which a
    device whose stores scatter does in them."""
    out = func.params[-1]
    n, h, w = image
    rows = out.shape[-2]
    if out.dtype.numpy != np.int8 or len(out.shape) not in (2, 3) or rows < n * h * w or \
            padded[0] < h or padded[1] < w:
        raise ValueError(f"stored_in_image requires an int8 output of at least {n * h * w} "
                         f"rows for a {n}x{h}x{w} image inside {padded}, got {out.shape} "
                         f"{out.dtype}")
    source = te.placeholder(out.shape, "int8", out.name)
    if len(out.shape) == 2:
        copy = te.compute((n, h, w, out.shape[1]),
                          lambda b, y, x, c: source[(b * h + y) * w + x, c], "Image")
    else:
        copy = te.compute((n, h, w, out.shape[0], out.shape[2]),
                          lambda b, y, x, g, c: source[g, (b * h + y) * w + x, c], "Image")
    scatter = te.create_prim_func([source, copy], "stored_in_image")
    target = scatter.params[-1]
    placed = Buffer(target.name, (n, *padded, *target.shape[3:]), "int8", scope=target.scope)
    body = replace_buffers(scatter.root.body, {scatter.params[0]: out, target: placed})
    root = make_root(seq(func.root.body, body), func.allocs + (out,))
    return PrimFunc(f"{func.name}_in_image", func.params[:-1] + (placed,), root)
