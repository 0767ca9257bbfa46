"""What the importer returns: a graph of layers, each computing one tensor of the model.

A layer is either a **PrimFunc layer** (``func`` is set: a convolution or matrix product
built with the TE builder, which a target can tensorize) or a **host layer** (``host`` is
set: a numpy function for the operators that stay on the host, or, for an operator the
importer has no function for, the node run by onnxruntime: ``fallback``). A PrimFunc layer's
``pack`` turns the layer's input tensors into the function's arguments (layout, constants)
and ``unpack`` turns the function's output back into the model's tensor (layout, and for
integer layers the host epilogue: bias, zero-point corrections, requantisation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ir.function import PrimFunc

if TYPE_CHECKING:
    from ir.onnx.channels_last import MaxPoolNhwc
    from ir.onnx.depthwise import DepthwiseGemm
    from ir.onnx.fused import FusedGemm
    from ir.onnx.kernels import KernelFamily
    from ir.onnx.quant import QuantisedAdd

Arrays = Sequence[np.ndarray]


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """A graph input or output: its name, static shape and numpy dtype name."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True, slots=True, eq=False)
class Layer:
    """One layer of an imported model.

    Fields: ``name`` (the ONNX node's name), ``op`` (its op type, or the fused pattern such
    as ``"QDQ Conv"``), ``inputs``/``output`` (tensor names of the model), ``input_shapes``,
    ``output_shape`` and ``output_dtype``, ``macs`` (multiply-accumulates of the layer's
    arithmetic, 0 for data movement), ``detail`` (window and stride, for a reader), and
    either ``func`` with ``pack``/``unpack`` or ``host``. ``epilogue`` says what ``pack``
    and ``unpack`` compute on the host beyond layout (None: nothing); ``fallback`` marks a node run by
    onnxruntime because the importer has no function for its operator. ``variants`` are
    the same layer computed another way (an integer layer's kernel with uint8 activations,
    for intrinsics that take those), which a target tries when ``func`` does not tensorize.
    ``fused`` is the layer as one GEMM with its epilogue (bias and requantisation) in the
    kernel (:class:`ir.onnx.fused.FusedGemm`; a depthwise layer's, grouped GEMMs of diagonal
    tiles: :class:`ir.onnx.depthwise.DepthwiseGemm`), for a target that can run the
    epilogue where the sum is (a device's vector unit). ``qadd`` holds an add of two
    quantised activations' parameters, for a target that joins it onto the layer producing
    one of them. ``vector`` gives a host layer as a kernel of elementwise blocks alone, for
    a device that runs those on its vector unit: ``vector(layer, tile)`` with the device's
    GEMM tile ``(rows, depth, columns)`` (:mod:`ir.onnx.vector_layers`). ``channels_last``
    is a host layer's form on its int8 input held ``(n, h, w, c)``, giving its output so,
    where the layer treats every channel alike and int8 values in order (a max pool:
    :class:`ir.onnx.channels_last.MaxPoolNhwc`): for a caller that keeps activations
    channels last between layers. ``family`` is a fused form's kernel apart from its
    quantisation constants (:class:`ir.onnx.kernels.KernelFamily`), for a device that
    compiles one kernel of a family and retargets it to the others.
    """

    name: str
    op: str
    inputs: tuple[str, ...]
    output: str
    input_shapes: tuple[tuple[int, ...], ...]
    output_shape: tuple[int, ...]
    output_dtype: str
    macs: int = 0
    detail: str = ""
    func: PrimFunc | None = None
    pack: Callable[[Arrays], dict[str, np.ndarray]] | None = None
    unpack: Callable[[np.ndarray, Arrays], np.ndarray] | None = None
    host: Callable[[Arrays], np.ndarray] | None = None
    epilogue: str | None = None
    fallback: bool = False
    variants: tuple[Layer, ...] = ()
    fused: FusedGemm | DepthwiseGemm | None = None
    qadd: QuantisedAdd | None = None
    vector: Callable[[Layer, tuple[int, int, int]], Layer] | None = None
    channels_last: MaxPoolNhwc | None = None
    family: KernelFamily | None = None

    @property
    def shape_text(self) -> str:
        """``"1x64x56x56 -> 1x64x56x56, 3x3 s1"``: input shapes, output shape, detail."""
        ins = ", ".join("x".join(map(str, s)) for s in self.input_shapes)
        text = f"{ins} -> {'x'.join(map(str, self.output_shape))}"
        return f"{text}, {self.detail}" if self.detail else text


@dataclass(frozen=True, slots=True, eq=False)
class Graph:
    """An imported model: its file, inputs and outputs, and its layers in execution order.

    ``model`` is the ONNX model as read (the reference runs it in onnxruntime);
    ``constants`` the initializers, which no layer lists as inputs.
    """

    path: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    layers: tuple[Layer, ...]
    model: object
    constants: Mapping[str, np.ndarray]

    @property
    def macs(self) -> int:
        """Multiply-accumulates of all layers."""
        return sum(layer.macs for layer in self.layers)
