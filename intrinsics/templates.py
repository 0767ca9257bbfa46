"""Emit templates: backend code with ``{operand}`` placeholders.

A placeholder is an operand name (``{C}``) or an operand's attribute: ``{A.ld}`` and
``{A.ld_bytes}``, the leading dimension of a tensor in elements and in bytes, and
``{s.log2}``, the base-2 logarithm of a scalar that must be a power of two (an instruction
that encodes a shift where the semantics divides). ``{{`` and ``}}`` stand for literal
braces. Templates are checked against the operand list when a description loads, not when
code is generated.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass

# Attribute -> whether it applies to a scalar operand (True) or to a tensor of 2+ dims (False).
ATTRIBUTES = {"ld": False, "ld_bytes": False, "log2": True}


@dataclass(frozen=True)
class Placeholder:
    """One ``{operand}`` or ``{operand.attr}`` in a template."""

    operand: str
    attribute: str | None

    def __str__(self) -> str:
        return self.operand if self.attribute is None else f"{self.operand}.{self.attribute}"


class TemplateError(ValueError):
    """A template that is not well formed (unbalanced braces, conversions, formats)."""


def placeholders(template: str) -> list[Placeholder]:
    """The placeholders of ``template`` in order; raise TemplateError when it is malformed."""
    found = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as err:
        raise TemplateError(f"{err}; write '{{{{' and '}}}}' for literal braces") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if spec or conversion:
            raise TemplateError(f"placeholder {{{name}}} may not carry a format or "
                                "conversion")
        if not name:
            raise TemplateError("an empty placeholder {} names no operand")
        operand, _, attribute = name.partition(".")
        found.append(Placeholder(operand, attribute or None))
    return found


def render(template: str, values: Mapping[str, str]) -> str:
    """Fill ``template``'s placeholders from ``values`` (keys like ``C`` or ``A.ld``)."""
    pieces = []
    for literal, name, _, _ in string.Formatter().parse(template):
        pieces.append(literal)
        if name is None:
            continue
        if name not in values:
            raise KeyError(f"template placeholder {{{name}}} has no value; given "
                           f"{', '.join(values)}")
        pieces.append(str(values[name]))
    return "".join(pieces)
