"""Source text of a kernel and the mapping from Python AST positions to the user's file."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cached_property

from ir.errors import KernelError, SourceLoc


@dataclass(frozen=True)
class SourceText:
    """Python source cut from a file, with what it takes to map positions back.

    ``text`` is what gets parsed (dedented). ``first_line`` is the file line of its first line;
    ``indents[k]`` is how many characters dedenting removed from line ``k`` (0-based), and
    ``first_col`` the column (1-based) of the text's first character when it starts mid-line.
    """

    text: str
    file: str
    first_line: int = 1
    indents: tuple[int, ...] = ()
    first_col: int = 1

    @staticmethod
    def dedented(source: str, file: str, first_line: int = 1) -> SourceText:
        """Remove the first line's indentation from every line that starts with it."""
        lines = source.splitlines()
        first = next((line for line in lines if line.strip()), "")
        indent = first[:len(first) - len(first.lstrip())]
        kept: list[str] = []
        removed: list[int] = []
        for line in lines:
            if indent and line.startswith(indent):
                kept.append(line[len(indent):])
                removed.append(len(indent))
            else:
                kept.append(line)
                removed.append(0)
        return SourceText("\n".join(kept) + "\n", file, first_line, tuple(removed))

    def parse(self) -> ast.Module:
        """The AST of the text; a syntax error becomes a KernelError at its real position."""
        try:
            return ast.parse(self.text, filename=self.file)
        except SyntaxError as err:
            line = err.lineno or 1
            col = err.offset or 1
            raise KernelError(f"invalid Python syntax: {err.msg}",
                              self.position(line, col - 1, line, col)) from None

    def loc(self, node: ast.AST) -> SourceLoc:
        """The user's span of ``node``: real file line and 1-based columns, end inclusive."""
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0)
        end_line = getattr(node, "end_lineno", None) or line
        end_col = getattr(node, "end_col_offset", None)
        if end_col is None:
            end_col = col + 1
        return self.position(line, col, end_line, end_col)

    def position(self, line: int, col: int, end_line: int, end_col: int) -> SourceLoc:
        """Map an AST position (1-based line, 0-based UTF-8 byte columns) to a SourceLoc."""
        return SourceLoc(self.file, line + self.first_line - 1, self._column(line, col) + 1,
                         end_line + self.first_line - 1, self._column(end_line, end_col))

    @cached_property
    def _lines(self) -> list[bytes]:
        return [line.encode() for line in self.text.splitlines()]

    def _column(self, line: int, byte_col: int) -> int:
        """Character column (0-based) in the user's file of a byte column of the text."""
        lines = self._lines
        text_line = lines[line - 1] if 1 <= line <= len(lines) else b""
        chars = len(text_line[:byte_col].decode(errors="ignore"))
        removed = self.indents[line - 1] if 1 <= line <= len(self.indents) else 0
        start = self.first_col - 1 if line == 1 else 0
        return chars + removed + start

    def error(self, node: ast.AST, message: str) -> KernelError:
        """A KernelError about ``node``, located in the user's file."""
        return KernelError(message, self.loc(node))
