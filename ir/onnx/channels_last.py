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
        top, left = self.pads[:2]
        _, h, w, _ = nhwc.shape
        padded[:, top:top + h, left:left + w] = nhwc
