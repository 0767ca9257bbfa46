"""Output shapes and dtypes of the nodes run through the fallback that onnx's shape inference
of the whole model left unknown.

Two cases, both common in models other tools export:

- an operator of onnxruntime's contrib domain (``com.microsoft``), whose schemas onnx does
  not have: the QOperator format of onnxruntime's quantizer writes QLinearConcat,
  QLinearAdd, QLinearGlobalAveragePool and their kin. :data:`CONTRIB_RULES` holds one rule
  per operator, from the operator's documentation (onnxruntime's ContribOperators.md);
- an ONNX operator downstream of one of those: whole-model inference stops at the first
  tensor it cannot type, so everything after it is unknown too. Once the importer knows
  the node's input types, onnx infers the node on its own (:func:`infer_onnx`).

A rule returns ``(shape, dtype)`` of the node's first output, or None where an input's
shape is unknown; it raises :class:`OnnxImportError` where the inputs contradict the
operator (the message names the node).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from ir.onnx.errors import OnnxImportError
from ir.onnx.reader import NodeView

Shape = tuple[int, ...]
# The shape and numpy dtype name of a tensor of the model, or None where unknown.
Lookup = Callable[[str], "tuple[Shape, str] | None"]
Rule = Callable[[NodeView, Lookup, str], "tuple[Shape, str] | None"]


def infer_onnx(node: NodeView, lookup: Lookup, constants: Mapping[str, np.ndarray],
               opsets: Mapping[str, int]) -> dict[str, tuple[Shape, str]]:
    """The outputs of an ONNX-domain ``node`` whose types onnx infers from its inputs'
    (``lookup``) and constant inputs' values (a Reshape's shape); {} where it cannot."""
    from onnx import defs, helper, numpy_helper, shape_inference

    domain = "" if node.domain == "ai.onnx" else node.domain
    types, data = {}, {}
    for name in node.inputs:
        if not name:
            continue
        known = lookup(name)
        if known is None:
            return {}
        shape, dtype = known
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        types[name] = helper.make_tensor_type_proto(elem, list(shape))
        if name in constants:
            data[name] = numpy_helper.from_array(constants[name], name)
    try:
        schema = defs.get_schema(node.op, opsets.get(domain, 1), domain)
        inferred = shape_inference.infer_node_outputs(schema, node.proto, types, data)
    except Exception:  # noqa: BLE001  onnx raises several kinds; inference is a help only
        return {}
    found = {}
    for name, proto in inferred.items():
        tensor = proto.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tensor.shape.dim]
        if not tensor.elem_type or not tensor.HasField("shape") or min(dims, default=1) <= 0:
            continue
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type)).name
        found[name] = (tuple(int(d) for d in dims), dtype)
    return found


def _input(node: NodeView, index: int) -> str:
    return node.inputs[index] if len(node.inputs) > index else ""


def _same_as_x(node: NodeView, lookup: Lookup, where: str) -> tuple[Shape, str] | None:
    """QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax: the shape and dtype of X."""
    return lookup(node.inputs[0])


def _broadcast(node: NodeView, lookup: Lookup, where: str) -> tuple[Shape, str] | None:
    """QLinearAdd, QLinearMul (A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp):
    A and B broadcast, in A's dtype."""
    a, b = lookup(node.inputs[0]), lookup(_input(node, 3))
    if a is None or b is None:
        return None
    try:
        shape = tuple(int(d) for d in np.broadcast_shapes(a[0], b[0]))
    except ValueError:
        raise OnnxImportError(f"{where} requires inputs that broadcast, got {a[0]} and "
                              f"{b[0]}") from None
    return shape, a[1]


