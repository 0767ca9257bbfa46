"""Intrinsic semantics: one statement such as ``C[i, j] += f32(A[i, k]) * f32(B[k, j])``.

The language is the kernels' expression language spelled without the ``T.`` prefix: short
dtype names called as functions convert (``i32(x)``), and ``max``, ``min``, ``exp``... are
plain calls. Buffers and iterators are given by name, not declared.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

from ir import dtypes
from ir.buffer import Buffer
from ir.errors import IRError, KernelError
from ir.expr import Var
from ir.script.boundary import user_facing
from ir.script.func_parser import FuncParser
from ir.script.source import SourceText
from ir.stmt import BufferStore


class _ComputeParser(FuncParser):
    """Kernel statements over given buffers and iterators, with bare function names."""

    call_prefix = ""

    def __init__(self, source: SourceText, names: Mapping[str, Var | Buffer]) -> None:
        super().__init__(source, alias="")
        self.call_prefix = ""
        self.scopes = [dict(names)]

    def function_name(self, node: ast.expr) -> str | None:
        """Expression functions and dtype names, called bare: ``max``, ``exp``, ``f32``."""
        if not isinstance(node, ast.Name):
            return None
        if node.id in self._functions or dtypes.is_dtype_name(node.id):
            return node.id
        return None


@user_facing
def parse_compute(text: str, buffers: Mapping[str, Buffer], iterators: Mapping[str, Var],
                  filename: str = "<string>", line: int = 1, col: int = 1) -> BufferStore:
    """Parse one store statement ``X[...] = expr`` or ``X[...] += expr`` into a BufferStore.

    ``buffers`` and ``iterators`` give what names mean. ``filename``, ``line`` and ``col``
    (1-based) place the text's first character in its file, so errors point at the right
    column of, e.g., a YAML scalar.
    """
    stripped = text.lstrip()
    skipped = text[:len(text) - len(stripped)]
    first_line = line + skipped.count("\n")
    if "\n" in skipped:
        first_col = len(skipped.rpartition("\n")[2]) + 1
    else:
        first_col = col + len(skipped)
    source = SourceText(stripped.rstrip() + "\n", filename, first_line, first_col=first_col)
    tree = source.parse()
    if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.Assign, ast.AugAssign)):
        where = tree.body[1] if len(tree.body) > 1 else (tree.body[0] if tree.body else tree)
        raise source.error(where, "semantics require one store statement, as in "
                                  "C[i, j] += f32(A[i, k]) * f32(B[k, j])")
    parser = _ComputeParser(source, {**buffers, **iterators})
    try:
        stmt = parser.statement(tree.body[0])
    except IRError as err:
        raise KernelError(err.message, err.loc or source.loc(tree.body[0])) from None
    if not isinstance(stmt, BufferStore):
        raise source.error(tree.body[0], "semantics require a store into a buffer element")
    return stmt
