"""Layers that run as well on an int8 activation held channels last, ``(n, h, w, c)``, as
on ONNX's NCHW tensor: for a caller that keeps activations in its kernels' layout between
layers (:mod:`tensorize.model.native`) rather than converting around each such layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ir.function import PrimFunc
from ir.onnx import host_ops, kernels
from ir.onnx.graph import Arrays
from ir.onnx.kernels import ConvShape, Requantisation


@dataclass(frozen=True)
class MaxPoolNhwc:
    """A max pool whose input and output are quantised alike, so it picks int8 values in
    order and treats every channel alike: on an int8 ``(n, h, w, c)`` input (a uint8
    tensor's values less 128 keep their order) it gives its output so. ``pads`` is
    ``(top, left, bottom, right)``."""

    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]

    def __call__(self, arrays: Arrays) -> np.ndarray:
        """The pool on the host (numpy)."""
        return host_ops.max_pool(self.kernel, self.strides, self.pads, True)(arrays)

    def padded_shape(self, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
        """The shape of an ``(n, h, w, c)`` input with the pads around it."""
        n, h, w, c = shape
        top, left, bottom, right = self.pads
        return n, h + top + bottom, w + left + right, c

    def func(self, shape: tuple[int, ...]) -> PrimFunc:
        """The pool of an ``(n, h, w, c)`` input as a kernel of elementwise blocks
        (:func:`ir.onnx.kernels.max_pool_nhwc`) over the input padded with -128 (its
        parameter ``X``): a CPU target compiles it as it is."""
        return kernels.max_pool_nhwc(*self.padded_shape(shape), self.kernel, self.strides)

    def pad_into(self, nhwc: np.ndarray, padded: np.ndarray) -> None:
        """Write ``nhwc`` inside ``padded`` (of :meth:`padded_shape`), whose border the
        caller has filled with -128 (it never wins) and keeps so."""
        _pad_into(nhwc, padded, self.pads)


@dataclass(frozen=True, eq=False)
class DepthwiseNhwc:
    """A depthwise integer layer with its requantisation, on its int8 input held channels
    last: ``shape`` the convolution as the kernel computes it, the input padded with
    ``pad_value`` (the input's zero point, as int8), ``weights`` ``(kh, kw, c)``, ``bias``
    (int32, the zero-point corrections in it) and ``scale`` (float32) one per channel;
    the output int8 ``(n, oh, ow, c)``, a uint8 output's values less 128."""

    shape: ConvShape
    pad_value: int
    weights: np.ndarray
    bias: np.ndarray
    scale: np.ndarray
    requantisation: Requantisation

    def func(self) -> PrimFunc:
        """The layer as :func:`ir.onnx.kernels.depthwise_requantised`: parameters ``X``
        (the input, padded), ``W``, ``Bias``, ``Scale`` and the output."""
        return kernels.depthwise_requantised(self.shape, self.requantisation)

    def padded_shape(self) -> tuple[int, int, int, int]:
        """The shape of the kernel's padded input ``X``."""
        s = self.shape
        top, left, bottom, right = s.pads
        return s.n, s.h + top + bottom, s.w + left + right, s.c

    def constants(self) -> dict[str, np.ndarray]:
        """The kernel's constant inputs, read-only copies (a runner copies them in once)."""
        constants = {"W": self.weights, "Bias": self.bias, "Scale": self.scale}
        copies = {name: np.array(array) for name, array in constants.items()}
        for array in copies.values():
            array.setflags(write=False)
        return copies

    def pad_into(self, nhwc: np.ndarray, padded: np.ndarray) -> None:
        """Write ``nhwc`` inside ``padded`` (of :meth:`padded_shape`), whose border the
        caller has filled with :attr:`pad_value` and keeps so."""
        _pad_into(nhwc, padded, self.shape.pads)


def _pad_into(nhwc: np.ndarray, padded: np.ndarray, pads: tuple[int, int, int, int]) -> None:
    """``nhwc`` written inside ``padded``, ``pads`` ``(top, left, bottom, right)`` away
    from its edges."""
    top, left = pads[:2]
    _, h, w, _ = nhwc.shape
    padded[:, top:top + h, left:left + w] = nhwc
