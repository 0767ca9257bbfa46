"""Range (bound) inference: the interval an integer expression's values lie in."""

from __future__ import annotations

from collections.abc import Mapping

from ir.arith.interval import Interval
from ir.arith.linear import LinearForm, linearize
from ir.expr import BinOp, BufferLoad, Cast, Expr, IntImm, Select, Var

Ranges = Mapping[Var, Interval]


def bound(expr: Expr, ranges: Ranges) -> Interval:
    """The interval holding every value ``expr`` takes when each variable ``v`` ranges over
    ``ranges[v]``. Variables without a range are unbounded. Linear parts are bounded as a
    whole, so ``i - i`` is exactly 0 and ``4 * i + j`` is tight."""
    return bound_form(linearize(expr), ranges)


def bound_form(form: LinearForm, ranges: Ranges) -> Interval:
    """The interval of a linear form's values."""
    total = Interval.point(form.const)
    for atom, coeff in form.terms:
        total = total + _bound_atom(atom, ranges).scale(coeff)
    return total


def _bound_atom(expr: Expr, ranges: Ranges) -> Interval:
    if isinstance(expr, Var):
        return ranges.get(expr, _type_range(expr))
    if isinstance(expr, IntImm):
        return Interval.point(expr.value)
    if isinstance(expr, BinOp) and expr.dtype.is_int and not expr.dtype.is_bool:
        a, b = bound(expr.a, ranges), bound(expr.b, ranges)
        if expr.op == "mul":
            return a * b
        if expr.op == "floordiv":
            return a.floordiv(b)
        if expr.op == "floormod":
            return a.floormod(b)
        if expr.op == "min":
            return a.min(b)
        if expr.op == "max":
            return a.max(b)
        return a + b if expr.op == "add" else a - b
    if isinstance(expr, Select):
        return bound(expr.true_value, ranges).union(bound(expr.false_value, ranges))
    if isinstance(expr, Cast) and expr.dtype.is_int and expr.value.dtype.is_int:
        inner = bound(expr.value, ranges)
        if inner.within(expr.dtype.min, expr.dtype.max):
            return inner
    if isinstance(expr, (BufferLoad, Cast)):
        return _type_range(expr)
    return Interval.everything()


def _type_range(expr: Expr) -> Interval:
    """What the dtype alone allows; wide types count as unbounded."""
    dt = expr.dtype
    if dt.is_int and not dt.is_bool and dt.bits <= 16:
        return Interval(dt.min, dt.max)
    if dt.is_bool:
        return Interval(0, 1)
    return Interval.everything()
