"""From a read model to a graph of layers: the QDQ patterns found here, every other node
through its operator's function (:mod:`ir.onnx.operators`).

A QDQ model (what onnxruntime's static quantization emits) holds float operators between
DequantizeLinear and QuantizeLinear nodes. The importer works in the integer domain: a
QuantizeLinear whose output only feeds DequantizeLinear nodes makes an integer tensor, and a
supported operator whose activation inputs are all dequantised integer tensors, whose
weights and bias are dequantised constants and whose one consumer is a QuantizeLinear,
becomes one integer layer (``"QDQ Conv"``) from integer tensors to the quantised output.
DequantizeLinear of a constant folds away; the other Q and DQ nodes become host layers.

Operators with no function run on the host through onnxruntime, one node at a time,
marked ``fallback`` (or are refused with :class:`UnsupportedOperatorError` when the caller
asks for ``fallback=False``); nothing is skipped.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ir.onnx import host_ops, linear, vector_layers
from ir.onnx.channels_last import MaxPoolNhwc
from ir.onnx.errors import OnnxImportError, printable
from ir.onnx.graph import Graph, Layer, TensorInfo
from ir.onnx.operators import OperatorLayers
from ir.onnx.quant import QParams, QuantisedAdd
from ir.onnx.reader import ModelFile, NodeView, read_model

# The float types of a Conv's, MatMul's or Gemm's input that become a kernel: onnxruntime
# runs float16 ones as float32 with the result rounded, and a layer does the same.
FLOAT_LAYER_DTYPES = ("float32", "float16")

# Operators the QDQ pattern recognises around them.
QDQ_OPS = frozenset({"Conv", "MatMul", "Gemm", "Add", "Relu", "Clip", "MaxPool", "AveragePool",
                     "GlobalAveragePool", "Reshape", "Flatten", "Transpose", "Softmax"})


def import_model(path: str | os.PathLike, *, fallback: bool = True) -> Graph:
    """Import the ONNX model at ``path`` as a graph of layers.

    ``fallback``: run nodes of operators the importer does not support on the host through
    onnxruntime (the layer says so); when False, refuse them with
    :class:`UnsupportedOperatorError`, naming the node and its op type.
    """
    read = read_model(path)
    return _Importer(read, fallback).run()


class _Importer(OperatorLayers):
    def __init__(self, read: ModelFile, fallback: bool) -> None:
        self.read = read
        self.fallback = fallback
        self.shapes = dict(read.shapes)
        self.dtypes = dict(read.dtypes)
        self.layers: list[Layer] = []
        # DequantizeLinear of a constant: its integer values and parameters.
        self.qconst: dict[str, tuple[np.ndarray, QParams]] = {}
        # DequantizeLinear of an activation: the integer tensor and its parameters.
        self.dq_source: dict[str, tuple[str, QParams]] = {}

    def run(self) -> Graph:
        """The graph: the QDQ patterns found first, then one layer per remaining node."""
        read = self.read
        for node in read.nodes:
            if _is(node, "DequantizeLinear"):
                self._note_dequantize(node)
            elif _is(node, "QuantizeLinear"):
                self._qparams(node, node.inputs[1:3], node.attrs.get("axis", 1))  # checked
        qdq = {node.index for node in read.nodes if self._qdq_candidate(node)}
        absorbed: set[int] = set()
        for node in read.nodes:
            if node.index in qdq:
                absorbed.add(read.consumers[node.outputs[0]][0].index)
        for node in read.nodes:
            if node.index in absorbed or (_is(node, "DequantizeLinear")
                                          and node.outputs[0] in self.qconst):
                continue
            if _is(node, "DequantizeLinear") and not self._dq_needed(node, qdq):
                continue
            layers = (self._qdq_layer(node),) if node.index in qdq else self._layers(node)
            for layer in layers:
                self.layers.append(_shown(layer))
                self.shapes[layer.output] = layer.output_shape
                self.dtypes[layer.output] = layer.output_dtype
        return Graph(read.path, tuple(self._info(n) for n in read.inputs),
                     tuple(self._info(n) for n in read.outputs), tuple(self.layers),
                     read.model, read.constants)

    # -- the QDQ pattern -------------------------------------------------------------------

    def _note_dequantize(self, node: NodeView) -> None:
        source = node.inputs[0]
        params = self._qparams(node, node.inputs[1:3], node.attrs.get("axis", 1))
        if source in self.read.constants:
            self.qconst[node.outputs[0]] = (self.read.constants[source], params)
        else:
            self.dq_source[node.outputs[0]] = (source, params)

    def _qdq_candidate(self, node: NodeView) -> bool:
        if node.op not in QDQ_OPS or node.domain not in ("", "ai.onnx"):
            return False
        consumers = self.read.consumers.get(node.outputs[0], [])
        if len(consumers) != 1 or not _is(consumers[0], "QuantizeLinear") \
                or node.outputs[0] in self.read.outputs:
            return False
        if not self._constant_params(consumers[0]):
            return False
        activations, weights = self._operands(node)
        if not activations or any(self._activation(t) is None for t in activations):
            return False
        if node.op in ("Conv", "Gemm") or (node.op == "MatMul" and weights):
            return node.inputs[0] == activations[0] and all(t in self.qconst for t in weights)
        return all(t in self.read.constants or t in self.qconst for t in weights)

    def _activation(self, tensor: str) -> tuple[str, QParams] | None:
        source = self.dq_source.get(tensor)
        if source is None or source[1].scale.size != 1:
            return None
        return source

    def _constant_params(self, node: NodeView) -> bool:
        return all(t in self.read.constants for t in node.inputs[1:3] if t)

    def _dq_needed(self, node: NodeView, qdq: set[int]) -> bool:
        users = self.read.consumers.get(node.outputs[0], [])
        return node.outputs[0] in self.read.outputs or any(u.index not in qdq for u in users)

    def _qparams(self, node: NodeView, names: Sequence[str], axis: int) -> QParams:
        """The scale and zero point named ``names`` of ``node``'s quantised tensor, checked
        as ONNX states them (:meth:`_check_qparams`)."""
        constants = self.read.constants
        if not names or names[0] not in constants or (len(names) > 1 and names[1]
                                                      and names[1] not in constants):
            raise OnnxImportError(f"{self.read.where(node)} requires a constant scale and "
                                  "zero point, got a computed one")
        scale = constants[names[0]]
        given = constants[names[1]] if len(names) > 1 and names[1] else None
        self._check_qparams(node, names, scale, given, int(axis))
        zp = given if given is not None else np.zeros((), self._default_zero_dtype(node))
        if zp.size > 1 and np.any(zp != zp.reshape(-1)[0]):
            raise OnnxImportError(f"{self.read.where(node)} requires one zero point for the "
                                  f"whole tensor, got {zp.size} different ones")
        return QParams(scale, zp.reshape(-1)[:1].reshape(()), int(axis))

    def _check_qparams(self, node: NodeView, names: Sequence[str], scale: np.ndarray,
                       zero_point: np.ndarray | None, axis: int) -> None:
        """ONNX's rules, which onnxruntime enforces when it runs the model: a scale of one
        element (per tensor), or, for QuantizeLinear and DequantizeLinear, 1-D with one
        element per index of ``axis`` of the quantised tensor (per axis); a zero point of
        the scale's shape, int8 or uint8 (for a dequantised constant, which is folded on the
        host: the constant's type, int32 for a bias)."""
        where = self.read.where(node)
        per_axis = _is(node, "QuantizeLinear") or _is(node, "DequantizeLinear")
        block = node.attrs.get("block_size", 0) if per_axis else 0
        if block:
            raise OnnxImportError(f"{where} requires per-tensor or per-axis quantisation, "
                                  f"got blocked quantisation (block_size {block})")
        if scale.size != 1 and (scale.ndim != 1 or not per_axis):
            wanted = "a scalar or a 1-D" if per_axis else "a one-element"
            raise OnnxImportError(f"{where} requires {wanted} scale, got {names[0]!r} of "
                                  f"shape {scale.shape}")
        shape = self._quantised_shape(node) if per_axis else None
        if scale.size != 1 and shape is not None:
            if not -len(shape) <= axis < len(shape):
                raise OnnxImportError(f"{where} requires an axis within its "
                                      f"{len(shape)}-D input ({-len(shape)} to "
                                      f"{len(shape) - 1}), got axis {axis}")
            if scale.size != shape[axis]:
                raise OnnxImportError(f"{where} requires one scale per index of axis {axis} "
                                      f"({shape[axis]} for input shape {shape}), got "
                                      f"{scale.size} in {names[0]!r}")
        if zero_point is None:
            return
        if zero_point.size != scale.size or zero_point.ndim > 1:
            raise OnnxImportError(f"{where} requires its zero point {names[1]!r} of the "
                                  f"scale's shape {scale.shape}, got shape {zero_point.shape}")
        allowed: tuple[str, ...] = ("int8", "uint8")
        constant = self.read.constants.get(node.inputs[0])
        if _is(node, "DequantizeLinear") and constant is not None:
            allowed = (constant.dtype.name,)  # folded on the host, whatever its type
        if zero_point.dtype.name not in allowed:
            raise OnnxImportError(f"{where} requires a zero point of {' or '.join(allowed)}, "
                                  f"got {names[1]!r} of {zero_point.dtype.name}")

    def _default_zero_dtype(self, node: NodeView) -> np.dtype:
        """The integer type of a quantised tensor without a zero point: a
        DequantizeLinear's input's; for a QuantizeLinear, uint8 or, from opset 21 on, its
        ``output_dtype``."""
        if _is(node, "DequantizeLinear"):
            tensor = node.inputs[0]
            constant = self.read.constants.get(tensor)
            dtype = constant.dtype.name if constant is not None else self.dtypes.get(tensor)
            return np.dtype(dtype if dtype in ("int8", "uint8", "int32") else "uint8")
        code = node.attrs.get("output_dtype", 0) if _is(node, "QuantizeLinear") else 0
        if not code:
            return np.dtype(np.uint8)
        from onnx import helper

        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(code))
        if dtype.name not in ("int8", "uint8"):
            raise OnnxImportError(f"{self.read.where(node)} requires an output_dtype of int8 "
                                  f"or uint8, got {dtype.name}")
        return dtype

    def _quantised_shape(self, node: NodeView) -> tuple[int, ...] | None:
        """The shape of the tensor a QuantizeLinear or DequantizeLinear reads, if known."""
        tensor = node.inputs[0]
        if tensor in self.read.constants:
            return tuple(self.read.constants[tensor].shape)
        return self.shapes.get(tensor)

    def _qdq_layer(self, node: NodeView) -> Layer:
        quantize = self.read.consumers[node.outputs[0]][0]
        out = quantize.outputs[0]
        yq = self._qparams(quantize, quantize.inputs[1:3], quantize.attrs.get("axis", 1))
        where = self.read.where(node)
        activations, _ = self._operands(node)
        sources = [self._activation(t) for t in activations]
        names = [s[0] for s in sources]
        params = [s[1] for s in sources]
        op = f"QDQ {node.op}"
        if node.op == "Conv":
            w, wq = self.qconst[node.inputs[1]]
            bias = self._qdq_bias(node, 2)
            return linear.integer_conv(node.name, op, names[0], self._shape(names[0], node),
                                       params[0], w, wq, bias, yq, node.attrs, out, where)
        if node.op in ("MatMul", "Gemm"):
            return self._qdq_matmul(node, op, names, params, yq, out, where)
        if node.op == "GlobalAveragePool":
            fn = host_ops.qlinear_global_average_pool(params[0], yq)
            shape = self._shape(names[0], node)
            layer = self._host(node, op, names, shape[:2] + (1,) * (len(shape) - 2),
                               str(yq.dtype), fn, "fused as onnxruntime fuses it "
                               "(QLinearGlobalAveragePool: integer sum, requantised)", out)
            return replace(layer, fused=linear.global_average_pool(shape, params[0], yq))
        if node.op == "Add":
            return self._qdq_add(node, op, names, params, yq, out)
        if node.op == "Softmax":
            shape = self._shape(names[0], node)
            axis = int(node.attrs.get("axis", -1 if self.read.opset >= 13 else 1))
            fn = host_ops.qlinear_softmax(params[0], yq, axis, self.read.opset)
            return self._host(node, op, names, shape, str(yq.dtype), fn,
                              "fused as onnxruntime fuses it (QLinearSoftmax: exp table, "
                              "float32 sum)", out)
        fn, shape = self._host_function(node, names)
        layer = self._host(node, op, names, shape, str(yq.dtype), host_ops.qdq(fn, params, yq),
                           "dequantise, float32 operator, quantise (onnxruntime's unfused "
                           "path)", out)
        if node.op in ("Reshape", "Flatten", "Transpose") and _alike(params[0], yq):
            # Quantised alike, moving elements moves the integers as they are.
            return replace(layer, host=fn, epilogue=f"a {node.op}: the same integers moved, "
                           "no arithmetic for a device to do")
        if node.op == "MaxPool" and _alike(params[0], yq):
            # Quantised alike, the pool only picks elements: the integers' own max, with
            # no float32 round trip (the dequantised max quantises back to it exactly).
            kernel, strides, pads = host_ops.pool_attributes(where, node.attrs)
            return replace(layer, host=host_ops.max_pool(kernel, strides, pads),
                           epilogue="no compute intrinsic pools; the integers' max (input "
                                    "and output quantised alike)",
                           vector=functools.partial(vector_layers.max_pool, kernel, strides,
                                                    pads),
                           channels_last=MaxPoolNhwc(kernel, strides, pads))
        return layer

    def _qdq_add(self, node: NodeView, op: str, names: list[str], params: list[QParams],
                 yq: QParams, out: str) -> Layer:
        """QDQ Add as onnxruntime's QLinearAdd, its operands in the node's order: two
        activations, or one and a dequantised constant (a bias)."""
        operands = []
        for tensor in node.inputs[:2]:
            if tensor in self.qconst:
                operands.append(self.qconst[tensor])
            else:
                operands.append((None, self.dq_source[tensor][1]))
        if any(q.scale.size != 1 for _, q in operands):
            fn, shape = self._host_function(node, names)
            return self._host(node, op, names, shape, str(yq.dtype),
                              host_ops.qdq(fn, params, yq), "dequantise, float32 add, "
                              "quantise (a per-channel constant operand)", out)
        add = host_ops.qlinear_add(operands[0][1], operands[1][1], yq)
        constants = [values for values, _ in operands]

        def run(xs: Sequence[np.ndarray]) -> np.ndarray:
            given = iter(xs)
            return add([c if c is not None else next(given) for c in constants])

        shapes = [self._shape(n, node) if c is None else c.shape
                  for n, c in zip(node.inputs[:2], constants)]
        layer = self._host(node, op, names, tuple(np.broadcast_shapes(*shapes)),
                           str(yq.dtype), run, "fused as onnxruntime fuses it (QLinearAdd: "
                           "float32 scale ratios on the integers)", out)
        if any(c is not None for c in constants):
            return layer
        return replace(layer, qadd=QuantisedAdd(operands[0][1], operands[1][1], yq),
                       vector=vector_layers.quantised_add)

    def _qdq_bias(self, node: NodeView, index: int) -> np.ndarray | None:
        if len(node.inputs) <= index or not node.inputs[index]:
            return None
        values, params = self.qconst[node.inputs[index]]
        if values.dtype != np.int32 or np.any(params.zero_point):
            raise OnnxImportError(f"{self.read.where(node)} requires an int32 bias with zero "
                                  f"point 0 (what quantize_static emits), got {values.dtype}")
        return values

    def _qdq_matmul(self, node: NodeView, op: str, names: list[str], params: list[QParams],
                    yq: QParams, out: str, where: str) -> Layer:
        a_shape = self._shape(names[0], node)
        if len(names) == 2:
            return linear.integer_matmul(node.name, op, names[0], a_shape, params[0],
                                         names[1], self._shape(names[1], node), None,
                                         params[1], None, yq, out, where)
        w, wq = self.qconst[node.inputs[1]]
        bias = None
        if node.op == "Gemm":
            self._check_gemm(node)
            if node.attrs.get("transB", 0):
                w = w.T
                wq = QParams(wq.scale, wq.zero_point, 1)
            bias = self._qdq_bias(node, 2)
        elif wq.scale.size > 1 and wq.axis not in (1, -1):
            raise OnnxImportError(f"{where} requires weights quantised per output column "
                                  f"(axis 1), got axis {wq.axis}")
        return linear.integer_matmul(node.name, op, names[0], a_shape, params[0], None,
                                     w.shape, w, wq, bias, yq, out, where)

    def _operands(self, node: NodeView) -> tuple[list[str], list[str]]:
        """(activation inputs, weight and parameter inputs) of a node: a Conv's or Gemm's
        first input is its activation; MatMul, Add and Mul take constants (plain or
        dequantised) on either side."""
        inputs = [t for t in node.inputs if t]
        if node.op in ("Conv", "Gemm", "Reshape", "Clip"):
            return inputs[:1], inputs[1:]
        if node.op in ("MatMul", "Add", "Mul"):
            constant = [t for t in inputs if t in self.qconst or t in self.read.constants]
            return [t for t in inputs if t not in constant], constant
        return inputs, []

    # -- shapes -----------------------------------------------------------------------------

    def _shape(self, tensor: str, node: NodeView) -> tuple[int, ...]:
        shape = self.shapes.get(tensor)
        if shape is None:
            raise OnnxImportError(f"{self.read.where(node)} requires a static shape for its "
                                  f"input {tensor!r}, got none")
        return shape

    def _require_float(self, node: NodeView, tensor: str) -> str:
        """The dtype of ``tensor``, a float input of a Conv, MatMul or Gemm: one of
        :data:`FLOAT_LAYER_DTYPES`, whose kernels sum in float32 (:mod:`ir.onnx.kernels`)."""
        dtype = self.dtypes.get(tensor, "float32")
        if dtype not in FLOAT_LAYER_DTYPES:
            raise OnnxImportError(f"{self.read.where(node)} requires a "
                                  f"{' or '.join(FLOAT_LAYER_DTYPES)} input, got {tensor!r} "
                                  f"of {dtype}")
        return dtype

    def _info(self, name: str) -> TensorInfo:
        if name not in self.shapes:
            raise OnnxImportError(f"{self.read.path}: graph tensor {name!r} requires a static "
                                  "shape, got none")
        return TensorInfo(name, self.shapes[name], self.dtypes.get(name, "float32"))


def _shown(layer: Layer) -> Layer:
    """``layer`` with its name and op printable (:func:`ir.onnx.errors.printable`): they
    go to a terminal in progress lines and tables, and a model may hold any characters."""
    name, op = printable(layer.name), printable(layer.op)
    if name == layer.name and op == layer.op:
        return layer
    return replace(layer, name=name, op=op,
                   variants=tuple(_shown(v) for v in layer.variants))


def _is(node: NodeView, op: str) -> bool:
    return node.op == op and node.domain in ("", "ai.onnx")


def _alike(a: QParams, b: QParams) -> bool:
    """Whether two int8 tensors are quantised alike (one scale, one zero point each, equal):
    then an operator that only picks elements, such as a max, is the integers' own."""
    return (a.dtype == b.dtype == np.dtype(np.int8) and a.scale.size == b.scale.size == 1
            and a.scale.reshape(()) == b.scale.reshape(())
            and a.scalar_zero_point() == b.scalar_zero_point())
