"""An integer layer as one GEMM with its epilogue in the kernel, for a device that runs the
epilogue where the sum is (the NPU's vector unit).

:class:`FusedGemm` holds what the layer's int8 GEMM needs (its rows from the layer's
inputs, the constant weights, the per-channel bias and float32 scale) and gives, for the
device's tile sizes, a :class:`~ir.onnx.graph.Layer` whose kernel is
:func:`ir.onnx.kernels.matmul_requantised` on operands padded to whole tiles in the pack:
zero rows and columns, whose results the unpack drops. Padding in the pack keeps the
kernel a plain GEMM followed by elementwise blocks, which the engine fuses onto the
accumulator tile; the padded work is the same the engine's own padding would do.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ir.function import PrimFunc
from ir.onnx import kernels
from ir.onnx.graph import Arrays, Layer


@dataclass(frozen=True, eq=False)
class FusedGemm:
    """A layer's GEMM with its epilogue: ``rows(arrays)`` gives the int8 ``(m, k)`` left
    operand from the layer's inputs, ``weights`` the int8 ``(k, n)`` right one, ``bias``
    (int32) and ``scale`` (float32) one per output column, ``requantisation`` the rest of
    the epilogue; ``output`` turns the kernel's int8 ``(m, n)`` result into the layer's
    output; ``host_work`` says what ``rows`` computes on the host beyond layout, if
    anything."""

    rows: Callable[[Arrays], np.ndarray]
    m: int
    weights: np.ndarray
    bias: np.ndarray
    scale: np.ndarray
    requantisation: kernels.Requantisation
    output: Callable[[np.ndarray], np.ndarray]
    host_work: str | None = None
    # The inverse of ``output`` for an int8 tensor of the layer's shape (a residual add's
    # skip input), as the kernel's ``(m, n)`` rows; None: no add joins this layer.
    output_rows: Callable[[np.ndarray], np.ndarray] | None = None
    # Every product is one of the layer's (a depthwise layer's grouped form multiplies
    # zeros too: :class:`ir.onnx.depthwise.DepthwiseGemm`).
    diagonal: bool = False
    # The rows of a convolution's input held int8 and channels last, ``(n, h, w, c)``, to
    # gather where the caller wants them: for a caller that keeps a convolution's output in
    # its kernel's layout for the next one (:mod:`tensorize.model.native`); None: the input
    # is no image.
    rows_nhwc: Callable[[np.ndarray], ImageRows] | None = None
    # A convolution's input and shape, for a kernel that gathers its rows itself (an
    # implicit GEMM, :meth:`implicit_layer`); None: the rows are no convolution's.
    image: ConvImage | None = None

    def layer(self, base: Layer, tile: tuple[int, int, int]) -> Layer:
        """``base`` computed by this GEMM with every dimension padded to a multiple of
        ``tile`` (rows, depth, columns)."""
        mp, kp, np_ = self._padded_sizes(tile)
        pack = GemmPack(self, len(base.inputs), (mp, kp), None, self._constants(kp, np_),
                        lambda rows: kernels.matmul_requantised(rows, kp, np_,
                                                                self.requantisation))
        family = kernels.KernelFamily(("matmul_requantised", mp, kp, np_), self.requantisation)
        return self._form(base, None, pack.kernel(mp), pack, family, self.host_work)

    def joined(self, base: Layer, add: Layer, tile: tuple[int, int, int]) -> Layer:
        """``base`` with the quantised ``add`` after it in one kernel
        (:func:`ir.onnx.kernels.matmul_requantised_add`): ``base``'s output is the add's
        first operand, its second (the skip) comes in as a tile of the accumulator's shape,
        and the layer computes the add's output; padded as :meth:`layer` pads."""
        if self.output_rows is None or add.qadd is None:
            raise ValueError(f"layer {base.name} cannot take the add {add.name}")
        mp, kp, np_ = self._padded_sizes(tile)
        params, residual = _add_terms(add, np_)
        pack = GemmPack(self, len(base.inputs), (mp, kp), (mp, np_),
                        {**self._constants(kp, np_), "AddParams": params},
                        lambda rows: kernels.matmul_requantised_add(
                            rows, kp, np_, self.requantisation, residual))
        family = kernels.KernelFamily(("matmul_requantised_add", mp, kp, np_),
                                      self.requantisation, residual)
        return self._form(base, add, pack.kernel(mp), pack, family, self.host_work)

    def implicit_layer(self, base: Layer, tile: tuple[int, int, int],
                       add: Layer | None = None) -> Layer | None:
        """:meth:`layer` (with ``add``, :meth:`joined`) whose kernel gathers the GEMM's rows
        from the convolution's padded channels-last input itself
        (:func:`ir.onnx.kernels.conv_rows_requantised`), which a device whose transfers
        gather does in them; the pack then hands over that input and not the rows. None
        when the rows are no convolution's, or when the input's channels are not whole
        multiples of ``tile``'s depth: a depth-wide block of a row would then span two
        window positions, not one run of the input, and no transfer gathers it."""
        if self.image is None or self.image.shape.c % tile[1] or (
                add is not None and (self.output_rows is None or add.qadd is None)):
            return None
        mp, kp, np_ = self._padded_sizes(tile)
        shape, constants = self.image.shape, self._constants(kp, np_)
        if add is None:
            func = kernels.conv_rows_requantised(shape, mp, kp, np_, self.requantisation)
            pack = ImagePack(self, len(base.inputs), None, constants)
            family = kernels.KernelFamily(("conv_rows_requantised", shape, mp, kp, np_),
                                          self.requantisation)
            return self._form(base, None, func, pack, family, None)
        params, residual = _add_terms(add, np_)
        func = kernels.conv_rows_requantised_add(shape, mp, kp, np_, self.requantisation,
                                                 residual)
        pack = ImagePack(self, len(base.inputs), (mp, np_), {**constants, "AddParams": params})
        family = kernels.KernelFamily(("conv_rows_requantised_add", shape, mp, kp, np_),
                                      self.requantisation, residual)
        return self._form(base, add, func, pack, family, None)

    def _form(self, base: Layer, add: Layer | None, func: PrimFunc, pack, family,
              epilogue: str | None) -> Layer:
        """``base`` (with ``add`` joined after it: the add's output, the skip its last
        input) computed by ``func`` on ``pack``'s arrays, its output unpacked."""
        if add is None:
            return Layer(base.name, base.op, base.inputs, base.output, base.input_shapes,
                         base.output_shape, base.output_dtype, base.macs, base.detail, func,
                         pack, self._unpack(), epilogue=epilogue, family=family)
        return Layer(f"{base.name} + {add.name}", f"{base.op} + {add.op}",
                     base.inputs + (add.inputs[1],), add.output,
                     base.input_shapes + (add.input_shapes[1],), add.output_shape,
                     add.output_dtype, base.macs, base.detail, func, pack, self._unpack(),
                     epilogue=epilogue, family=family)

    def _constants(self, kp: int, np_: int) -> dict[str, np.ndarray]:
        """The weights, bias and scales padded to ``kp`` x ``np_``: the same arrays every
        call, read-only, so a kernel's runner copies them in once."""
        constants = {"B": _padded(self.weights, (kp, np_)), "Bias": _padded(self.bias, (np_,)),
                     "Scale": _padded(self.scale, (np_,))}
        for constant in constants.values():
            constant.setflags(write=False)
        return constants

    def _unpack(self) -> Callable[[np.ndarray, Arrays], np.ndarray]:
        """The kernel's padded ``(m, n)`` output to the layer's: the padding dropped."""
        n = self.weights.shape[1]

        def unpack(out: np.ndarray, arrays: Arrays) -> np.ndarray:
            return self.output(np.ascontiguousarray(out[:self.m, :n]))

        return unpack

    def _padded_sizes(self, tile: tuple[int, int, int]) -> tuple[int, int, int]:
        """The GEMM's ``m``, ``k`` and ``n``, each rounded up to whole ``tile``s."""
        k, n = self.weights.shape
        mp, kp, np_ = (round_up(size, unit) for size, unit in zip((self.m, k, n), tile))
        # A GEMM of one row has no row loop to map (a loop of one iteration is dropped).
        return max(mp, 2), kp, np_

    def unfused(self, base: Layer, tile: tuple[int, int, int]) -> tuple[Layer, Layer]:
        """``base`` as two kernels, padded as :meth:`layer` pads: the GEMM storing its int32
        sums (``m x n`` padded, as they are), then the epilogue as a kernel of its own
        (:func:`ir.onnx.kernels.requantised`) reading them back, whose output is the layer's:
        the same work as :meth:`layer` without the sums staying where they are summed."""
        mp, kp, np_ = self._padded_sizes(tile)
        epilogue = self._constants(kp, np_)
        weights = epilogue.pop("B")

        def pack_gemm(arrays: Arrays) -> dict[str, np.ndarray]:
            return {"A": _padded(self.rows(arrays), (mp, kp)), "B": weights}

        def pack_epilogue(arrays: Arrays) -> dict[str, np.ndarray]:
            return {"X": arrays[0], **epilogue}

        sums = Layer(base.name, base.op, base.inputs, f"{base.output} (int32 sums)",
                     base.input_shapes, (mp, np_), "int32", base.macs, base.detail,
                     kernels.matmul(0, mp, kp, np_, "int8", False), pack_gemm,
                     lambda out, arrays: out, epilogue=self.host_work)
        requantised = Layer(f"{base.name} epilogue", "requantisation", (sums.output,),
                            base.output, ((mp, np_),), base.output_shape, base.output_dtype,
                            0, "", kernels.requantised(mp, np_, self.requantisation),
                            pack_epilogue, self._unpack())
        return sums, requantised


