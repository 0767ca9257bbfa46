"""The project's error hierarchy.

Every error a user can see derives from :class:`TensorizeError`. Each carries an optional
source location so the message can point at the user's file and line: a kernel's line for
kernel errors, a YAML line for intrinsic-description errors.

The backends' own errors derive from these, beside the code that raises them:
``targets.cpu.errors`` (``EmitError``, ``CpuRunError``) and ``targets.cuda.errors``
(``EmitError``; ``CompileError`` and ``EmulationError``, which are :class:`ExecutionError`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# Python ends a line at \n, \r\n or \r only; str.splitlines also splits at \f, \x1c, \u2028...
LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class SourceLoc:
    """A span in a user's file: 1-based line and column, end inclusive of the last column."""

    file: str
    line: int
    col: int = 0
    end_line: int | None = None
    end_col: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    def source_line(self) -> str | None:
        """The text of the first line of the span, if the file can be read.

        Bytes that are not UTF-8 show as U+FFFD, so a message about them still renders.
        """
        try:
            text = Path(self.file).read_bytes().decode(errors="replace")
        except OSError:
            return None
        lines = LINE_BREAK.split(text)  # lines as Python numbers them
        if 1 <= self.line <= len(lines):
            return lines[self.line - 1]
        return None


class TensorizeError(Exception):
    """Base of every error tensorize reports to a user.

    ``message`` is the plain reason; ``loc`` (optional) the user's span it concerns.
    ``str(err)`` renders ``file:line:col: message`` followed by the source line and a caret.
    """

    def __init__(self, message: str, loc: SourceLoc | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.loc = loc

    def __str__(self) -> str:
        return render_error(self.message, self.loc)


class IRError(TensorizeError):
    """An IR node was built with inconsistent parts (arity, dtype, extent)."""


class KernelError(TensorizeError):
    """A kernel (script or TE) is malformed: unknown buffer, bad binding, type mismatch."""


class ScheduleError(TensorizeError):
    """A schedule primitive refused: its precondition does not hold.

    ``primitive`` names the primitive; ``nodes`` are the IR nodes involved.
    """

    def __init__(self, primitive: str, message: str, nodes: tuple[object, ...] = (),
                 loc: SourceLoc | None = None) -> None:
        super().__init__(f"{primitive}: {message}", loc)
        self.primitive = primitive
        self.nodes = nodes


class IntrinsicSpecError(TensorizeError):
    """An intrinsic description (YAML) is invalid. ``findings`` lists every problem found."""

    def __init__(self, message: str, loc: SourceLoc | None = None,
                 findings: tuple["IntrinsicSpecError", ...] = ()) -> None:
        super().__init__(message, loc)
        self.findings = findings

    def __str__(self) -> str:
        if not self.findings:
            return render_error(self.message, self.loc)
        return "\n".join(str(finding) for finding in self.findings)


class ExecutionError(TensorizeError):
    """A function could not be compiled or run by an executor or backend."""


class SimulatorFault(TensorizeError):
    """The simulated NPU stopped on something real hardware would silently get wrong.

    ``index`` is the faulting instruction's position in the program, ``unit`` the unit that
    executed it.
    """

    def __init__(self, message: str, index: int | None = None, unit: str | None = None,
                 loc: SourceLoc | None = None) -> None:
        where = []
        if index is not None:
            where.append(f"instruction {index}")
        if unit is not None:
            where.append(f"unit {unit}")
        prefix = f"{', '.join(where)}: " if where else ""
        super().__init__(prefix + message, loc)
        self.index = index
        self.unit = unit


# A source line longer than this is cut to a window around the span's start.
_SHOWN_COLUMNS = 120


def render_error(message: str, loc: SourceLoc | None) -> str:
    """Render ``file:line:col: message``, then the source line and a caret under the span."""
    if loc is None:
        return message
    text = f"{loc}: {message}"
    source = loc.source_line()
    if source is None:
        return text
    # A NUL or other control character would garble the terminal; each keeps its column.
    source = "".join(c if c.isprintable() or c == "\t" else "\ufffd" for c in source)
    start = max(loc.col - 1, 0)
    if loc.end_col is not None and (loc.end_line in (None, loc.line)) and loc.end_col > loc.col:
        width = loc.end_col - loc.col + 1
    else:
        width = 1
    if len(source) > _SHOWN_COLUMNS:
        # A generated or minified line: show what surrounds the span, marked as cut.
        first = max(min(start - 10, len(source) - _SHOWN_COLUMNS), 0)
        cut = source[first:first + _SHOWN_COLUMNS]
        source = ("..." if first else "") + cut + ("..." if first + len(cut) < len(source) else "")
        start = start - first + (3 if first else 0)
        width = max(min(width, _SHOWN_COLUMNS - (start - (3 if first else 0))), 1)
    return f"{text}\n    {source}\n    {' ' * start}{'^' * width}"
