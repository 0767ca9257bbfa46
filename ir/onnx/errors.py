"""The errors of the ONNX importer: every one names the model file, and the node where one
is at fault; and how names and onnxruntime's messages are shown in them (:func:`printable`,
:func:`onnxruntime_reason`)."""

from __future__ import annotations

import re

from ir.errors import TensorizeError

# Where onnxruntime's C++ code raised: ``/onnxruntime_src/.../file.cc:117 `` (a function
# signature follows).
_SOURCE = re.compile(r"\S+\.(?:cc|cpp|h):\d+ ")


class OnnxImportError(TensorizeError):
    """A model the importer cannot read: not a file, too large, not ONNX, a shape it cannot
    know, or a node whose attributes or inputs it cannot take."""


class UnsupportedOperatorError(OnnxImportError):
    """A node whose operator the importer has no function for, refused (``fallback=False``)
    rather than run on the host."""

    def __init__(self, model: str, node: str, op_type: str) -> None:
        shown = printable(op_type)
        super().__init__(f"{model}: node {node!r} (op {shown}) requires an operator the "
                         f"importer supports, got {shown}; import with fallback to run it "
                         "on the host through onnxruntime")
        self.node = node
        self.op_type = op_type


def onnxruntime_reason(err: Exception) -> str:
    """The first line of onnxruntime's message for ``err``, without the C++ source position
    and function signature it carries, for a message of ours."""
    lines = str(err).strip().splitlines()
    text = lines[0] if lines else type(err).__name__
    match = _SOURCE.search(text)
    if match is None:
        return text
    rest, depth = text[match.end():], 0
    for index, char in enumerate(rest):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return f"{text[:match.start()]}{rest[index + 1:].lstrip()}".strip()
    return text


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on (control characters such as
    ESC, line and paragraph separators, invisible formatting characters) escaped as
    ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``: names from a model, for messages and
    progress lines.

    >>> printable("conv\\x1b[2J1")
    'conv\\\\x1b[2J1'
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
