"""The operators that run on the host, as numpy functions of their input arrays.

Elementwise and data-movement operators (Relu, Clip, Add, the pools, Reshape, Flatten,
Transpose) and Softmax are not GEMMs: no compute intrinsic of a target computes them, so they
run on the host, in float32 as onnxruntime does. In a QDQ model they are wrapped
(:func:`qdq`): inputs dequantised, the float operator, the output quantised, which is what
onnxruntime runs for the patterns it does not fuse; for those it fuses into an integer
kernel with other arithmetic (GlobalAveragePool), :func:`qlinear_global_average_pool`
reproduces that kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ir.onnx.errors import OnnxImportError
from ir.onnx.quant import (
    QParams,
    dequantize_linear,
    integer_range,
    quantize_linear,
    requantize,
)

HostFn = Callable[[Sequence[np.ndarray]], np.ndarray]


def relu() -> HostFn:
    """``max(x, 0)``."""
    return lambda xs: np.maximum(xs[0], np.zeros((), xs[0].dtype))


def clip(low: float | None, high: float | None) -> HostFn:
    """``min(max(x, low), high)``; a missing bound does not clip."""
    def run(xs: Sequence[np.ndarray]) -> np.ndarray:
        x = xs[0]
        if low is not None:
            x = np.maximum(x, np.asarray(low, x.dtype))
        if high is not None:
            x = np.minimum(x, np.asarray(high, x.dtype))
        return x
    return run


def add() -> HostFn:
    """``a + b`` with numpy (ONNX multidirectional) broadcasting."""
    return lambda xs: xs[0] + xs[1]


def multiply() -> HostFn:
    """``a * b`` with numpy (ONNX multidirectional) broadcasting."""
    return lambda xs: xs[0] * xs[1]


def hard_sigmoid(alpha: float, beta: float) -> HostFn:
    """``clip(alpha * x + beta, 0, 1)`` in float32, the multiply and the add each rounded,
    as onnxruntime's CPU kernel computes it (no fused multiply-add)."""
    a, b = np.float32(alpha), np.float32(beta)
    return lambda xs: np.clip(xs[0] * a + b, np.float32(0), np.float32(1))


def pool_windows(x: np.ndarray, kernel, strides, pads, fill: float) -> np.ndarray:
    """``(n, c, oh, ow, kh, kw)`` windows of NCHW ``x`` padded with ``fill``."""
    top, left, bottom, right = pads
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=fill)
    view = np.lib.stride_tricks.sliding_window_view(padded, kernel, axis=(2, 3))
    return view[:, :, ::strides[0], ::strides[1]]


def pool_attributes(where: str, attrs: dict) -> tuple[tuple, tuple, tuple]:
    """``(kernel, strides, pads)`` of MaxPool/AveragePool, refusing what the host functions
    do not compute (ceil_mode, dilations, auto_pad)."""
    kernel = tuple(attrs.get("kernel_shape", ()))
    strides = tuple(attrs.get("strides", (1,) * len(kernel)))
    pads = tuple(attrs.get("pads", (0,) * 2 * len(kernel)))
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    if len(kernel) != 2 or len(strides) != 2 or len(pads) != 4:
        raise OnnxImportError(f"{where} requires a 2-D window (kernel_shape, strides, pads), "
                              f"got kernel_shape {kernel}, strides {strides}, pads {pads}")
    unsupported = {"ceil_mode": attrs.get("ceil_mode", 0) != 0,
                   "dilations": tuple(attrs.get("dilations", (1, 1))) != (1, 1),
                   "auto_pad": auto_pad not in (b"NOTSET", "NOTSET"),
                   "storage_order": attrs.get("storage_order", 0) != 0}
    bad = [name for name, given in unsupported.items() if given]
    if bad:
        raise OnnxImportError(f"{where} requires the default {bad[0]}, got "
                              f"{attrs.get(bad[0])!r}")
    return kernel, strides, pads


