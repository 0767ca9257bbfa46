"""Layers a device computes as kernels of elementwise blocks alone (its vector unit): a
quantised add, a max pool. Each function takes the host layer and the device's GEMM tile
``(rows, depth, columns)`` and gives the layer with a kernel (``func``), whose ``pack`` lays
the operands out as whole tiles and whose ``unpack`` gives the layer's tensor back; the
importer attaches them as :attr:`ir.onnx.graph.Layer.vector`.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ir.onnx import kernels
from ir.onnx.fused import round_up
from ir.onnx.graph import Arrays, Layer
from ir.onnx.host_ops import pool_windows

# Columns of a flattened elementwise kernel: its parameters are the same for every element,
# so any layout of the flattened tensors computes it; a few hundred columns make rows of
# whole tiles with little padding.
_COLUMNS = 256


def _flat_shape(size: int, tile: tuple[int, int, int]) -> tuple[int, int]:
    """Rows and columns of whole tiles holding ``size`` elements."""
    cols = round_up(min(size, _COLUMNS), tile[2])
    return max(round_up(math.ceil(size / cols), tile[0]), 2), cols


def quantised_add(base: Layer, tile: tuple[int, int, int]) -> Layer:
    """The quantised add ``base`` (:attr:`Layer.qadd`, two int8 operands of its shape) as
    :func:`ir.onnx.kernels.quantised_add` on the flattened operands."""
    q = base.qadd
    if q is None or base.output_dtype != "int8" or base.input_shapes[0] != base.input_shapes[1]:
        raise ValueError(f"layer {base.name} is not an add of two int8 tensors of one shape")
    size = math.prod(base.output_shape)
    rows, cols = _flat_shape(size, tile)
    params = kernels.qadd_parameters_of(q, cols)

    def flat(array: np.ndarray) -> np.ndarray:
        return np.pad(array.reshape(-1), (0, rows * cols - size)).reshape(rows, cols)

    def pack(arrays: Arrays) -> dict[str, np.ndarray]:
        return {"A": flat(arrays[0]), "Skip": flat(arrays[1]), "AddParams": params}

    def unpack(out: np.ndarray, arrays: Arrays) -> np.ndarray:
        return out.reshape(-1)[:size].reshape(base.output_shape)

    func = kernels.quantised_add(rows, cols, kernels.ResidualAdd(q.y.scalar_zero_point()))
    return replace(base, func=func, pack=pack, unpack=unpack, host=None)


def max_pool(kernel: tuple[int, int], strides: tuple[int, int], pads: tuple[int, ...],
             base: Layer, tile: tuple[int, int, int]) -> Layer:
    """The int8 max pool ``base`` (its input and output quantised alike, so the pool is the
    integers' max) as :func:`ir.onnx.kernels.max_of_tiles`: the pack gathers each window
    offset's elements into a tile of its own (padding with -128, which never wins), the
    kernel takes their elementwise max."""
    if base.output_dtype != "int8":
        raise ValueError(f"layer {base.name} is not an int8 max pool")
    size = math.prod(base.output_shape)
    rows, cols = _flat_shape(size, tile)
    count = kernel[0] * kernel[1]

    def pack(arrays: Arrays) -> dict[str, np.ndarray]:
        windows = pool_windows(arrays[0], kernel, strides, pads, -128)
        flat = windows.reshape(size, count)
        gathered = np.zeros((count, rows * cols), np.int8)
        gathered[:, :size] = flat.T
        return {f"W{w}": gathered[w].reshape(rows, cols) for w in range(count)}

    def unpack(out: np.ndarray, arrays: Arrays) -> np.ndarray:
        return out.reshape(-1)[:size].reshape(base.output_shape)

    return replace(base, func=kernels.max_of_tiles(rows, cols, count), pack=pack,
                   unpack=unpack, host=None,
                   epilogue="host: the windows gathered, one tile per offset, in the pack")
