"""The errors of the ONNX importer: every one names the model file, and the node where one
is at fault."""

from __future__ import annotations

from ir.errors import TensorizeError


class OnnxImportError(TensorizeError):
    """A model the importer cannot read: not a file, too large, not ONNX, a shape it cannot
    know, or a node whose attributes or inputs it cannot take."""


class UnsupportedOperatorError(OnnxImportError):
    """A node whose operator the importer has no function for, refused (``fallback=False``)
    rather than run on the host."""

    def __init__(self, model: str, node: str, op_type: str) -> None:
        super().__init__(f"{model}: node {node!r} (op {op_type}) requires an operator the "
                         f"importer supports, got {op_type}; import with fallback to run it "
                         "on the host through onnxruntime")
        self.node = node
        self.op_type = op_type