def pool_output_shape(x_shape, kernel, strides, pads) -> tuple[int, ...]:
    """The output shape of a 2-D pool of NCHW ``x_shape``."""
    n, c, h, w = x_shape
    return (n, c, (h + pads[0] + pads[2] - kernel[0]) // strides[0] + 1,
            (w + pads[1] + pads[3] - kernel[1]) // strides[1] + 1)


def max_pool(kernel, strides, pads, channels_last: bool = False) -> HostFn:
    """MaxPool; the padding never wins. The window's offsets are maxed in one strided view
    at a time (a few whole-array passes, where reducing the 6-D window view is slow).
    ``channels_last``: the input and output are ``(n, h, w, c)`` instead of ONNX's NCHW."""
    def run(xs: Sequence[np.ndarray]) -> np.ndarray:
        x = xs[0]
        fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        if channels_last:
            windows = pool_windows(x.transpose(0, 3, 1, 2), kernel, strides, pads, fill)
            windows = windows.transpose(0, 2, 3, 1, 4, 5)
        else:
            windows = pool_windows(x, kernel, strides, pads, fill)
        out = np.array(windows[..., 0, 0])
        for dy in range(kernel[0]):
            for dx in range(kernel[1]):
                np.maximum(out, windows[..., dy, dx], out=out)
        return out
    return run


def average_pool(kernel, strides, pads, count_include_pad: bool) -> HostFn:
    """AveragePool, dividing by the window (``count_include_pad``) or by its elements
    inside the input."""
    def run(xs: Sequence[np.ndarray]) -> np.ndarray:
        x = xs[0].astype(np.float32)
        total = pool_windows(x, kernel, strides, pads, 0.0).sum(axis=(4, 5), dtype=np.float32)
        if count_include_pad:
            return (total / np.float32(kernel[0] * kernel[1])).astype(np.float32)
        ones = np.ones((1, 1) + x.shape[2:], np.float32)
        count = pool_windows(ones, kernel, strides, pads, 0.0).sum(axis=(4, 5))
        return (total / count).astype(np.float32)
    return run


def global_average_pool() -> HostFn:
    """The mean over every spatial dimension, keeping them as 1."""
    def run(xs: Sequence[np.ndarray]) -> np.ndarray:
        x = xs[0]
        axes = tuple(range(2, x.ndim))
        size = math.prod(x.shape[2:])
        return (x.sum(axis=axes, keepdims=True, dtype=np.float32) / np.float32(size)
                ).astype(np.float32)
    return run


def rounded(fn: HostFn, dtype: type) -> HostFn:
    """``fn``'s result rounded once to ``dtype`` (a float16 layer computed in float32)."""
    return lambda xs: fn(xs).astype(dtype)


def reshape(shape: tuple[int, ...]) -> HostFn:
    """Reshape to a resolved shape (no 0 or -1 left)."""
    return lambda xs: xs[0].reshape(shape)


def window(index: tuple[slice, ...]) -> HostFn:
    """The part of the input ``index`` selects (a Split's output), as its own array."""
    return lambda xs: np.ascontiguousarray(xs[0][index])


def transpose(perm: tuple[int, ...]) -> HostFn:
    """Transpose by ``perm``."""
    return lambda xs: np.ascontiguousarray(xs[0].transpose(perm))


def softmax(axis: int) -> HostFn:
    """Softmax along ``axis``, in float32, shifted by the maximum."""
    def run(xs: Sequence[np.ndarray]) -> np.ndarray:
        x = xs[0].astype(np.float32)
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)
    return run


def quantize(q: QParams) -> HostFn:
    """QuantizeLinear with ``q``'s scale and zero point."""
    def run(xs: Sequence[np.ndarray]) -> np.ndarray:
        x = xs[0]
        return quantize_linear(x, q.broadcast_scale(x.ndim, q.axis), q.zero_point)
    return run


