"""Emit templates: one backend instruction with ``{operand}`` placeholders, parsed as data.

A placeholder is an operand name (``{C}``) or an operand's attribute: ``{A.ld}`` and
``{A.ld_bytes}``, the leading dimension of a tensor in elements and in bytes, and
``{s.log2}``, the base-2 logarithm of a scalar that must be a power of two (an instruction
that encodes a shift where the semantics divides); no grammar admits a brace outside a
placeholder. :func:`parse` reads a template with its backend's grammar (:mod:`intrinsics.grammars`)
when a description loads; :meth:`Template.render` fills it, admitting only the values that
grammar allows, so no text but what the grammar admits reaches generated code.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from intrinsics.grammars import Piece, TemplateError, grammar_for

__all__ = ["ATTRIBUTES", "Placeholder", "Template", "TemplateError", "parse", "placeholders"]

# Attribute -> whether it applies to a scalar operand (True) or to a tensor of 2+ dims (False).
ATTRIBUTES = {"ld": False, "ld_bytes": False, "log2": True}

_BRACES = re.compile(r"\{([^{}]*)\}|[{}]")
_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)?\Z", re.ASCII)


@dataclass(frozen=True)
class Placeholder:
    """One ``{operand}`` or ``{operand.attr}`` in a template."""

    operand: str
    attribute: str | None

    def __str__(self) -> str:
        return self.operand if self.attribute is None else f"{self.operand}.{self.attribute}"


@dataclass(frozen=True)
class Template:
    """A template read by its backend's grammar: literal pieces and placeholders in order."""

    backend: str
    text: str
    pieces: tuple[Piece, ...]

    @property
    def placeholders(self) -> list[Placeholder]:
        """The placeholders in order."""
        return [_placeholder(p.text) for p in self.pieces if p.placeholder]

    def render(self, values: Mapping[str, object]) -> str:
        """The template with each placeholder replaced by ``values[name]`` (keys like ``C``
        or ``A.ld``). KeyError when a value is missing; TemplateError when a value is not one
        the backend's grammar admits there (a backend bug, never a description's)."""
        grammar = grammar_for(self.backend)
        out = []
        for piece in self.pieces:
            if not piece.placeholder:
                out.append(piece.text)
                continue
            if piece.text not in values:
                raise KeyError(f"template placeholder {{{piece.text}}} has no value; given "
                               f"{', '.join(values)}")
            value = str(values[piece.text])
            if not grammar.value(value):
                raise TemplateError(f"the {self.backend} template's placeholder "
                                    f"{{{piece.text}}} requires {grammar.values}, got "
                                    f"{value!r}", piece.offset)
            out.append(value)
        return "".join(out)


def _pieces(template: str) -> tuple[Piece, ...]:
    """Split a template into literal text and placeholders; TemplateError if malformed."""
    pieces = []
    at = 0
    for match in _BRACES.finditer(template):
        if match.start() > at:
            pieces.append(Piece(template[at:match.start()], at, match.start(), False))
        text, name = match.group(), match.group(1)
        if name is None:
            raise TemplateError(f"a lone '{text}'; braces only enclose a placeholder such as "
                                "{A}", match.start())
        elif not name:
            raise TemplateError("an empty placeholder {} names no operand", match.start(), 2)
        elif _NAME.match(name) is None:
            raise TemplateError(f"placeholder {text} requires an operand name or "
                                "name.attribute (no format or conversion)", match.start(),
                                len(text))
        else:
            pieces.append(Piece(name, match.start(), match.end(), True))
        at = match.end()
    if at < len(template):
        pieces.append(Piece(template[at:], at, len(template), False))
    return tuple(pieces)


def _placeholder(name: str) -> Placeholder:
    operand, _, attribute = name.partition(".")
    return Placeholder(operand, attribute or None)


def placeholders(template: str) -> list[Placeholder]:
    """The placeholders of ``template`` in order; raise TemplateError when it is malformed."""
    return [_placeholder(p.text) for p in _pieces(template) if p.placeholder]


@lru_cache(maxsize=1024)
def parse(backend: str, text: str) -> Template:
    """``text`` read as a ``backend`` template; TemplateError when the grammar refuses it."""
    pieces = _pieces(text)
    grammar_for(backend).check(pieces)
    return Template(backend, text, pieces)
