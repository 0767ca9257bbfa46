"""Constraints on a sweep's machines, in a tiny grammar parsed here (never evaluated as
Python):

    constraint := sum CMP sum              CMP: <= < >= > == !=
    sum        := product (('+' | '-') product)*
    product    := atom (('*' | '/') atom)*
    atom       := NUMBER [UNIT] | NAME ['bytes'] | '(' sum ')'

A NAME is a machine field by dotted path (``array.rows``, ``dram.bytes_per_cycle``) or a
derived quantity: ``pes`` (R x C), ``inp.bytes``, ``wgt.bytes``, ``acc.bytes``, ``sram.bytes``.
``npu.inp bytes`` is ``inp.bytes`` spelled as the scope is named. UNIT is a binary multiple
(``KiB``, ``MiB``, ``GiB``; ``K``, ``M``, ``G`` alike). Example: ``npu.inp bytes <= 512 KiB``.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from ir.errors import TensorizeError

_COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt,
    "==": operator.eq, "!=": operator.ne}
_ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
_UNITS = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "k": 1 << 10, "m": 1 << 20,
          "g": 1 << 30}
_TOKEN = re.compile(r"\s*(?:(?P<number>\d+(?:\.\d+)?)|(?P<name>[A-Za-z_][\w.]*)"
                    r"|(?P<op><=|>=|==|!=|[<>+\-*/()]))")


class ConstraintError(TensorizeError):
    """A constraint that does not parse; ``column`` is the 0-based offset of the problem."""

    def __init__(self, message: str, column: int) -> None:
        super().__init__(message)
        self.column = column


@dataclass(frozen=True)
class Constraint:
    """A parsed constraint: ``text`` as written, and the tree of its two sides."""

    text: str
    op: str
    left: tuple
    right: tuple

    def holds(self, values: Mapping[str, float]) -> bool:
        """Whether the constraint holds for a machine's quantities (``machines.quantities``)."""
        return _COMPARISONS[self.op](_value(self.left, values), _value(self.right, values))


def parse_constraint(text: str, names: Collection[str]) -> Constraint:
    """Parse ``text``, every NAME checked against ``names``; raises ConstraintError."""
    tokens = _tokens(text)
    parser = _Parser(tokens, names, len(text))
    left = parser.sum()
    op, at = parser.next()
    if op not in _COMPARISONS:
        raise ConstraintError(f"a constraint requires a comparison ({', '.join(_COMPARISONS)})"
                              f" after its left side, got {op or 'the end'!r}", at)
    right = parser.sum()
    rest, at = parser.next()
    if rest is not None:
        raise ConstraintError(f"a constraint requires one comparison, got {rest!r} after it",
                              at)
    return Constraint(text, op, left, right)


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """(kind, text, column) of each token: number, name or op."""
    tokens, at = [], 0
    while text[at:].strip():
        match = _TOKEN.match(text, at)
        if match is None:
            column = len(text) - len(text[at:].lstrip())
            raise ConstraintError(f"a constraint requires numbers, field names and "
                                  f"operators, got {text[column]!r}", column)
        kind = match.lastgroup or "op"
        tokens.append((kind, match.group(kind), match.start(kind)))
        at = match.end()
    return tokens


class _Parser:
    """Recursive descent over the tokens; each rule returns a tree of tuples:
    ``("num", v)``, ``("name", n)`` or ``(op, left, right)``."""

    def __init__(self, tokens: list[tuple[str, str, int]], names: Collection[str],
                 end: int) -> None:
        self.tokens = tokens
        self.names = names
        self.end = end
        self.at = 0

    def peek(self) -> str | None:
        """The next token's text (None at the end), not consumed."""
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def next(self) -> tuple[str | None, int]:
        """The next token's text and column, consumed (None and the end's column)."""
        if self.at >= len(self.tokens):
            return None, self.end
        _, text, column = self.tokens[self.at]
        self.at += 1
        return text, column

    def sum(self) -> tuple:
        """``product (('+' | '-') product)*``, left-associative."""
        tree = self.product()
        while self.peek() in ("+", "-"):
            op, _ = self.next()
            tree = (op, tree, self.product())
        return tree

    def product(self) -> tuple:
        """``atom (('*' | '/') atom)*``, left-associative."""
        tree = self.atom()
        while self.peek() in ("*", "/"):
            op, _ = self.next()
            tree = (op, tree, self.atom())
        return tree

    def atom(self) -> tuple:
        """``NUMBER [UNIT] | NAME ['bytes'] | '(' sum ')'``."""
        if self.at >= len(self.tokens):
            raise ConstraintError("a constraint requires a value here, got the end", self.end)
        kind, text, column = self.tokens[self.at]
        self.at += 1
        if text == "(":
            tree = self.sum()
            if self.next()[0] != ")":
                raise ConstraintError("a '(' requires its ')'", column)
            return tree
        if kind == "number":
            return ("num", self._scaled(float(text) if "." in text else int(text)))
        if kind == "name":
            return ("name", self._name(text, column))
        raise ConstraintError(f"a constraint requires a number or a field name here, got "
                              f"{text!r}", column)

    def _scaled(self, number: float) -> float:
        unit = self.peek()
        if unit is not None and unit.lower() in _UNITS:
            self.at += 1
            return number * _UNITS[unit.lower()]
        return number

    def _name(self, text: str, column: int) -> str:
        if self.peek() == "bytes":
            self.at += 1
            text = f"{text}.bytes"
        name = text.removeprefix("npu.")
        if name not in self.names:
            known = ", ".join(sorted(self.names))
            raise ConstraintError(f"a constraint requires a machine field or a derived "
                                  f"quantity ({known}), got {text!r}", column)
        return name


def _value(tree: tuple, values: Mapping[str, float]) -> float:
    if tree[0] == "num":
        return tree[1]
    if tree[0] == "name":
        return values[tree[1]]
    op, left, right = tree
    return _ARITHMETIC[op](_value(left, values), _value(right, values))
