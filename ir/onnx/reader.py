"""Reading an ONNX file within bounds: its nodes, constants and static shapes.

Everything a later step needs is collected here once: the constants (initializers,
Constant nodes and Identity nodes of a constant, as numpy arrays), every tensor's static
shape and dtype that is known (graph inputs, and onnx's shape inference for the rest), the
producer and consumers of each tensor.

What no later step could run is refused here, naming the file and the node: an opset newer
than the installed onnx defines, and a node whose operator neither onnx, nor onnxruntime's
contrib domain, nor a function of the model itself defines (onnxruntime, which checks the
model, would refuse it too, without saying where).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ir.onnx import limits
from ir.onnx.errors import OnnxImportError, printable


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node: ``name`` (its own, or ``op_index`` when it has none), ``op``, ``domain``,
    ``inputs``/``outputs`` (tensor names; an omitted optional input is ``""``), ``attrs``
    (attribute values as onnx.helper reads them), and the proto itself."""

    name: str
    op: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict
    proto: object
    index: int


@dataclass(slots=True)
class ModelFile:
    """A read model: its path, the proto, its nodes in order, constants, shapes, dtypes,
    graph inputs and outputs (names), each tensor's consumers, the default domain's opset
    and every imported domain's (``""`` for the default)."""

    path: str
    model: object
    nodes: list[NodeView]
    constants: dict[str, np.ndarray]
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]
    inputs: list[str]
    outputs: list[str]
    consumers: dict[str, list[NodeView]] = field(default_factory=dict)
    opset: int = 0
    opsets: dict[str, int] = field(default_factory=dict)

    def where(self, node: NodeView) -> str:
        """``model.onnx: node 'conv1' (Conv)``, for messages."""
        return f"{self.path}: node {node.name!r} ({printable(node.op)})"


# onnxruntime's own operator domain (its contrib operators: QLinearConcat, QLinearAdd, ...),
# whose nodes run through the fallback. onnx does not define them, so they are not checked.
ONNXRUNTIME_DOMAINS = frozenset({"com.microsoft"})


