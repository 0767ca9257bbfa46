"""Index expressions evaluated at emission time, for register buffers.

A register buffer (in a CPU target's register scope) has no address: the emitter holds each
vector-sized piece as an SSA value, so every index into one must be known when the code is
emitted. An address's alignment is proven from its form the same way. An index is
evaluated to a :class:`Form`, ``const + sum(coeff * var)`` over the loop variables whose
values are not known (serial loops); unrolled loops and constants fold in. ``floormod`` and
``floordiv`` by a constant fold when every unknown term is a multiple of the divisor: then
``(c * q + r) % c == r % c`` and ``(c * q + r) // c == q + r // c`` for any integer q.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ir.arith import Interval
from ir.expr import BinOp, Cast, Expr, IntImm, Var
from targets.cpu.ranges import pick


@dataclass(frozen=True, slots=True)
class Form:
    """``const + sum(coeff * var)``; ``terms`` holds no zero coefficient."""

    const: int
    terms: dict[Var, int] = field(default_factory=dict)

    @property
    def value(self) -> int | None:
        """The constant, when no unknown variable remains."""
        return None if self.terms else self.const

    def plus(self, other: Form, sign: int = 1) -> Form:
        terms = dict(self.terms)
        for var, coeff in other.terms.items():
            terms[var] = terms.get(var, 0) + sign * coeff
        return Form(self.const + sign * other.const, {v: c for v, c in terms.items() if c})

    def times(self, factor: int) -> Form:
        return Form(self.const * factor, {v: c * factor for v, c in self.terms.items()
                                          if c * factor})


def evaluate(expr: Expr, forms: dict[Var, Form],
             ranges: Mapping[Var, Interval] | None = None) -> Form | None:
    """The form of an integer index ``expr``; variables not in ``forms`` are unknown atoms.
    A ``min`` or ``max`` that ``ranges`` (when given) decide is the operand it equals. None
    when the expression is not affine in them (a load, an undecided min, a division that
    does not fold)."""
    if isinstance(expr, IntImm):
        return Form(expr.value)
    if isinstance(expr, Var):
        return forms.get(expr, Form(0, {expr: 1}))
    if isinstance(expr, Cast) and expr.dtype.is_int:
        return evaluate(expr.value, forms, ranges)
    if not isinstance(expr, BinOp):
        return None
    chosen = pick(expr, ranges) if ranges is not None else None
    if chosen is not None:
        return evaluate(chosen, forms, ranges)
    a, b = evaluate(expr.a, forms, ranges), evaluate(expr.b, forms, ranges)
    if a is None or b is None:
        return None
    if expr.op in ("add", "sub"):
        return a.plus(b, 1 if expr.op == "add" else -1)
    if expr.op == "mul":
        if a.value is not None:
            return b.times(a.value)
        return a.times(b.value) if b.value is not None else None
    divisor = b.value
    if expr.op not in ("floordiv", "floormod") or divisor is None or divisor <= 0:
        return None
    if any(coeff % divisor for coeff in a.terms.values()):
        return None
    if expr.op == "floormod":
        return Form(a.const % divisor)
    return Form(a.const // divisor, {v: c // divisor for v, c in a.terms.items()})
