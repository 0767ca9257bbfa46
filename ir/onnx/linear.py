"""Convolution and matrix-product layers: float (float32, float16), and integer (QDQ,
QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger) with the host epilogue.

A float layer's kernel sums in float32 (:mod:`ir.onnx.kernels`); its bias, and for float16
the rounding of the result, run on the host after it (:func:`_float_output`).

An integer layer runs the plain int8 GEMM of :mod:`ir.onnx.kernels`. Activations in uint8
are shifted by 128 into int8 (their zero point with them), weights have their zero point
subtracted (which must leave them in int8: symmetric weights, or uint8 with zero point 128).
The epilogue then adds, per output channel, the bias less ``x_zero_point * sum(weights)``
(the padding holds the zero point, so that sum covers the whole window everywhere) and, for
two activations, the row-sum terms; and requantises as onnxruntime does
(:func:`ir.onnx.quant.requantize`). It runs on the host, in int32 and float32 exactly as the
CPU kernels do, and the report says so.
"""

from __future__ import annotations

import math
from dataclasses import replace
from collections.abc import Callable, Sequence

import numpy as np

from ir.onnx import kernels
from ir.onnx.errors import OnnxImportError
from ir.onnx.channels_last import DepthwiseNhwc
from ir.onnx.depthwise import DepthwiseGemm
from ir.onnx.fused import ConvImage, FusedGemm, ImageRows
from ir.onnx.graph import Arrays, Layer
from ir.onnx.kernels import ConvShape
from ir.onnx.quant import QParams, requantize

_IM2COL = "host: the input's windows gathered as GEMM rows (im2col) in the pack"
_EPILOGUE = ("host: int32 bias and zero-point corrections, then requantisation (float32 "
             "scale, round half to even, zero point, saturate) as onnxruntime's kernels do")


def conv_shape(where: str, x_shape: Sequence[int], w_shape: Sequence[int],
               attrs: dict) -> ConvShape:
    """The convolution a Conv-like node computes (``where`` names the model and node)."""
    if len(x_shape) != 4 or len(w_shape) != 4:
        raise OnnxImportError(f"{where} requires a 2-D convolution (4-D input and weights), "
                              f"got input {tuple(x_shape)} and weights {tuple(w_shape)}")
    n, c, h, w = x_shape
    o, cg, kh, kw = w_shape
    groups = int(attrs.get("group", 1))
    if groups <= 0 or c % groups or o % groups or c // groups != cg:
        raise OnnxImportError(f"{where} requires input channels {c} = group {groups} x "
                              f"weight channels {cg}, and output channels {o} divisible by "
                              "the group")
    strides = tuple(attrs.get("strides", (1, 1)))
    dilations = tuple(attrs.get("dilations", (1, 1)))
    pads = tuple(attrs.get("pads", (0, 0, 0, 0)))
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = _same_pads((h, w), (kh, kw), strides, dilations, auto_pad == "SAME_UPPER")
    elif auto_pad == "VALID":
        pads = (0, 0, 0, 0)
    elif auto_pad != "NOTSET":
        raise OnnxImportError(f"{where} requires auto_pad NOTSET, VALID, SAME_UPPER or "
                              f"SAME_LOWER, got {auto_pad}")
    if len(strides) != 2 or len(dilations) != 2 or len(pads) != 4 or min(strides) <= 0 \
            or min(dilations) <= 0 or min(pads) < 0:
        raise OnnxImportError(f"{where} requires 2 positive strides and dilations and 4 "
                              f"non-negative pads, got strides {strides}, dilations "
                              f"{dilations}, pads {pads}")
    shape = ConvShape(n, c, h, w, o, (kh, kw), strides, pads, dilations, groups)
    if min(shape.out_hw) <= 0:
        raise OnnxImportError(f"{where} requires a window that fits the padded input, got "
                              f"input {h}x{w}, kernel {kh}x{kw}, pads {pads}")
    return shape