def dequantize(q: QParams) -> HostFn:
    """DequantizeLinear with ``q``'s scale and zero point."""
    def run(xs: Sequence[np.ndarray]) -> np.ndarray:
        x = xs[0]
        return dequantize_linear(x, q.broadcast_scale(x.ndim, q.axis), q.zero_point)
    return run


def qdq(inner: HostFn, inputs: Sequence[QParams], output: QParams) -> HostFn:
    """``inner`` between dequantised inputs and a quantised output: the float path of a QDQ
    node onnxruntime does not fuse."""
    def run(xs: Sequence[np.ndarray]) -> np.ndarray:
        floats = [dequantize_linear(x, q.scale.reshape(()), q.zero_point)
                  for x, q in zip(xs, inputs)]
        return quantize_linear(inner(floats), output.scale.reshape(()), output.zero_point)
    return run


def qlinear_global_average_pool(xq: QParams, yq: QParams) -> HostFn:
    """onnxruntime's QLinearGlobalAveragePool (the QDQ GlobalAveragePool it fuses): the
    integer sum less ``zero_point * size``, requantised by ``x_scale / (y_scale * size)``
    (MlasQLinearGlobalAveragePool)."""
    def run(xs: Sequence[np.ndarray]) -> np.ndarray:
        x = xs[0]
        size = math.prod(x.shape[2:])
        acc = x.astype(np.int32).sum(axis=tuple(range(2, x.ndim)), keepdims=True)
        acc = acc - np.int32(xq.scalar_zero_point() * size)
        scale = xq.scale.reshape(()) / (yq.scale.reshape(()) * np.float32(size))
        return requantize(acc, np.float32(scale), yq.zero_point)
    return run


def qlinear_softmax(xq: QParams, yq: QParams, axis: int, opset: int) -> HostFn:
    """onnxruntime's QLinearSoftmax (the QDQ Softmax it fuses; contrib_ops/cpu/quantization/
    qlinear_softmax.cc): a 256-entry float32 table of ``exp``, shifted so the row's maximum
    lands on its top entry, summed in float32 in order, each entry times
    ``floor(1 / y_scale)`` divided by the sum, rounded half to even, plus the zero point,
    and narrowed as the kernel narrows (a value above 255 becomes 255 first)."""
    signed = xq.dtype == np.int8
    x_scale = float(xq.scale.reshape(()))
    y_scale = np.floor(np.float32(1.0) / yq.scale.reshape(())).astype(np.float32)
    zero = yq.scalar_zero_point()

    def table(length: int) -> np.ndarray:
        shift = math.log(float(np.finfo(np.float32).max) / length)
        shift = max(0.0, shift - 5) / x_scale
        values = np.empty(256, np.float32)
        for i in range(256):
            index = (i - 128) % 256 if signed else i
            values[index] = np.float32(math.exp((i - 255 + shift) * x_scale))
        return values

    def rows(x: np.ndarray, lookup: np.ndarray) -> np.ndarray:
        top = x.max(axis=-1, keepdims=True).astype(np.int32)
        if signed:
            index = (127 - top + x.astype(np.int32)) % 256
        else:
            index = 255 - top + x.astype(np.int32)
        entries = lookup[index]
        total = np.cumsum(entries, axis=-1, dtype=np.float32)[..., -1:]
        quotient = (entries * y_scale) / total
        q = np.rint(quotient).astype(np.int64) + zero
        q = np.where(q > 255, 255, q)
        return q.astype(np.uint8).view(np.int8) if signed else q.astype(np.uint8)

    def run(xs: Sequence[np.ndarray]) -> np.ndarray:
        x = xs[0]
        last = axis % x.ndim
        if opset < 13:
            flat = x.reshape(math.prod(x.shape[:last]), -1)
            return rows(flat, table(flat.shape[-1])).reshape(x.shape)
        moved = np.moveaxis(x, last, -1)
        return np.ascontiguousarray(np.moveaxis(rows(moved, table(moved.shape[-1])), -1, last))

    return run