def require(module: str, who: str) -> None:
    """Refuse, with how to install it, when the optional package ``module`` is missing."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise OnnxImportError(f"{who} requires the {module} package, got none installed; "
                              "install the models extra: pip install 'tensorize[models]'")


def read_model(path: str | os.PathLike) -> ModelFile:
    """Read and bound-check ``path``; raises OnnxImportError naming the file."""
    require("onnx", f"importing {path}")
    import onnx
    from google.protobuf.message import DecodeError
    from onnx import helper, numpy_helper, shape_inference
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data
    from onnx.checker import ValidationError
    from onnx.shape_inference import InferenceError

    name = str(path)
    file = Path(path)
    if not file.is_file():
        raise OnnxImportError(f"{name}: requires an ONNX model file, got no such file")
    size = file.stat().st_size
    if size > limits.MAX_MODEL_BYTES:
        raise OnnxImportError(f"{name}: requires a model of at most "
                              f"{limits.MAX_MODEL_BYTES >> 20} MiB, got {size >> 20} MiB")
    try:
        model = onnx.load_model_from_string(file.read_bytes())
    except (DecodeError, ValueError, RuntimeError) as err:  # not an ONNX file
        raise OnnxImportError(f"{name}: requires an ONNX model, got a file onnx cannot "
                              f"parse ({type(err).__name__}: {err})") from None
    graph = model.graph
    opsets = _check_opsets(name, model)
    if len(graph.node) > limits.MAX_NODES:
        raise OnnxImportError(f"{name}: requires at most {limits.MAX_NODES} nodes, got "
                              f"{len(graph.node)}")
    if not graph.node:
        raise OnnxImportError(f"{name}: requires a graph with nodes, got none")
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except (InferenceError, ValidationError, RuntimeError):
        # Inference is a help, not a requirement: the importer's own operators know shapes.
        inferred = model
    constants: dict[str, np.ndarray] = {}
    for init in graph.initializer:
        _check_elements(name, init.name, list(init.dims))
        if uses_external_data(init):
            try:
                # Stored outside the model: read from beside it (onnx refuses a location
                # that is absolute or leaves the model's folder) into the model, so that
                # onnxruntime, which is handed the model's bytes, sees the same weights.
                load_external_data_for_tensor(init, str(file.parent))
                init.data_location = onnx.TensorProto.DEFAULT
                del init.external_data[:]
            except (ValidationError, OSError, ValueError) as err:
                raise OnnxImportError(f"{name}: initializer {init.name!r} cannot be read: "
                                      f"{err}") from None
        constants[init.name] = numpy_helper.to_array(init)
    nodes = []
    returned = {output.name for output in graph.output}
    for index, proto in enumerate(graph.node):
        attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
        view = NodeView(proto.name or f"{proto.op_type}_{index}", proto.op_type,
                        proto.domain, tuple(proto.input), tuple(proto.output), attrs, proto,
                        index)
        _check_operator(name, view, opsets, model)
        if proto.op_type == "Constant" and proto.domain in ("", "ai.onnx"):
            constants[proto.output[0]] = _constant_value(name, view)
            continue
        if _identity_of_constant(view, constants):
            # PyTorch's TorchScript exporter keeps one initializer for equal constants and
            # gives each user its own name through an Identity: a constant, as its input.
            # One the graph returns keeps its node, so that a layer computes the output.
            constants[proto.output[0]] = constants[proto.input[0]]
            if proto.output[0] not in returned:
                continue
        nodes.append(view)
    shapes: dict[str, tuple[int, ...]] = {}
    dtypes: dict[str, str] = {}
    for info in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        _record_type(info, shapes, dtypes)
    inputs = [i.name for i in graph.input if i.name not in constants]
    for input_name in inputs:
        if input_name not in shapes:
            raise OnnxImportError(f"{name}: input {input_name!r} requires a static shape "
                                  "(every dimension a number) and a known dtype, got a "
                                  "symbolic or missing one; export with a fixed batch and size")
        _check_elements(name, input_name, list(shapes[input_name]))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    read = ModelFile(name, model, nodes, constants, shapes, dtypes, inputs,
                     [o.name for o in graph.output], opset=opset, opsets=opsets)
    for node in nodes:
        for tensor in node.inputs:
            if tensor:
                read.consumers.setdefault(tensor, []).append(node)
    _check_order(read)
    return read


def _onnx_domain(domain: str) -> str:
    """The domain as onnx's schemas name it (``ai.onnx`` is the default domain, ``""``)."""
    return "" if domain == "ai.onnx" else domain


def _newest_opset(domain: str) -> int | None:
    """The newest opset version of an ONNX ``domain`` the installed onnx defines, or None
    for a domain onnx does not define."""
    from onnx import defs

    if domain == "":
        return defs.onnx_opset_version()
    if domain == "ai.onnx.ml":
        return defs.onnx_ml_opset_version()
    versions = [s.since_version for s in defs.get_all_schemas_with_history()
                if s.domain == domain]
    return max(versions) if versions else None


def _check_opsets(path: str, model) -> dict[str, int]:
    """The model's opset imports (domain -> version), each ONNX one within what the
    installed onnx defines."""
    import onnx

    opsets: dict[str, int] = {}
    for opset in model.opset_import:
        domain = _onnx_domain(opset.domain)
        newest = _newest_opset(domain)
        if newest is not None and not 1 <= opset.version <= newest:
            shown = opset.domain or "ai.onnx"
            raise OnnxImportError(f"{path}: opset import {shown!r} requires a version from 1 "
                                  f"to {newest} (the newest onnx {onnx.__version__} defines), "
                                  f"got {opset.version}; export the model with opset "
                                  f"{newest} or lower")
        opsets[domain] = int(opset.version)
    return opsets