def _same_pads(size, kernel, strides, dilations, upper: bool) -> tuple[int, int, int, int]:
    begin, end = [], []
    for n, k, s, d in zip(size, kernel, strides, dilations):
        total = max((math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n, 0)
        small, large = total // 2, total - total // 2
        begin.append(small if upper else large)
        end.append(large if upper else small)
    return (begin[0], begin[1], end[0], end[1])


def _detail(shape: ConvShape) -> str:
    kh, kw = shape.kernel
    text = f"{kh}x{kw} s{shape.strides[0]}"
    if shape.depthwise:
        text += " depthwise"
    elif shape.groups > 1:
        text += f" g{shape.groups}"
    return text


def _kernel_shape(shape: ConvShape) -> ConvShape:
    """The convolution the kernel computes. The engine maps a GEMM's rows onto an iterator,
    and a loop of one iteration is dropped: a convolution with a single output pixel gets
    one more output column (its input padded on the right by one stride), which
    :func:`_output_columns` drops again."""
    n, (oh, ow) = shape.n, shape.out_hw
    if n * oh * ow > 1:
        return shape
    top, left, bottom, right = shape.pads
    return replace(shape, pads=(top, left, bottom, right + shape.strides[1]))


def _output_columns(out: np.ndarray, shape: ConvShape) -> np.ndarray:
    """The kernel's NHWC output without the columns :func:`_kernel_shape` added."""
    ow = shape.out_hw[1]
    return out if out.shape[2] == ow else out[:, :, :ow, :]


def _nhwc_padded(x: np.ndarray, shape: ConvShape, fill: float) -> np.ndarray:
    """NCHW ``x`` as the kernel's input: channels last, padded with ``fill``."""
    return _padded_nhwc(x.transpose(0, 2, 3, 1), shape, fill)


def _padded_nhwc(nhwc: np.ndarray, shape: ConvShape, fill: float) -> np.ndarray:
    """Channels-last ``nhwc`` padded with ``fill`` by ``shape``'s pads."""
    top, left, bottom, right = shape.pads
    if not any(shape.pads):
        return np.ascontiguousarray(nhwc)
    return np.pad(nhwc, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=fill)


def _to_hwio(weights: np.ndarray, shape: ConvShape) -> np.ndarray:
    """OIHW weights in the kernel's layout (:attr:`ConvShape.weight_shape`)."""
    hwio = np.ascontiguousarray(weights.transpose(2, 3, 1, 0))
    return np.ascontiguousarray(hwio[:, :, 0, :]) if shape.depthwise else hwio


def float_conv(name: str, x: str, x_shape: Sequence[int], weights: np.ndarray,
               bias: np.ndarray | None, attrs: dict, output: str, where: str,
               dtype: str = "float32") -> Layer:
    """A float Conv of ``dtype`` (float32 or float16): the NHWC kernel, summing in float32,
    then on the host the bias and the rounding to ``dtype`` (:func:`_float_output`)."""
    shape = conv_shape(where, x_shape, weights.shape, attrs)
    computed = _kernel_shape(shape)
    func = kernels.conv2d(computed, dtype)
    w = _to_hwio(weights.astype(dtype), shape)
    finish, epilogue = _float_output(bias, dtype, (1, -1, 1, 1))

    def pack(arrays: Arrays) -> dict[str, np.ndarray]:
        return {"X": _nhwc_padded(arrays[0], computed, 0), "W": w}

    def unpack(out: np.ndarray, arrays: Arrays) -> np.ndarray:
        return finish(np.ascontiguousarray(_output_columns(out, shape).transpose(0, 3, 1, 2)))

    oh, ow = shape.out_hw
    return Layer(name, "Conv", (x,), output, (tuple(x_shape),),
                 (shape.n, shape.out_channels, oh, ow), dtype, shape.macs, _detail(shape),
                 func, pack, unpack, epilogue=epilogue)


def _float_output(bias: np.ndarray | None, dtype: str, bias_shape: tuple[int, ...]
                  ) -> tuple[Callable[[np.ndarray], np.ndarray], str | None]:
    """What a float layer's unpack does to its kernel's float32 sums, and the words saying
    so (None: nothing): the bias (reshaped to ``bias_shape``) added in float32, then one
    rounding to ``dtype``. onnxruntime's CPU kernels have no float16 Conv, MatMul or Gemm:
    it casts the operands to float32, runs the float32 kernel (bias included) and casts
    its result to float16, so a float16 layer's bias is added before the one rounding."""
    add = None if bias is None else bias.astype(np.float32).reshape(bias_shape)
    narrow = np.dtype(dtype) != np.float32

    def finish(sums: np.ndarray) -> np.ndarray:
        biased = sums if add is None else sums + add
        return biased.astype(dtype) if narrow else biased

    steps = (["float32 bias add"] if add is not None else []) + \
        ([f"rounding to {dtype}"] if narrow else [])
    return finish, ("host: " + ", then ".join(steps)) if steps else None


def _activation(array: np.ndarray, kind: str) -> np.ndarray:
    """An int8 or uint8 activation as ``kind`` (int8 or uint8), shifted by 128 across."""
    if array.dtype == np.dtype(kind):
        return array
    # Adding 128 across the two ranges flips the sign bit: one pass, no wider copy.
    return np.bitwise_xor(array.view(np.uint8), np.uint8(0x80)).view(kind)


def _zero_point(q: QParams, kind: str) -> int:
    """``q``'s zero point once its tensor is shifted into ``kind``."""
    if q.dtype == np.dtype(kind):
        return q.scalar_zero_point()
    return q.scalar_zero_point() + (-128 if kind == "int8" else 128)


def _int8_weights(where: str, weights: np.ndarray, zero_point: np.ndarray, axis: int
                  ) -> np.ndarray:
    zp = np.asarray(zero_point).astype(np.int32)
    if zp.size > 1:
        shape = [1] * weights.ndim
        shape[axis] = zp.size
        zp = zp.reshape(shape)
    shifted = weights.astype(np.int32) - zp
    if shifted.min(initial=0) < -128 or shifted.max(initial=0) > 127:
        raise OnnxImportError(f"{where} requires int8 weights once their zero point is "
                              f"subtracted (symmetric int8, or uint8 around 128), got values "
                              f"from {shifted.min()} to {shifted.max()}")
    return shifted.astype(np.int8)


def integer_conv(name: str, op: str, x: str, x_shape: Sequence[int], xq: QParams,
                 weights: np.ndarray, wq: QParams, bias: np.ndarray | None,
                 yq: QParams | None, attrs: dict, output: str, where: str) -> Layer:
    """An integer convolution: ``yq`` None gives ConvInteger's int32 output, else the
    requantised int8/uint8 output of QLinearConv and the QDQ pattern. The layer's kernel
    takes int8 activations; its variant, uint8 (for intrinsics such as x86's vpdpbusd)."""
    shape = conv_shape(where, x_shape, weights.shape, attrs)
    computed = _kernel_shape(shape)
    w8 = _int8_weights(where, weights, wq.zero_point, 0)
    w = _to_hwio(w8, shape)
    sums = w8.astype(np.int32).reshape(shape.out_channels, -1).sum(axis=1)
    scale = None if yq is None else _output_scale(xq, wq, yq).reshape(1, -1, 1, 1)
    oh, ow = shape.out_hw
    dtype = "int32" if yq is None else str(yq.dtype)

    def layer(kind: str, variants: tuple[Layer, ...]) -> Layer:
        x_zp = _zero_point(xq, kind)
        correction = -x_zp * sums
        if bias is not None:
            correction = correction + bias.astype(np.int32).reshape(-1)
        correction = correction.astype(np.int32).reshape(1, -1, 1, 1)

        def pack(arrays: Arrays) -> dict[str, np.ndarray]:
            return {"X": _nhwc_padded(_activation(arrays[0], kind), computed, x_zp), "W": w}

        # The epilogue runs channels last, on the kernel's own layout, and only its result
        # (int8: a quarter of the int32 bytes) is transposed back to NCHW.
        channels_last = correction.reshape(1, 1, 1, -1)

        def unpack(out: np.ndarray, arrays: Arrays) -> np.ndarray:
            acc = _output_columns(out, shape) + channels_last
            if yq is not None:
                acc = requantize(acc, scale.reshape(1, 1, 1, -1), yq.zero_point)
            return np.ascontiguousarray(acc.transpose(0, 3, 1, 2))

        return Layer(name, op, (x,), output, (tuple(x_shape),),
                     (shape.n, shape.out_channels, oh, ow), dtype, shape.macs, _detail(shape),
                     kernels.conv2d(computed, kind, "int8"), pack, unpack, epilogue=_EPILOGUE,
                     variants=variants, fused=fused(correction) if kind == "int8" else None)

    def fused(correction: np.ndarray) -> FusedGemm | DepthwiseGemm | None:
        if yq is None or shape.groups != 1 and not shape.depthwise:
            return None
        out_q = _DeviceOutput(yq)
        x_zp = _zero_point(xq, "int8")
        rows = shape.n * oh * ow

        def image_rows(nhwc: np.ndarray) -> ImageRows:
            return ImageRows(_windows(_padded_nhwc(nhwc, shape, x_zp), shape))

        def padded(arrays: Arrays) -> np.ndarray:
            nhwc = _activation(arrays[0], "int8").transpose(0, 2, 3, 1)
            return _padded_nhwc(nhwc, shape, x_zp)

        def gathered(arrays: Arrays) -> np.ndarray:
            return _im2col(padded(arrays), shape)

        def output(out: np.ndarray) -> np.ndarray:
            nhwc = out.reshape(shape.n, oh, ow, shape.out_channels)
            return out_q.output(np.ascontiguousarray(nhwc.transpose(0, 3, 1, 2)))

        if shape.depthwise:
            taps = shape.kernel[0] * shape.kernel[1]
            bias, scales = correction.reshape(-1), _per_channel(scale, shape.c)
            nhwc = DepthwiseNhwc(computed, x_zp, w, bias, scales, out_q.requantisation)
            return DepthwiseGemm(lambda arrays: gathered(arrays).reshape(rows, taps, shape.c),
                                 rows, w.reshape(taps, shape.c), bias, scales,
                                 out_q.requantisation, output, nhwc=nhwc,
                                 image=ConvImage(shape, padded))

        def output_rows(tensor: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(tensor.transpose(0, 2, 3, 1)).reshape(rows, -1)

        return FusedGemm(gathered, rows, w.reshape(-1, shape.out_channels),
                         correction.reshape(-1), _per_channel(scale, shape.out_channels),
                         out_q.requantisation, output,
                         None if shape.kernel == (1, 1) and shape.strides == (1, 1)
                         else _IM2COL, None if out_q.unsigned else output_rows,
                         rows_nhwc=image_rows, image=ConvImage(shape, padded))

    return layer("int8", (layer("uint8", ()),))


class _DeviceOutput:
    """The output side of a layer whose kernel requantises (:class:`FusedGemm`). The kernel
    writes int8; a uint8 output is computed as int8 around a zero point 128 lower and
    shifted back here, the same arithmetic: ``clamp(rint(v), 0 - zp, 255 - zp) + zp - 128``
    is the uint8 value less 128."""

    def __init__(self, yq: QParams) -> None:
        self.unsigned = yq.dtype == np.dtype(np.uint8)
        self.requantisation = kernels.Requantisation(_zero_point(yq, "int8"))

    def output(self, out: np.ndarray) -> np.ndarray:
        """The kernel's int8 output as the layer's dtype."""
        return _activation(out, "uint8") if self.unsigned else out


def _im2col(padded: np.ndarray, shape: ConvShape) -> np.ndarray:
    """The NHWC ``padded`` input's windows as GEMM rows: one row per output pixel, its
    window in ``(kh, kw, c)`` order, the order of the HWIO weights flattened to
    ``(kh * kw * c, o)``."""
    windows = _windows(padded, shape)
    n, oh, ow, kh, kw, c = windows.shape
    return windows.reshape(n * oh * ow, kh * kw * c)


def _windows(padded: np.ndarray, shape: ConvShape) -> np.ndarray:
    """The NHWC ``padded`` input's windows, a read-only ``(n, oh, ow, kh, kw, c)`` view."""
    (kh, kw), (sh, sw), (dh, dw) = shape.kernel, shape.strides, shape.dilations
    oh, ow = shape.out_hw
    n, _, _, c = padded.shape
    s = padded.strides
    return np.lib.stride_tricks.as_strided(
        padded, (n, oh, ow, kh, kw, c), (s[0], s[1] * sh, s[2] * sw, s[1] * dh, s[2] * dw, s[3]),
        writeable=False)


def _per_channel(scale: np.ndarray, channels: int) -> np.ndarray:
    """A per-tensor or per-channel float32 scale as one value per output channel."""
    return np.broadcast_to(scale.reshape(-1).astype(np.float32), (channels,)).copy()


def _output_scale(aq: QParams, bq: QParams, yq: QParams) -> np.ndarray:
    """``(a_scale * b_scale) / y_scale`` in float32, per channel where ``b`` has several."""
    product = (aq.scale.reshape(-1) * bq.scale.reshape(-1)).astype(np.float32)
    return (product / yq.scale.reshape(-1)).astype(np.float32)


def float_matmul(name: str, op: str, a: str, a_shape: Sequence[int], b: str | None,
                 b_shape: Sequence[int], b_const: np.ndarray | None, bias: np.ndarray | None,
                 output: str, where: str, dtype: str = "float32") -> Layer:
    """A float MatMul or Gemm of ``dtype`` (float32 or float16), summing in float32, its
    bias and rounding on the host as :func:`float_conv`'s; ``b_const`` given: constant
    weights (K, N), else ``b`` names an activation of the same batch dimensions as ``a``."""
    plan = _MatmulPlan(where, a_shape, b_shape, b_const is not None)
    func = kernels.matmul(plan.batch, plan.rows, plan.k, plan.n, dtype, b_const is None)
    w = None if b_const is None else np.ascontiguousarray(b_const.astype(dtype))
    finish, epilogue = _float_output(bias, dtype, (-1,))

    def pack(arrays: Arrays) -> dict[str, np.ndarray]:
        return {"A": plan.a(arrays[0]), "B": w if w is not None else plan.b(arrays[1])}

    def unpack(out: np.ndarray, arrays: Arrays) -> np.ndarray:
        return finish(plan.output(out))

    inputs = (a,) if b is None else (a, b)
    shapes = (tuple(a_shape),) if b is None else (tuple(a_shape), tuple(b_shape))
    return Layer(name, op, inputs, output, shapes, plan.out_shape, dtype, plan.macs,
                 plan.detail, func, pack, unpack, epilogue=epilogue)


def integer_matmul(name: str, op: str, a: str, a_shape: Sequence[int], aq: QParams,
                   b: str | None, b_shape: Sequence[int], b_const: np.ndarray | None,
                   bq: QParams, bias: np.ndarray | None, yq: QParams | None, output: str,
                   where: str) -> Layer:
    """An integer matrix product (QDQ MatMul/Gemm, QLinearMatMul, MatMulInteger): constant
    weights (``b_const``, K x N) or a second activation ``b`` (int8). The layer's kernel
    takes ``a`` in int8; its variant, in uint8."""
    plan = _MatmulPlan(where, a_shape, b_shape, b_const is not None)
    w = None
    if b_const is not None:
        w = np.ascontiguousarray(_int8_weights(where, b_const, bq.zero_point, 1))
    scale = None if yq is None else _output_scale(aq, bq, yq)
    inputs = (a,) if b is None else (a, b)
    shapes = (tuple(a_shape),) if b is None else (tuple(a_shape), tuple(b_shape))
    dtype = "int32" if yq is None else str(yq.dtype)

    def layer(kind: str, variants: tuple[Layer, ...]) -> Layer:
        correction = np.zeros(plan.n, np.int32)
        if w is not None:
            correction = -_zero_point(aq, kind) * w.astype(np.int32).sum(axis=0)
        if bias is not None:
            correction = correction + bias.astype(np.int32).reshape(-1)
        correction = correction.astype(np.int32)

        def pack(arrays: Arrays) -> dict[str, np.ndarray]:
            second = w if w is not None else plan.b(_activation(arrays[1], "int8"))
            return {"A": plan.a(_activation(arrays[0], kind)), "B": second}

        def unpack(out: np.ndarray, arrays: Arrays) -> np.ndarray:
            acc = plan.output(out) + correction
            if w is None:
                acc = acc + _activation_corrections(arrays, aq, bq, plan.k, kind)
            acc = acc.astype(np.int32)
            return acc if yq is None else requantize(acc, scale, yq.zero_point)

        func = kernels.matmul(plan.batch, plan.rows, plan.k, plan.n, kind, w is None, "int8")
        return Layer(name, op, inputs, output, shapes, plan.out_shape, dtype, plan.macs,
                     plan.detail, func, pack, unpack, epilogue=_EPILOGUE, variants=variants,
                     fused=fused(correction) if kind == "int8" else None)

    def fused(correction: np.ndarray) -> FusedGemm | None:
        if yq is None or w is None:
            return None
        out_q = _DeviceOutput(yq)

        def rows(arrays: Arrays) -> np.ndarray:
            return _activation(arrays[0], "int8").reshape(plan.m, plan.k)

        def output(out: np.ndarray) -> np.ndarray:
            return out_q.output(out).reshape(plan.out_shape)

        def output_rows(tensor: np.ndarray) -> np.ndarray:
            return tensor.reshape(plan.m, plan.n)

        return FusedGemm(rows, plan.m, w, correction, _per_channel(scale, plan.n),
                         out_q.requantisation, output,
                         output_rows=None if out_q.unsigned else output_rows)

    return layer("int8", (layer("uint8", ()),))


def _activation_corrections(arrays: Arrays, aq: QParams, bq: QParams, k: int,
                            kind: str) -> np.ndarray:
    """``sum (a - za)(b - zb) - sum a b`` for two activations, ``a`` as ``kind`` and ``b``
    as int8: the terms the zero points add to the plain product."""
    a8 = _activation(arrays[0], kind).astype(np.int32)
    b8 = _activation(arrays[1], "int8").astype(np.int32)
    za, zb = _zero_point(aq, kind), _zero_point(bq, "int8")
    rows = a8.sum(axis=-1, keepdims=True)
    cols = b8.sum(axis=-2, keepdims=True)
    return (-za * cols - zb * rows + k * za * zb).astype(np.int32)


class _MatmulPlan:
    """How an ONNX matrix product maps onto the kernel: constant weights flatten every batch
    dimension of ``a`` into M; two activations keep one batch dimension, their product."""

    def __init__(self, where: str, a_shape: Sequence[int], b_shape: Sequence[int],
                 constant_b: bool) -> None:
        if len(a_shape) < 2 or len(b_shape) < 2:
            raise OnnxImportError(f"{where} requires operands of at least 2 dimensions, got "
                                  f"{tuple(a_shape)} and {tuple(b_shape)}")
        if a_shape[-1] != b_shape[-2]:
            raise OnnxImportError(f"{where} requires the inner dimensions to agree, got "
                                  f"{tuple(a_shape)} x {tuple(b_shape)}")
        self.k, self.n = int(a_shape[-1]), int(b_shape[-1])
        lead = tuple(int(d) for d in a_shape[:-2])
        if constant_b:
            if len(b_shape) != 2:
                raise OnnxImportError(f"{where} requires 2-D constant weights, got "
                                      f"{tuple(b_shape)}")
            self.batch, self.m = 0, math.prod(lead) * int(a_shape[-2])
        else:
            if tuple(b_shape[:-2]) != lead:
                raise OnnxImportError(f"{where} requires both activations to have the same "
                                      f"batch dimensions (no broadcasting), got "
                                      f"{tuple(a_shape)} x {tuple(b_shape)}")
            self.batch, self.m = math.prod(lead) if lead else 0, int(a_shape[-2])
        self.out_shape = (*lead, int(a_shape[-2]), self.n)
        self.macs = math.prod(self.out_shape) * self.k
        self.detail = f"M{math.prod(self.out_shape) // self.n} N{self.n} K{self.k}"
        # The engine maps a GEMM's rows onto an iterator, and a loop of one iteration is
        # none: a one-row product (a classifier on one image) gets a second row of zeros,
        # which the kernel computes and unpack drops. The layer's MACs stay the true ones.
        self.rows = max(self.m, 2)
        self._a_rows = (self.m, self.k) if not self.batch else (self.batch, self.m, self.k)
        self._b_kernel = (self.k, self.n) if not self.batch else (self.batch, self.k, self.n)

    def a(self, array: np.ndarray) -> np.ndarray:
        """``a`` in the kernel's shape (padded with zero rows to :attr:`rows`)."""
        rows = array.reshape(self._a_rows)
        if self.rows == self.m:
            return np.ascontiguousarray(rows)
        padding = [(0, 0)] * rows.ndim
        padding[-2] = (0, self.rows - self.m)
        return np.pad(rows, padding)

    def output(self, out: np.ndarray) -> np.ndarray:
        """The kernel's output without its padding rows, in the layer's output shape."""
        return np.ascontiguousarray(out[..., :self.m, :]).reshape(self.out_shape)

    def b(self, array: np.ndarray) -> np.ndarray:
        """An activation ``b`` in the kernel's shape."""
        return np.ascontiguousarray(array.reshape(self._b_kernel))


def global_average_pool(x_shape: Sequence[int], xq: QParams, yq: QParams) -> FusedGemm | None:
    """onnxruntime's QLinearGlobalAveragePool (:func:`ir.onnx.host_ops.
    qlinear_global_average_pool`) as a GEMM with its epilogue, for a device that runs one:
    each (image, channel) row of the int8 input times a column of ones is the integer sum,
    less ``zero_point * size`` (the bias), requantised by ``x_scale / (y_scale * size)``
    computed as onnxruntime computes it. None for a uint8 input or output."""
    if xq.dtype != np.dtype(np.int8) or yq.dtype != np.dtype(np.int8):
        return None
    n, c = int(x_shape[0]), int(x_shape[1])
    size = math.prod(int(d) for d in x_shape[2:])
    scale = xq.scale.reshape(()) / (yq.scale.reshape(()) * np.float32(size))

    def rows(arrays: Arrays) -> np.ndarray:
        return arrays[0].reshape(n * c, size)

    def output(out: np.ndarray) -> np.ndarray:
        return out.reshape(n, c, *(1,) * (len(x_shape) - 2))

    return FusedGemm(rows, n * c, np.ones((size, 1), np.int8),
                     np.array([-xq.scalar_zero_point() * size], np.int32),
                     np.array([scale], np.float32),
                     kernels.Requantisation(yq.scalar_zero_point()), output)
