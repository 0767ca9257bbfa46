"""Quantisation arithmetic exactly as onnxruntime's CPU kernels (MLAS) compute it.

- :func:`quantize_linear`: ``QuantizeLinear``, float32 input divided by the scale (a
  division, not a multiplication by the reciprocal), clamped to the integer range less the
  zero point, rounded half to even, plus the zero point (``MlasQuantizeLinear``).
- :func:`dequantize_linear`: ``(x - zero_point)`` converted to float32, times the scale.
- :func:`requantize`: an int32 accumulator to int8/uint8 as QLinearConv, QLinearMatMul,
  QGemm and QLinearGlobalAveragePool do it (``MlasRequantizeOutput``): converted to float32,
  multiplied by the float32 output scale, clamped, rounded half to even, plus the zero point.
- :func:`output_scale`: that scale, ``(x_scale * w_scale) / y_scale`` in float32, one
  rounding per operation, as the kernels compute it.

ONNX specifies round half to even; MLAS rounds by adding 1.5 * 2**23 (exact for the
clamped range), which is the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_RANGES = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}


def integer_range(dtype: np.dtype) -> tuple[int, int]:
    """The (lowest, highest) value of a quantised dtype (int8 or uint8)."""
    return _RANGES[np.dtype(dtype)]


def quantize_linear(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """``QuantizeLinear`` of float32 ``x``; ``scale``/``zero_point`` broadcast against it."""
    zp = np.asarray(zero_point)
    low, high = integer_range(zp.dtype)
    zp32 = zp.astype(np.int32)
    value = x.astype(np.float32) / np.asarray(scale, np.float32)
    value = np.minimum(np.maximum(value, (low - zp32).astype(np.float32)),
                       (high - zp32).astype(np.float32))
    return (np.rint(value).astype(np.int32) + zp32).astype(zp.dtype)


def dequantize_linear(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """``DequantizeLinear``: ``float32(q - zero_point) * scale``."""
    shifted = q.astype(np.int32) - np.asarray(zero_point).astype(np.int32)
    return shifted.astype(np.float32) * np.asarray(scale, np.float32)


def output_scale(x_scale: np.ndarray, w_scale: np.ndarray, y_scale: np.ndarray) -> np.ndarray:
    """The requantisation scale of an integer layer, in float32 as the kernels round it."""
    product = np.asarray(x_scale, np.float32) * np.asarray(w_scale, np.float32)
    return (product / np.asarray(y_scale, np.float32)).astype(np.float32)


def requantize(acc: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """An int32 accumulator (bias already added) to the dtype of ``zero_point``; ``scale``
    broadcasts against ``acc`` (per output channel: shaped to the channel axis)."""
    zp = np.asarray(zero_point)
    low, high = integer_range(zp.dtype)
    zp32 = int(zp)
    value = acc.astype(np.int32).astype(np.float32) * np.asarray(scale, np.float32)
    value = np.minimum(np.maximum(value, np.float32(low - zp32)), np.float32(high - zp32))
    return (np.rint(value).astype(np.int32) + zp32).astype(zp.dtype)


class QParams:
    """A quantised tensor's parameters: ``scale`` (float32, a scalar or one per channel of
    ``axis``) and ``zero_point`` (a scalar of the tensor's integer dtype)."""

    __slots__ = ("axis", "scale", "zero_point")

    def __init__(self, scale: np.ndarray, zero_point: np.ndarray, axis: int = 1) -> None:
        self.scale = np.asarray(scale, np.float32)
        self.zero_point = np.asarray(zero_point)
        self.axis = axis

    @property
    def dtype(self) -> np.dtype:
        """The integer dtype of the quantised tensor."""
        return self.zero_point.dtype

    def scalar_zero_point(self) -> int:
        """The zero point as an int; every zero point the importer takes is one value."""
        return int(self.zero_point.reshape(-1)[0])

    def broadcast_scale(self, ndim: int, axis: int) -> np.ndarray:
        """The scale shaped to broadcast along ``axis`` of an ``ndim``-dimensional tensor."""
        if self.scale.size == 1:
            return self.scale.reshape(())
        shape = [1] * ndim
        shape[axis] = self.scale.size
        return self.scale.reshape(shape)


@dataclass(frozen=True, eq=False)
class QuantisedAdd:
    """An add of two quantised activations as onnxruntime's QLinearAdd computes it: the
    operands' parameters ``a`` and ``b`` and the output's ``y``, each with one scale and
    one zero point (:func:`ir.onnx.host_ops.qlinear_add`)."""

    a: QParams
    b: QParams
    y: QParams
