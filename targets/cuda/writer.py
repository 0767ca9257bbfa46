"""C++ text built line by line, with the indentation and the braces kept by the writer.

The CUDA emitter (and the emulation's launcher) write code through a :class:`CppWriter`:
:meth:`~CppWriter.line` adds a line at the current depth, and a ``with`` statement opens a
braced block, indents its body one level (two spaces) and closes it, so braces always pair
and no caller counts indentation::

    >>> out = CppWriter()
    >>> with out.block("for (int i = 0; i < 4; ++i)"):
    ...     with out.block("if (i % 2)"):
    ...         out.line("odd(i);")
    ...     with out.else_block():
    ...         out.line("even(i);")
    >>> print(out.text())
    for (int i = 0; i < 4; ++i) {
      if (i % 2) {
        odd(i);
      } else {
        even(i);
      }
    }
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["CppWriter"]

INDENT = "  "


class CppWriter:
    """Lines of C++ and the depth the next one goes at (``depth`` levels of two spaces).

    A block opened with ``with`` is closed when the ``with`` ends normally; after an
    exception inside it the text is unfinished and the writer is meant to be dropped."""

    def __init__(self, depth: int = 0) -> None:
        self.lines: list[str] = []
        self.depth = depth

    def line(self, text: str) -> None:
        """Add ``text`` at the current depth; each line of a multi-line text is indented
        alike, and an empty line stays empty (no trailing spaces)."""
        prefix = INDENT * self.depth
        for part in text.split("\n"):
            self.lines.append(prefix + part if part else "")

    @contextmanager
    def block(self, head: str = "", *, comment: str = "", close: str = "}") -> Iterator[None]:
        """``head {`` (a bare ``{`` without ``head``; then ``  // comment`` with one), the
        body one level deeper, then ``close`` at this level (``};`` ends a struct)."""
        opening = f"{head} {{" if head else "{"
        self.line(f"{opening}  // {comment}" if comment else opening)
        self.depth += 1
        yield
        self.depth -= 1
        self.line(close)

    @contextmanager
    def else_block(self, head: str = "") -> Iterator[None]:
        """The ``else`` of the ``if`` block just closed: its ``}`` becomes ``} else {``
        (``} else if (c) {`` with ``head`` ``"if (c)"``), the body one level deeper, then
        ``}``. ValueError when the last line is not the ``}`` of a block at this level."""
        closing = INDENT * self.depth + "}"
        if not self.lines or self.lines[-1] != closing:
            raise ValueError("else_block: requires the line before to close a block at depth "
                             f"{self.depth}, got {self.lines[-1] if self.lines else None!r}")
        self.lines.pop()
        with self.block(f"}} else {head}".rstrip()):
            yield

    @contextmanager
    def scope(self, first: str) -> Iterator[None]:
        """``{ first`` (a declaration), the body at this same depth, then ``}``: a C++ scope
        without a level of indentation, so that nested ones (a kernel's thread-bound loop
        indices, one scope each) stay flat."""
        self.line(f"{{ {first}")
        yield
        self.line("}")

    def text(self) -> str:
        """The lines so far, joined by line breaks (no break after the last)."""
        return "\n".join(self.lines)