def qlinear_add(aq: QParams, bq: QParams, yq: QParams) -> HostFn:
    """onnxruntime's QLinearAdd (the QDQ Add it fuses; MLAS's AVX2 kernel), on the raw
    integers in float32: ``ratio_x = x_scale / y_scale``, ``fixed = y_zp - (ratio_a * a_zp +
    ratio_b * b_zp)``, ``value = fixed + a * ratio_a + b * ratio_b``, rounded half to even
    and saturated. The kernel's compiler contracts multiply-then-add into fused
    multiply-adds, which decide ties: measured against onnxruntime, ``fixed = y_zp -
    fma(ratio_a, a_zp, ratio_b * b_zp)`` and ``value = fma(a, ratio_a, fma(b, ratio_b,
    fixed))`` match ResNet-50's residual adds, BERT's bias add and every int8 pair under
    three scale sets (tests/ir/onnx/test_quant.py), where plain multiplies and adds differ
    in 49 of 401,408 elements of ResNet-50's layer2.2.add and the other orders of the
    fused operations in some. A fused multiply-add is computed as :func:`_fma` does."""
    ratio_a, ratio_b, fixed = qlinear_add_terms(
        float(aq.scale.reshape(())), aq.scalar_zero_point(), float(bq.scale.reshape(())),
        bq.scalar_zero_point(), float(yq.scale.reshape(())), yq.scalar_zero_point())
    low, high = integer_range(yq.dtype)
    # Two 8-bit operands have 65,536 pairs: the formula computed once for each of them is a
    # table the add then reads, the same integers for a fraction of the float work.
    a, b = np.meshgrid(_values(aq), _values(bq), indexing="ij")
    value = _fma(a, ratio_a, _fma(b, ratio_b, np.full(a.shape, fixed, np.float32)))
    flat = np.clip(np.rint(value), low, high).astype(yq.dtype).reshape(-1)

    def run(xs: Sequence[np.ndarray]) -> np.ndarray:
        # Each operand's offset from its lowest value, as a byte: int8 shifts by 128, which
        # flips the sign bit; one 16-bit index per pair then reads the table.
        a, b = np.broadcast_arrays(*(np.bitwise_xor(x.view(np.uint8), np.uint8(0x80))
                                     if x.dtype == np.int8 else x for x in xs[:2]))
        index = np.left_shift(a, 8, dtype=np.uint16)
        np.bitwise_or(index, b, out=index)
        return np.take(flat, index)

    return run


def _values(q: QParams) -> np.ndarray:
    """Every value of ``q``'s 8-bit dtype, lowest first, as float32."""
    low, high = integer_range(q.dtype)
    return np.arange(low, high + 1, dtype=np.float32)


def qlinear_add_terms(a_scale: float, a_zero_point: int, b_scale: float, b_zero_point: int,
                      y_scale: float, y_zero_point: int
                      ) -> tuple[np.float32, np.float32, np.float32]:
    """QLinearAdd's float32 constants ``(ratio_a, ratio_b, fixed)`` as :func:`qlinear_add`
    computes them: ``ratio_x = x_scale / y_scale``, ``fixed = y_zp - fma(ratio_a, a_zp,
    ratio_b * b_zp)``."""
    f32 = np.float32
    ratio_a = f32(a_scale) / f32(y_scale)
    ratio_b = f32(b_scale) / f32(y_scale)
    fixed = f32(y_zero_point) - _fma(ratio_a, f32(a_zero_point), ratio_b * f32(b_zero_point))
    return ratio_a, ratio_b, fixed


def _fma(x, y, z):
    """``x * y + z`` as a fused multiply-add of float32 values: the product is exact in
    float64, the sum is rounded to float64 and then to float32 (one rounding, as the
    instruction does, except where the float64 sum lands exactly halfway between two
    float32 values, which needs a sum of more than 53 significant bits)."""
    exact = np.float64(x) * np.float64(y) + np.float64(z)
    return exact.astype(np.float32) if isinstance(exact, np.ndarray) else np.float32(exact)