class ImageRows:
    """A convolution's GEMM rows over one input, not yet gathered: ``windows`` is the
    ``(n, oh, ow, kh, kw, c)`` view of its padded channels-last input, row ``r`` the
    window of output pixel ``r`` (``n``, ``oh``, ``ow`` in order)."""

    def __init__(self, windows: np.ndarray) -> None:
        self.windows = windows
        n, oh, ow, kh, kw, c = windows.shape
        self.count = n * oh * ow
        self.depth = kh * kw * c

    @classmethod
    def of_rows(cls, rows: np.ndarray) -> ImageRows:
        """GEMM rows already gathered, ``(m, k)`` (a matrix product's left operand), to
        copy as a convolution's are gathered: one line of ``m`` one-pixel windows."""
        m, k = rows.shape
        return cls(rows.reshape(1, 1, m, 1, 1, k))

    def gather(self, out: np.ndarray, start: int) -> None:
        """Rows ``start`` to ``start + len(out)`` into ``out``'s first :attr:`depth`
        columns (the others are left as they are: a padded operand's zeros): at most three
        copies per image (a part line, whole lines, a part line), each a strided copy that
        releases the GIL, so parts of the rows gather on threads of their own."""
        n, oh, ow = self.windows.shape[:3]
        end = start + len(out)
        if not 0 <= start <= end <= self.count:
            raise ValueError(f"rows {start}..{end} of {self.count}")
        dest = out[:, :self.depth]
        row = start
        while row < end:
            image, line = divmod(row // ow, oh)
            column = row % ow
            if column or end - row < ow:
                take = min(ow - column, end - row)
                source = self.windows[image, line, column:column + take]
            else:
                lines = min(oh - line, (end - row) // ow)
                take = lines * ow
                source = self.windows[image, line:line + lines]
            at = row - start
            np.copyto(dest[at:at + take].reshape(source.shape), source)
            row += take


@dataclass(frozen=True, slots=True)
class ConvImage:
    """A convolution's input as its kernel reads it: ``padded(arrays)`` gives the padded
    channels-last int8 tensor from the layer's inputs, of the kernel's ``shape``."""

    shape: kernels.ConvShape
    padded: Callable[[Arrays], np.ndarray]


@dataclass(frozen=True, eq=False)
class ImagePack:
    """The pack of an implicit form (:meth:`FusedGemm.implicit_layer`): the convolution's
    padded input from the layer's first ``inputs`` arrays, the constants, and for a joined
    form (``skip``, the residual input's padded shape) the residual input as rows."""

    fused: FusedGemm
    inputs: int
    skip: tuple[int, int] | None
    constants: dict[str, np.ndarray]

    def __call__(self, arrays: Arrays) -> dict[str, np.ndarray]:
        """The kernel's inputs from the layer's input arrays."""
        packed = {"X": self.fused.image.padded(arrays[:self.inputs]), **self.constants}
        if self.skip is not None:
            packed["Skip"] = _padded(self.fused.output_rows(arrays[self.inputs]), self.skip)
        return packed


@dataclass(frozen=True, eq=False)
class GemmPack:
    """The pack of a fused form (:meth:`FusedGemm.layer`) or a joined one (with ``skip``,
    the residual input's padded shape): the GEMM rows from the layer's first ``inputs``
    arrays, padded to ``rows``, and the constants, the same arrays every call. ``kernel``
    gives the form's kernel over any number of rows (the same work on fewer of them: a
    part of the rows, for a thread of its own)."""

    fused: FusedGemm
    inputs: int
    rows: tuple[int, int]
    skip: tuple[int, int] | None
    constants: dict[str, np.ndarray]
    kernel: Callable[[int], PrimFunc]

    def __call__(self, arrays: Arrays) -> dict[str, np.ndarray]:
        """The kernel's inputs from the layer's input arrays (and, for a joined form, the
        residual input as the kernel's ``(m, n)`` rows)."""
        packed = {"A": _padded(self.fused.rows(arrays[:self.inputs]), self.rows),
                  **self.constants}
        if self.skip is not None:
            packed["Skip"] = _padded(self.fused.output_rows(arrays[self.inputs]), self.skip)
        return packed


def _add_terms(add: Layer, channels: int) -> tuple[np.ndarray, kernels.ResidualAdd]:
    """A joined add's ``AddParams`` rows (read-only) for ``channels`` columns, and what its
    kernel knows of it."""
    params = kernels.qadd_parameters_of(add.qadd, channels)
    params.setflags(write=False)
    return params, kernels.ResidualAdd(add.qadd.y.scalar_zero_point())


def round_up(size: int, unit: int) -> int:
    """``size`` rounded up to a multiple of ``unit``."""
    return math.ceil(size / unit) * unit


def _padded(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``array`` with zeros appended to reach ``shape``."""
    if array.shape == shape:
        return np.ascontiguousarray(array)
    return np.pad(array, [(0, want - have) for have, want in zip(array.shape, shape)])
