"""The importer's function per plain operator: Conv, MatMul, Gemm, their integer forms
(QLinearConv, ConvInteger, QLinearMatMul, MatMulInteger), QuantizeLinear, DequantizeLinear,
the host operators, Split, and the onnxruntime fallback for any other (and for arithmetic
on constants alone).

:class:`OperatorLayers` is mixed into the importer (:mod:`ir.onnx.importer`), whose state
(the read model, the shapes and dtypes known so far, the dequantised constants) and shared
helpers (``_shape``, ``_qparams``, ``_operands``) its handlers use. :data:`HANDLERS` maps
an op type to its handler; :data:`SEVERAL` an op type whose node has several outputs to
the handler making one layer per output in use (Split). A fallback node gets a layer per
output in use too; where onnx's inference of the whole model left an output's shape unknown,
:mod:`ir.onnx.inference` finds it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ir.onnx import host_ops, inference, linear
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

    def _layers(self, node: NodeView) -> tuple[Layer, ...]:
        """The node's layers: one, or one per output in use for a node with several
        (:meth:`_split`, and the fallback)."""
        where = self.read.where(node)
        onnx_domain = node.domain in ("", "ai.onnx")
        several = SEVERAL.get(node.op) if onnx_domain else None
        if several is not None:
            return several(self, node, where)
        handler = HANDLERS.get(node.op) if onnx_domain else None
        if handler is not None:
            return (handler(self, node, where),)
        if not self.fallback:
            raise UnsupportedOperatorError(self.read.path, node.name, node.op)
        return self._fallback(node)

    def _outputs_in_use(self, node: NodeView) -> list[int]:
        """Indices of the node's outputs that a later node or the graph reads (the first
        output where none is: the node still gets its layer, checked like any other)."""
        used = [i for i, name in enumerate(node.outputs)
                if name and (name in self.read.consumers or name in self.read.outputs)]
        return used or [0]

    @staticmethod
    def _layer_name(node: NodeView, used: Sequence[int], index: int) -> str:
        """The name of the layer of output ``index``: the node's, or, where an output
        other than the first is in ``used``, ``name:index``."""
        return node.name if list(used) == [0] else f"{node.name}:{index}"

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
        bias = self._bias(node, where)
        x = node.inputs[0]
        dtype = self._require_float(node, x)
        return linear.float_conv(node.name, x, self._shape(x, node), weights, bias,
                                 node.attrs, node.outputs[0], where, dtype)

    def _matmul(self, node: NodeView, where: str) -> Layer:
        a, b = node.inputs[0], node.inputs[1]
        dtype = self._require_float(node, a)
        weights = self._float_input(node, b)
        bias = None
        if node.op == "Gemm":
            self._check_gemm(node)
            if weights is None:
                raise OnnxImportError(f"{where} requires constant weights B, got computed ones")
            if node.attrs.get("transB", 0):
                weights = weights.T
            bias = self._bias(node, where)
        if weights is not None:
            return linear.float_matmul(node.name, node.op, a, self._shape(a, node), None,
                                       weights.shape, weights, bias, node.outputs[0], where,
                                       dtype)
        return linear.float_matmul(node.name, node.op, a, self._shape(a, node), b,
                                   self._shape(b, node), None, None, node.outputs[0], where,
                                   dtype)

    def _bias(self, node: NodeView, where: str) -> np.ndarray | None:
        """A Conv's or Gemm's optional third input, the bias, as float; a computed one is
        refused (the layer adds its bias as a constant)."""
        if len(node.inputs) <= 2 or not node.inputs[2]:
            return None
        bias = self._float_input(node, node.inputs[2])
        if bias is None:
            raise OnnxImportError(f"{where} requires a constant bias, got computed "
                                  f"{node.inputs[2]!r}")
        return bias

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
        wq = QParams(self._weight_scale(node, 4, weights.shape[0], "output channel"),
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
        columns = self._shape(b, node)[-1] if b not in self.read.constants \
            else self.read.constants[b].shape[-1]
        bq = QParams(self._weight_scale(node, 4, columns, "column of b"),
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

    def _weight_scale(self, node: NodeView, index: int, count: int, per: str) -> np.ndarray:
        """The constant weight scale at input ``index``: one element, or one per ``per``
        (``count`` of them), as onnxruntime's QLinearConv and QLinearMatMul take it."""
        name = node.inputs[index]
        scale = self._constant(node, name, "weight scale")
        if scale.size != 1 and (scale.ndim != 1 or scale.size != count):
            raise OnnxImportError(f"{self.read.where(node)} requires a weight scale of one "
                                  f"element or one per {per} ({count}), got {name!r} of "
                                  f"shape {scale.shape}")
        return scale

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
        if not activations:
            # Arithmetic on constants alone, which the exporter did not fold.
            return self._fallback(node)[0]
        fn, shape = self._host_function(node, activations)
        dtype = self.dtypes.get(activations[0], "float32")
        if node.op in ("AveragePool", "GlobalAveragePool", "Softmax"):
            if dtype == "float16":
                # onnxruntime has no float16 kernel for these either: float32, rounded once.
                fn = host_ops.rounded(fn, np.float16)
            else:
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
        if op in ("Add", "Mul"):
            return self._binary(node, names, shape)
        if op == "HardSigmoid":
            return host_ops.hard_sigmoid(attrs.get("alpha", 0.2), attrs.get("beta", 0.5)), shape
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

    def _binary(self, node: NodeView, names: list[str], shape: tuple[int, ...]
                ) -> tuple[host_ops.HostFn, tuple[int, ...]]:
        """An Add or Mul of two activations, or of one and a constant on either side
        (both commute exactly), broadcast; and its output shape."""
        two = host_ops.add() if node.op == "Add" else host_ops.multiply()
        if len(names) > 1:
            return two, tuple(np.broadcast_shapes(shape, self._shape(names[1], node)))
        _, constants = self._operands(node)
        constant = self._float_input(node, constants[0])
        if constant is None:
            raise OnnxImportError(f"{self.read.where(node)} requires two inputs, got one")
        out = tuple(np.broadcast_shapes(shape, constant.shape))
        return (lambda xs: two([xs[0], constant.astype(xs[0].dtype)])), out

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

    def _split(self, node: NodeView, where: str) -> tuple[Layer, ...]:
        """Split: one host layer per output in use, each a slice of the input along
        ``axis`` (sizes from the ``split`` input or attribute, or ``num_outputs``, or equal
        parts)."""
        x = node.inputs[0]
        shape = self._shape(x, node)
        rank = len(shape)
        axis = int(node.attrs.get("axis", 0))
        if not -rank <= axis < rank:
            raise OnnxImportError(f"{where} requires an axis within its {rank}-D input "
                                  f"({-rank} to {rank - 1}), got axis {axis}")
        axis %= rank
        sizes = self._split_sizes(node, shape[axis], where)
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        dtype = self.dtypes.get(x, "float32")
        used = self._outputs_in_use(node)
        layers = []
        for index in used:
            part = shape[:axis] + (sizes[index],) + shape[axis + 1:]
            window = (slice(None),) * axis + (slice(starts[index],
                                                    starts[index] + sizes[index]),)
            name = self._layer_name(node, used, index)
            layers.append(Layer(name, "Split", (x,), node.outputs[index], (shape,), part,
                                dtype, 0, f"axis {axis} [{starts[index]}:"
                                f"{starts[index] + sizes[index]}]",
                                host=host_ops.window(window)))
        return tuple(layers)

    def _split_sizes(self, node: NodeView, extent: int, where: str) -> list[int]:
        """The sizes of a Split's parts along its axis of ``extent``, checked."""
        count = len(node.outputs)
        name = node.inputs[1] if len(node.inputs) > 1 else ""
        if name:
            sizes = [int(v) for v in self._constant(node, name, "split sizes").reshape(-1)]
        elif "split" in node.attrs:
            sizes = [int(v) for v in node.attrs["split"]]
        elif "num_outputs" in node.attrs:
            parts = int(node.attrs["num_outputs"])
            if parts != count or parts <= 0:
                raise OnnxImportError(f"{where} requires num_outputs equal to its {count} "
                                      f"outputs, got {parts}")
            # Opset 18: parts of ceil(extent / n), the last one smaller.
            chunk = -(-extent // parts)
            sizes = [chunk] * (parts - 1) + [extent - chunk * (parts - 1)]
        else:
            if extent % count:
                raise OnnxImportError(f"{where} requires its axis ({extent}) to divide into "
                                      f"{count} equal parts, got a remainder of "
                                      f"{extent % count}")
            sizes = [extent // count] * count
        if len(sizes) != count or min(sizes) <= 0 or sum(sizes) != extent:
            raise OnnxImportError(f"{where} requires {count} positive sizes (one per output) "
                                  f"adding up to its axis ({extent}), got {sizes}")
        return sizes

    def _fallback(self, node: NodeView) -> tuple[Layer, ...]:
        from ir.onnx.fallback import ort_node

        where = self.read.where(node)
        used = self._outputs_in_use(node)
        outputs = [node.outputs[i] for i in used]
        types = self._fallback_types(node, outputs)
        constants = {t: self._float_input(node, t) for t in node.inputs
                     if t in self.read.constants or t in self.qconst}
        activations = [t for t in node.inputs if t and t not in constants]
        functions = ort_node(node, activations, constants, self.read.model, outputs, where)
        layers = []
        for index, out, fn in zip(used, outputs, functions):
            shape, dtype = types[out]
            name = self._layer_name(node, used, index)
            layers.append(Layer(name, node.op, tuple(activations), out,
                                tuple(self._shape(i, node) for i in activations), shape,
                                dtype, 0, "", host=fn, fallback=True,
                                epilogue="run by onnxruntime (no importer function for "
                                         "this operator)"))
        return tuple(layers)

    def _fallback_types(self, node: NodeView, outputs: Sequence[str]
                        ) -> dict[str, tuple[tuple[int, ...], str]]:
        """The static shape and dtype of each of ``outputs``: from onnx's inference of the
        whole model, else of the node alone on the types known now, else by the rule of a
        contrib operator (:mod:`ir.onnx.inference`)."""
        types = {o: (self.shapes[o], self.dtypes[o]) for o in outputs
                 if o in self.shapes and o in self.dtypes}
        if len(types) == len(outputs):
            return types
        where = self.read.where(node)
        found = inference.infer_onnx(node, self._type_of, self.read.constants,
                                     self.read.opsets)
        if node.outputs[0] in outputs and node.outputs[0] not in found:
            first = inference.contrib_output(node, self._type_of, where)
            if first is not None:
                found[node.outputs[0]] = first
        found.update(types)
        missing = [o for o in outputs if o not in found]
        if missing:
            raise OnnxImportError(f"{where} requires a static shape for its output "
                                  f"{missing[0]!r} to run on the host, got none (onnx's shape "
                                  "inference does not know it, and neither does the "
                                  "importer); export with static shapes")
        return {o: found[o] for o in outputs}

    def _type_of(self, tensor: str) -> tuple[tuple[int, ...], str] | None:
        """A tensor's (shape, dtype), where known: a constant's, or one inferred or
        computed."""
        value = self.read.constants.get(tensor)
        if value is not None:
            return tuple(value.shape), value.dtype.name
        if tensor in self.shapes and tensor in self.dtypes:
            return self.shapes[tensor], self.dtypes[tensor]
        return None


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
    **{op: OperatorLayers._host_op for op in ("Relu", "Clip", "Add", "Mul", "HardSigmoid",
                                         "MaxPool", "AveragePool", "GlobalAveragePool",
                                         "Reshape", "Flatten", "Transpose", "Softmax")},
}

# Operators whose node becomes several layers, one per output in use.
SEVERAL: dict[str, Callable[[OperatorLayers, NodeView, str], tuple[Layer, ...]]] = {
    "Split": OperatorLayers._split,
}
