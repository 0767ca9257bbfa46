"""The importer's function per plain operator: Conv, MatMul, Gemm, their integer forms
(QLinearConv, ConvInteger, QLinearMatMul, MatMulInteger), QuantizeLinear, DequantizeLinear,
the host operators, and the onnxruntime fallback for any other.

:class:`OperatorLayers` is mixed into the importer (:mod:`ir.onnx.importer`), whose state
(the read model, the shapes and dtypes known so far, the dequantised constants) and shared
helpers (``_shape``, ``_qparams``, ``_operands``) its handlers use. :data:`HANDLERS` maps
an op type to its handler.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ir.onnx import host_ops, linear
from ir.onnx.errors import OnnxImportError, UnsupportedOperatorError
from ir.onnx.graph import Layer
from ir.onnx.quant import QParams
from ir.onnx.reader import ModelFile, NodeView


class OperatorLayers:
    """The handlers, one per operator; each takes the node and its location text
    (``model.onnx: node 'conv1' (Conv)``) and returns the node's layer."""

    # What the importer holds (set in its __init__): the read model, whether unsupported
    # operators fall back to onnxruntime, dequantised constants and activations, and the
    # shapes and dtypes known so far.
    read: ModelFile
    fallback: bool
    qconst: dict[str, tuple[np.ndarray, QParams]]
    dq_source: dict[str, tuple[str, QParams]]
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]

    def _layer(self, node: NodeView) -> Layer:
        where = self.read.where(node)
        handler = HANDLERS.get(node.op) if node.domain in ("", "ai.onnx") else None
        if handler is not None:
            return handler(self, node, where)
        if not self.fallback:
            raise UnsupportedOperatorError(self.read.path, node.name, node.op)
        return self._fallback(node)

    def _float_input(self, node: NodeView, tensor: str) -> np.ndarray | None:
        """A constant input as float (a dequantised constant folded), or None."""
        if tensor in self.read.constants:
            return self.read.constants[tensor]
        if tensor in self.qconst:
            values, params = self.qconst[tensor]
            return host_ops.dequantize(params)([values])
        return None

    def _conv(self, node: NodeView, where: str) -> Layer:
        weights = self._float_input(node, node.inputs[1])
        if weights is None:
            raise OnnxImportError(f"{where} requires constant weights, got computed ones "
                                  f"({node.inputs[1]!r})")
        bias = self._float_input(node, node.inputs[2]) if len(node.inputs) > 2 \
            and node.inputs[2] else None
        x = node.inputs[0]
        self._require_float(node, x)
        return linear.float_conv(node.name, x, self._shape(x, node), weights, bias,
                                 node.attrs, node.outputs[0], where)

    def _matmul(self, node: NodeView, where: str) -> Layer:
        a, b = node.inputs[0], node.inputs[1]
        self._require_float(node, a)
        weights = self._float_input(node, b)
        bias = None
        if node.op == "Gemm":
            self._check_gemm(node)
            if weights is None:
                raise OnnxImportError(f"{where} requires constant weights B, got computed ones")
            if node.attrs.get("transB", 0):
                weights = weights.T
            bias = self._float_input(node, node.inputs[2]) if len(node.inputs) > 2 \
                and node.inputs[2] else None
        if weights is not None:
            return linear.float_matmul(node.name, node.op, a, self._shape(a, node), None,
                                       weights.shape, weights, bias, node.outputs[0], where)
        return linear.float_matmul(node.name, node.op, a, self._shape(a, node), b,
                                   self._shape(b, node), None, None, node.outputs[0], where)

    def _check_gemm(self, node: NodeView) -> None:
        attrs = node.attrs
        if attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 \
                or attrs.get("beta", 1.0) != 1.0:
            raise OnnxImportError(f"{self.read.where(node)} requires transA 0, alpha 1 and "
                                  f"beta 1, got transA {attrs.get('transA', 0)}, alpha "
                                  f"{attrs.get('alpha', 1.0)}, beta {attrs.get('beta', 1.0)}")

    def _qlinear_conv(self, node: NodeView, where: str) -> Layer:
        x, w_name = node.inputs[0], node.inputs[3]
        weights = self._constant(node, w_name, "weights")
        xq = self._qparams(node, node.inputs[1:3], 1)
        wq = QParams(self._constant(node, node.inputs[4], "w_scale"),
                     self._constant(node, node.inputs[5], "w_zero_point").reshape(-1)[:1]
                     .reshape(()), 0)
        self._check_weight_zero_points(node, node.inputs[5])
        yq = self._qparams(node, node.inputs[6:8], 1)
        bias = self._constant(node, node.inputs[8], "bias") if len(node.inputs) > 8 \
            and node.inputs[8] else None
        return linear.integer_conv(node.name, "QLinearConv", x, self._shape(x, node), xq,
                                   weights, wq, bias, yq, node.attrs, node.outputs[0], where)

    def _conv_integer(self, node: NodeView, where: str) -> Layer:
        x = node.inputs[0]
        weights = self._constant(node, node.inputs[1], "weights")
        xq = self._zero_point_params(node, 2, self.dtypes.get(x, "uint8"))
        wq = self._zero_point_params(node, 3, weights.dtype.name)
        self._check_weight_zero_points(node, node.inputs[3] if len(node.inputs) > 3 else "")
        return linear.integer_conv(node.name, "ConvInteger", x, self._shape(x, node), xq,
                                   weights, wq, None, None, node.attrs, node.outputs[0], where)

    def _qlinear_matmul(self, node: NodeView, where: str) -> Layer:
        a, b = node.inputs[0], node.inputs[3]
        aq = self._qparams(node, node.inputs[1:3], 1)
        bq = QParams(self._constant(node, node.inputs[4], "b_scale"),
                     self._constant(node, node.inputs[5], "b_zero_point").reshape(-1)[:1]
                     .reshape(()), 1)
        yq = self._qparams(node, node.inputs[6:8], 1)
        return self._integer_matmul(node, "QLinearMatMul", a, aq, b, bq, yq, where)

    def _matmul_integer(self, node: NodeView, where: str) -> Layer:
        a, b = node.inputs[0], node.inputs[1]
        aq = self._zero_point_params(node, 2, self.dtypes.get(a, "uint8"))
        b_type = self.read.constants[b].dtype.name if b in self.read.constants \
            else self.dtypes.get(b, "int8")
        bq = self._zero_point_params(node, 3, b_type)
        return self._integer_matmul(node, "MatMulInteger", a, aq, b, bq, None, where)

    def _integer_matmul(self, node: NodeView, op: str, a: str, aq: QParams, b: str,
                        bq: QParams, yq: QParams | None, where: str) -> Layer:
        a_shape = self._shape(a, node)
        if b in self.read.constants:
            w = self.read.constants[b]
            return linear.integer_matmul(node.name, op, a, a_shape, aq, None, w.shape, w, bq,
                                         None, yq, node.outputs[0], where)
        return linear.integer_matmul(node.name, op, a, a_shape, aq, b, self._shape(b, node),
                                     None, bq, None, yq, node.outputs[0], where)

    def _zero_point_params(self, node: NodeView, index: int, dtype: str) -> QParams:
        if len(node.inputs) > index and node.inputs[index]:
            zp = self._constant(node, node.inputs[index], "zero point")
        else:
            zp = np.zeros((), dtype)
        return QParams(np.ones((), np.float32), zp.reshape(-1)[:1].reshape(()), 1)

    def _check_weight_zero_points(self, node: NodeView, name: str) -> None:
        if not name:
            return
        zp = self.read.constants.get(name)
        if zp is not None and zp.size > 1 and np.any(zp != zp.reshape(-1)[0]):
            raise OnnxImportError(f"{self.read.where(node)} requires one weight zero point, "
                                  f"got {zp.size} different ones")

    def _constant(self, node: NodeView, name: str, what: str) -> np.ndarray:
        value = self.read.constants.get(name)
        if value is None:
            raise OnnxImportError(f"{self.read.where(node)} requires constant {what}, got "
                                  f"computed {name!r}")
        return value

    def _quantize(self, node: NodeView, where: str) -> Layer:
        q = self._qparams(node, node.inputs[1:3], node.attrs.get("axis", 1))
        x = node.inputs[0]
        return self._host(node, "QuantizeLinear", [x], self._shape(x, node), str(q.dtype),
                          host_ops.quantize(q))

    def _dequantize(self, node: NodeView, where: str) -> Layer:
        x, q = self.dq_source[node.outputs[0]]
        return self._host(node, "DequantizeLinear", [x], self._shape(x, node), "float32",
                          host_ops.dequantize(q))

    def _host_op(self, node: NodeView, where: str) -> Layer:
        activations, _ = self._operands(node)
        fn, shape = self._host_function(node, activations)
        dtype = self.dtypes.get(activations[0], "float32")
        if node.op in ("AveragePool", "GlobalAveragePool", "Softmax"):
            dtype = "float32"
        return self._host(node, node.op, activations, shape, dtype, fn)

    def _host_function(self, node: NodeView, names: list[str]
                       ) -> tuple[host_ops.HostFn, tuple[int, ...]]:
        """The float host function of an elementwise, pool or shape node, and its output
        shape, given its activation inputs ``names``."""
        where = self.read.where(node)
        shape = self._shape(names[0], node)
        op, attrs = node.op, node.attrs
        if op == "Relu":
            return host_ops.relu(), shape
        if op == "Clip":
            return host_ops.clip(*self._clip_bounds(node)), shape
        if op == "Add":
            if len(names) > 1:
                return host_ops.add(), tuple(np.broadcast_shapes(shape, self._shape(names[1],
                                                                                    node)))
            _, constants = self._operands(node)
            constant = self._float_input(node, constants[0])
            if constant is None:
                raise OnnxImportError(f"{where} requires two inputs, got one")
            out = tuple(np.broadcast_shapes(shape, constant.shape))
            return (lambda xs: xs[0] + constant.astype(xs[0].dtype)), out
        if op in ("MaxPool", "AveragePool"):
            kernel, strides, pads = host_ops.pool_attributes(where, attrs)
            out = host_ops.pool_output_shape(shape, kernel, strides, pads)
            if op == "MaxPool":
                return host_ops.max_pool(kernel, strides, pads), out
            include = bool(attrs.get("count_include_pad", 0))
            return host_ops.average_pool(kernel, strides, pads, include), out
        if op == "GlobalAveragePool":
            return host_ops.global_average_pool(), shape[:2] + (1,) * (len(shape) - 2)
        if op in ("Reshape", "Flatten"):
            out = self._reshaped(node, shape)
            return host_ops.reshape(out), out
        if op == "Transpose":
            perm = tuple(attrs.get("perm", tuple(reversed(range(len(shape))))))
            return host_ops.transpose(perm), tuple(shape[p] for p in perm)
        if op == "Softmax":
            axis = int(attrs.get("axis", -1 if self.read.opset >= 13 else 1))
            if self.read.opset < 13 and axis != len(shape) - 1 and axis != -1:
                raise OnnxImportError(f"{where} requires Softmax over the last axis before "
                                      f"opset 13, got axis {axis}")
            return host_ops.softmax(axis), shape
        raise OnnxImportError(f"{where} requires an elementwise, pool or shape operator, got "
                              f"{op}")

    def _clip_bounds(self, node: NodeView) -> tuple[float | None, float | None]:
        if self.read.opset < 11:
            return node.attrs.get("min"), node.attrs.get("max")
        bounds: list[float | None] = []
        for index in (1, 2):
            name = node.inputs[index] if len(node.inputs) > index else ""
            if not name:
                bounds.append(None)
                continue
            bounds.append(float(self._constant(node, name, "clip bound")))
        return bounds[0], bounds[1]

    def _reshaped(self, node: NodeView, shape: tuple[int, ...]) -> tuple[int, ...]:
        where = self.read.where(node)
        if node.op == "Flatten":
            axis = int(node.attrs.get("axis", 1)) % (len(shape) + 1)
            return (math.prod(shape[:axis]), math.prod(shape[axis:]))
        target = [int(d) for d in self._constant(node, node.inputs[1], "shape").reshape(-1)]
        if not node.attrs.get("allowzero", 0):
            target = [shape[i] if d == 0 else d for i, d in enumerate(target)]
        if target.count(-1) > 1:
            raise OnnxImportError(f"{where} requires at most one -1 in the shape, got {target}")
        if -1 in target:
            known = math.prod(d for d in target if d != -1)
            target[target.index(-1)] = math.prod(shape) // max(known, 1)
        if math.prod(target) != math.prod(shape):
            raise OnnxImportError(f"{where} requires a shape of {math.prod(shape)} elements, "
                                  f"got {tuple(target)}")
        return tuple(target)

    def _host(self, node: NodeView, op: str, inputs: Sequence[str], shape: Sequence[int],
              dtype: str, fn: host_ops.HostFn, epilogue: str | None = None,
              output: str | None = None) -> Layer:
        return Layer(node.name, op, tuple(inputs), output or node.outputs[0],
                     tuple(self._shape(i, node) for i in inputs), tuple(int(d) for d in shape),
                     dtype, 0, "", host=fn, epilogue=epilogue)

    def _fallback(self, node: NodeView) -> Layer:
        from ir.onnx.fallback import ort_node

        used = [o for o in node.outputs[1:] if o and o in self.read.consumers]
        if used:
            raise OnnxImportError(f"{self.read.where(node)} requires only its first output to "
                                  f"be used (it runs on the host as one layer), got {used[0]!r} "
                                  "used too")
        out = node.outputs[0]
        if out not in self.shapes or out not in self.dtypes:
            raise OnnxImportError(f"{self.read.where(node)} requires a static output shape "
                                  "(from onnx shape inference) to run on the host, got none")
        constants = {t: self._float_input(node, t) for t in node.inputs
                     if t in self.read.constants or t in self.qconst}
        activations = [t for t in node.inputs if t and t not in constants]
        fn = ort_node(node, activations, constants, self.read.model)
        return Layer(node.name, node.op, tuple(activations), out,
                     tuple(self._shape(i, node) for i in activations), self.shapes[out],
                     self.dtypes[out], 0, "", host=fn, fallback=True,
                     epilogue="run by onnxruntime (no importer function for this operator)")


HANDLERS: dict[str, Callable[[OperatorLayers, NodeView, str], Layer]] = {
    "Conv": OperatorLayers._conv,
    "MatMul": OperatorLayers._matmul,
    "Gemm": OperatorLayers._matmul,
    "QLinearConv": OperatorLayers._qlinear_conv,
    "ConvInteger": OperatorLayers._conv_integer,
    "QLinearMatMul": OperatorLayers._qlinear_matmul,
    "MatMulInteger": OperatorLayers._matmul_integer,
    "QuantizeLinear": OperatorLayers._quantize,
    "DequantizeLinear": OperatorLayers._dequantize,
    **{op: OperatorLayers._host_op for op in ("Relu", "Clip", "Add", "MaxPool", "AveragePool",
                                         "GlobalAveragePool", "Reshape", "Flatten",
                                         "Transpose", "Softmax")},
}