def _concat(node: NodeView, lookup: Lookup, where: str) -> tuple[Shape, str] | None:
    """QLinearConcat (Y_scale, Y_zp, then X, X_scale, X_zp per input; attribute axis):
    the inputs joined along ``axis``, in Y_zp's dtype."""
    parts = [lookup(name) for name in node.inputs[2::3]]
    output = lookup(_input(node, 1))
    if not parts or any(p is None for p in parts) or output is None:
        return None
    shapes = [p[0] for p in parts if p is not None]
    rank = len(shapes[0])
    if "axis" not in node.attrs:
        raise OnnxImportError(f"{where} requires the attribute axis, got none")
    axis = int(node.attrs["axis"])
    if not -rank <= axis < rank:
        raise OnnxImportError(f"{where} requires an axis within its {rank}-D inputs "
                              f"({-rank} to {rank - 1}), got axis {axis}")
    axis %= rank
    rest = [s[:axis] + s[axis + 1:] for s in shapes]
    if any(len(s) != rank or r != rest[0] for s, r in zip(shapes, rest)):
        raise OnnxImportError(f"{where} requires inputs of one shape but for axis {axis}, "
                              f"got {', '.join(map(str, shapes))}")
    joined = shapes[0][:axis] + (sum(s[axis] for s in shapes),) + shapes[0][axis + 1:]
    return joined, output[1]


def _global_average_pool(node: NodeView, lookup: Lookup, where: str
                         ) -> tuple[Shape, str] | None:
    """QLinearGlobalAveragePool (X, x_scale, x_zp, y_scale, y_zp; channels_last): every
    spatial dimension kept as 1."""
    x = lookup(node.inputs[0])
    if x is None:
        return None
    shape, dtype = x
    if len(shape) < 3:
        raise OnnxImportError(f"{where} requires an input of at least 3 dimensions, got "
                              f"{shape}")
    if node.attrs.get("channels_last", 0):
        return (shape[0],) + (1,) * (len(shape) - 2) + (shape[-1],), dtype
    return shape[:2] + (1,) * (len(shape) - 2), dtype


def _qgemm(node: NodeView, lookup: Lookup, where: str) -> tuple[Shape, str] | None:
    """QGemm (A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp; transA, transB):
    M x N, in y_zp's dtype, or float32 without y_scale."""
    a, b = lookup(node.inputs[0]), lookup(_input(node, 3))
    if a is None or b is None:
        return None
    if len(a[0]) != 2 or len(b[0]) != 2:
        raise OnnxImportError(f"{where} requires 2-D A and B, got {a[0]} and {b[0]}")
    m, k = a[0][::-1] if node.attrs.get("transA", 0) else a[0]
    kb, n = b[0][::-1] if node.attrs.get("transB", 0) else b[0]
    if k != kb:
        raise OnnxImportError(f"{where} requires the inner dimensions to agree, got "
                              f"{a[0]} x {b[0]}")
    if not _input(node, 7):
        return (m, n), "float32"
    zero_point = lookup(_input(node, 8)) if _input(node, 8) else None
    return None if zero_point is None else ((m, n), zero_point[1])


# onnxruntime's contrib operators (domain com.microsoft): op type -> rule.
CONTRIB_RULES: dict[str, Rule] = {
    "QLinearConcat": _concat,
    "QLinearAdd": _broadcast,
    "QLinearMul": _broadcast,
    "QLinearGlobalAveragePool": _global_average_pool,
    "QLinearSigmoid": _same_as_x,
    "QLinearLeakyRelu": _same_as_x,
    "QLinearSoftmax": _same_as_x,
    "QGemm": _qgemm,
}


def contrib_output(node: NodeView, lookup: Lookup, where: str) -> tuple[Shape, str] | None:
    """The first output's ``(shape, dtype)`` of a contrib node by its rule, or None where
    there is no rule or an input's shape is unknown."""
    rule = CONTRIB_RULES.get(node.op) if node.domain == "com.microsoft" else None
    if rule is None:
        return None
    found = rule(node, lookup, where)
    if found is not None and math.prod(found[0]) <= 0:
        return None
    return found

