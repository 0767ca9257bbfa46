"""A depthwise integer layer as grouped GEMMs with its epilogue in the kernel, for a device
whose GEMM array is ``T`` columns wide (the NPU).

A depthwise layer's channel indexes input, weight and output alike, so it is no GEMM; over
groups of ``T`` channels it is one: with ``c = g T + o``, ``D[g, (r, i), o] = W[r, g T + o]``
where ``i == o`` (else 0) and ``A[g, p, (r, i)]`` the input at output pixel ``p``, window
offset ``r`` and channel ``g T + i``,

    O[p, g T + o] = sum over r, i of A[g, p, (r, i)] * D[g, (r, i), o]

which is the layer's sum (only ``i == o`` is not zero), ``T`` times its MACs on the array.
The engine's ``diagonalize`` (docs/schedule.md) makes the same rewrite of a depthwise
block; here the layer's pack makes it, so the kernel is a plain batched GEMM followed by
the requantisation (:func:`ir.onnx.kernels.grouped_matmul_requantised`), which the engine
fuses onto the accumulator tile as it does a convolution's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ir.onnx import kernels
from ir.onnx.channels_last import DepthwiseNhwc
from ir.onnx.fused import ConvImage, ImagePack, round_up
from ir.onnx.graph import Arrays, Layer

_HOST_WORK = "host: the input's windows gathered per channel group in the pack"


@dataclass(frozen=True, eq=False)
class DepthwiseGemm:
    """A depthwise layer's grouped GEMMs with their epilogue: ``windows(arrays)`` gives the
    int8 ``(m, taps, channels)`` input windows (one row per output pixel), ``weights`` the
    int8 ``(taps, channels)`` filter, ``bias`` (int32) and ``scale`` (float32) one per
    channel, ``requantisation`` the rest of the epilogue, ``output`` the kernel's int8
    ``(m, channels)`` result as the layer's output."""

    windows: Callable[[Arrays], np.ndarray]
    m: int
    weights: np.ndarray
    bias: np.ndarray
    scale: np.ndarray
    requantisation: kernels.Requantisation
    output: Callable[[np.ndarray], np.ndarray]
    host_work: str | None = _HOST_WORK
    # No residual add joins a depthwise layer (:mod:`ir.onnx.residual` reads this).
    output_rows: None = None
    # The array runs T - 1 zero products for each of the layer's: worth it on a device
    # whose array would otherwise wait for the host, not on a CPU, which runs the layer's
    # own kernel instead.
    diagonal: bool = True
    # The layer on its input held channels last, with no diagonal tiles: for a caller that
    # keeps activations so and compiles it as it is (:mod:`tensorize.model.native`).
    nhwc: DepthwiseNhwc | None = None
    # The convolution's input and shape, for a kernel that gathers its windows itself
    # (:meth:`implicit_layer`); None: not known.
    image: ConvImage | None = None

    def layer(self, base: Layer, tile: tuple[int, int, int]) -> Layer:
        """``base`` as :func:`ir.onnx.kernels.grouped_matmul_requantised` over groups of
        ``tile[2]`` channels, each dimension padded to whole ``tile``s (rows, depth,
        columns)."""
        sizes = self._sizes(tile)
        constants = self._constants(sizes)

        def pack(arrays: Arrays) -> dict[str, np.ndarray]:
            return {"A": self._rows(arrays, sizes), **constants}

        groups, mp, kp, width = sizes
        q = self.requantisation
        # One group is the plain GEMM: a batch of one is no loop for the engine to map.
        func = (kernels.matmul_requantised(mp, kp, width, q) if groups == 1
                else kernels.grouped_matmul_requantised(groups, mp, kp, width, q))
        return Layer(base.name, base.op, base.inputs, base.output, base.input_shapes,
                     base.output_shape, base.output_dtype, base.macs, base.detail, func,
                     pack, self._unpack(), epilogue=self.host_work)

    def implicit_layer(self, base: Layer, tile: tuple[int, int, int]) -> Layer | None:
        """:meth:`layer` whose kernel gathers each group's windows from the convolution's
        padded channels-last input itself (:func:`ir.onnx.kernels.
        grouped_conv_rows_requantised`), which a device whose transfers gather does in them;
        the pack then hands over that input. None without the input's shape, for a single
        group (the plain GEMM's form), or where the channels are no whole groups."""
        sizes = self._sizes(tile)
        groups, mp, kp, width = sizes
        if self.image is None or groups == 1 or self.image.shape.c % width:
            return None
        q = self.requantisation
        func = kernels.grouped_conv_rows_requantised(self.image.shape, mp, kp, width, q)
        family = kernels.KernelFamily(("grouped_conv_rows_requantised", self.image.shape, mp,
                                       kp, width), q)
        return Layer(base.name, base.op, base.inputs, base.output, base.input_shapes,
                     base.output_shape, base.output_dtype, base.macs, base.detail, func,
                     ImagePack(self, len(base.inputs), None, self._constants(sizes)),
                     self._unpack(), family=family)

    def joined(self, base: Layer, add: Layer, tile: tuple[int, int, int]) -> Layer:
        """Refused: no residual add joins a depthwise layer."""
        raise ValueError(f"layer {base.name} is depthwise: no add joins it")

    def unfused(self, base: Layer, tile: tuple[int, int, int]) -> tuple[Layer, Layer]:
        """``base`` as two kernels, padded as :meth:`layer` pads: the grouped GEMMs storing
        their int32 sums, then the epilogue as a kernel of its own reading them back."""
        sizes = self._sizes(tile)
        groups, mp, kp, width = sizes
        epilogue = self._constants(sizes)
        weights = epilogue.pop("B")

        def pack_gemm(arrays: Arrays) -> dict[str, np.ndarray]:
            return {"A": self._rows(arrays, sizes), "B": weights}

        def pack_epilogue(arrays: Arrays) -> dict[str, np.ndarray]:
            return {"X": arrays[0], **epilogue}

        q = self.requantisation
        shape = (mp, width) if groups == 1 else (groups, mp, width)
        sums = Layer(base.name, base.op, base.inputs, f"{base.output} (int32 sums)",
                     base.input_shapes, shape, "int32", base.macs, base.detail,
                     kernels.matmul(0 if groups == 1 else groups, mp, kp, width, "int8",
                                    groups > 1), pack_gemm,
                     lambda out, arrays: out, epilogue=self.host_work)
        requantised = Layer(f"{base.name} epilogue", "requantisation", (sums.output,),
                            base.output, (shape,), base.output_shape, base.output_dtype, 0, "",
                            kernels.requantised(mp, width, q) if groups == 1
                            else kernels.grouped_requantised(groups, mp, width, q),
                            pack_epilogue, self._unpack())
        return sums, requantised

    def _sizes(self, tile: tuple[int, int, int]) -> tuple[int, int, int, int]:
        """``(groups, rows, depth, width)`` of the padded grouped GEMMs."""
        rows, depth, width = tile
        taps, channels = self.weights.shape
        # A GEMM of one row has no row loop to map (a loop of one iteration is dropped).
        return (round_up(channels, width) // width, max(round_up(self.m, rows), 2),
                round_up(taps * width, depth), width)

    def _rows(self, arrays: Arrays, sizes: tuple[int, int, int, int]) -> np.ndarray:
        """The windows as each group's GEMM rows: ``A[g, p, (r, i)]``, zero-padded."""
        groups, mp, kp, width = sizes
        windows = self.windows(arrays)
        m, taps, channels = windows.shape
        a = np.zeros((groups, mp, kp), np.int8)
        grouped = np.zeros((m, taps, groups * width), np.int8)
        grouped[:, :, :channels] = windows
        a[:, :m, :taps * width] = grouped.reshape(m, taps, groups, width).transpose(
            2, 0, 1, 3).reshape(groups, m, taps * width)
        return _one_group(a)

    def _constants(self, sizes: tuple[int, int, int, int]) -> dict[str, np.ndarray]:
        """The diagonal weight tiles, bias and scales by group: the same arrays every
        call, read-only, so a kernel's runner copies them in once."""
        groups, _, kp, width = sizes
        taps, channels = self.weights.shape
        filters = np.zeros((taps, groups * width), np.int8)
        filters[:, :channels] = self.weights
        diagonal = np.zeros((groups, taps, width, width), np.int8)
        lanes = np.arange(width)
        diagonal[:, :, lanes, lanes] = filters.reshape(taps, groups, width).transpose(1, 0, 2)
        b = np.zeros((groups, kp, width), np.int8)
        b[:, :taps * width] = diagonal.reshape(groups, taps * width, width)
        constants = {"B": b, "Bias": self._by_group(self.bias, groups, width),
                     "Scale": self._by_group(self.scale, groups, width)}
        constants = {name: _one_group(array) for name, array in constants.items()}
        for constant in constants.values():
            constant.setflags(write=False)
        return constants

    @staticmethod
    def _by_group(values: np.ndarray, groups: int, width: int) -> np.ndarray:
        """One value per channel as ``(groups, width)`` rows, zero-padded."""
        rows = np.zeros(groups * width, values.dtype)
        rows[:values.size] = values
        return rows.reshape(groups, width)

    def _unpack(self) -> Callable[[np.ndarray, Arrays], np.ndarray]:
        """The kernel's ``(groups, rows, width)`` output to the layer's: channels in
        order, the padding dropped."""
        channels = self.weights.shape[1]

        def unpack(out: np.ndarray, arrays: Arrays) -> np.ndarray:
            if out.ndim == 2:  # one group
                out = out[np.newaxis]
            groups, _, width = out.shape
            rows = out[:, :self.m, :].transpose(1, 0, 2).reshape(self.m, groups * width)
            return self.output(np.ascontiguousarray(rows[:, :channels]))

        return unpack


def _one_group(array: np.ndarray) -> np.ndarray:
    """``array`` by group, without its group dimension when there is one group (the kernel
    is then the plain GEMM)."""
    return array[0] if array.shape[0] == 1 else array