def _check_operator(path: str, node: NodeView, opsets: dict[str, int], model) -> None:
    """Refuse a node no one can run: its domain not imported, unknown to onnx and to
    onnxruntime and no function of the model; or an ONNX operator its opset lacks."""
    from onnx import defs

    domain = _onnx_domain(node.domain)
    where = f"{path}: node {node.name!r} ({printable(node.op)})"
    if any(f.domain == node.domain and f.name == node.op for f in model.functions):
        return  # a function the model defines: onnx and onnxruntime inline it
    if domain not in opsets:
        imported = ", ".join(repr(d or "ai.onnx") for d in sorted(opsets)) or "none"
        shown = node.domain or "ai.onnx"
        raise OnnxImportError(f"{where} requires its domain {shown!r} among the model's "
                              f"opset imports, got {imported}")
    if domain in ONNXRUNTIME_DOMAINS:
        return
    if _newest_opset(domain) is None:
        known = ", ".join(repr(d) for d in ("ai.onnx", "ai.onnx.ml", *ONNXRUNTIME_DOMAINS))
        raise OnnxImportError(f"{where} requires an operator domain onnx or onnxruntime "
                              f"defines ({known}), got {node.domain!r}; replace "
                              "the node, or export without custom operators")
    if not defs.has(node.op, domain):
        raise OnnxImportError(f"{where} requires an operator onnx defines in domain "
                              f"{domain or 'ai.onnx'!r}, got {printable(node.op)}, which it "
                              "does not")
    try:
        defs.get_schema(node.op, opsets[domain], domain)
    except defs.SchemaError:
        since = min(s.since_version for s in defs.get_all_schemas_with_history()
                    if s.name == node.op and s.domain == domain)
        raise OnnxImportError(f"{where} requires opset {since} or later ({node.op} is new "
                              f"in opset {since}), got opset {opsets[domain]}") from None


def _check_elements(path: str, tensor: str, dims: list[int]) -> None:
    count = math.prod(dims)
    if count > limits.MAX_TENSOR_ELEMENTS:
        raise OnnxImportError(f"{path}: tensor {tensor!r} requires at most "
                              f"{limits.MAX_TENSOR_ELEMENTS} elements, got {count} "
                              f"(shape {tuple(dims)})")


def _constant_value(path: str, node: NodeView) -> np.ndarray:
    from onnx import numpy_helper

    value = node.attrs.get("value")
    if value is None:
        raise OnnxImportError(f"{path}: node {node.name!r} (Constant) requires a 'value' "
                              f"tensor attribute, got {sorted(node.attrs)}")
    _check_elements(path, node.outputs[0], list(value.dims))
    return numpy_helper.to_array(value)


def _identity_of_constant(node: NodeView, constants: dict[str, np.ndarray]) -> bool:
    """Whether ``node`` is an Identity whose input is a constant."""
    return (node.op == "Identity" and node.domain in ("", "ai.onnx")
            and len(node.inputs) == 1 and node.inputs[0] in constants)


def _record_type(info, shapes: dict, dtypes: dict) -> None:
    from onnx import helper

    tensor_type = info.type.tensor_type
    if not tensor_type.elem_type:
        return
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim]
    try:
        dtypes[info.name] = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)).name
    except (KeyError, TypeError):
        return
    if tensor_type.HasField("shape") and all(d is not None and d > 0 for d in dims):
        shapes[info.name] = tuple(int(d) for d in dims)


def _check_order(read: ModelFile) -> None:
    """ONNX requires nodes in topological order; the layers run in that order."""
    known = set(read.constants) | set(read.inputs)
    for node in read.nodes:
        missing = [t for t in node.inputs if t and t not in known]
        if missing:
            raise OnnxImportError(f"{read.where(node)} requires its input {missing[0]!r} to be "
                                  "a graph input, a constant or the output of an earlier node, "
                                  "got none of these (the graph is not topologically sorted, "
                                  "or the tensor is never produced)")
        known.update(t for t in node.outputs if t)
