"""Range (bound) inference: the interval an integer expression's values lie in."""

from __future__ import annotations

from collections.abc import Mapping

from ir.arith.interval import Interval
from ir.arith.linear import LinearForm, linearize
from ir.expr import BinOp, BufferLoad, Cast, Expr, IntImm, Select, Var
from ir.visitor import vars_of

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


def exact_bound(expr: Expr, ranges: Ranges) -> Interval | None:
    """The least and greatest values ``expr`` takes when its variables range independently
    over ``ranges`` (a box), or None when the analysis cannot tell them exactly.

    Unlike :func:`bound`, both ends are reached by some point of the box, so a result past a
    limit proves that some point passes it. Exact are linear forms whose atoms are variables,
    or ``e // c`` and ``e % c`` (constant ``c != 0``) of exact ``e`` (a ``%`` only where ``e``
    does not wrap, or is ``±v + k``, which steps through every integer), no two atoms sharing
    a variable.
    """
    form = linearize(expr)
    total = Interval.point(form.const)
    seen: set[int] = set()
    for atom, coeff in form.terms:
        span = _exact_atom(atom, ranges, seen)
        if span is None:
            return None
        total = total + span.scale(coeff)
    return total


def _exact_atom(atom: Expr, ranges: Ranges, seen: set[int]) -> Interval | None:
    """The exact range of one atom; ``seen`` collects the variables of the atoms so far."""
    if isinstance(atom, Var):
        span = ranges.get(atom)
        if span is None or not span.is_bounded or id(atom) in seen:
            return None
        seen.add(id(atom))
        return span
    if not (isinstance(atom, BinOp) and atom.op in ("floordiv", "floormod")
            and isinstance(atom.b, IntImm) and atom.b.value != 0):
        return None
    inner = exact_bound(atom.a, ranges)
    if inner is None or inner.lo is None or inner.hi is None:
        return None
    for var in vars_of(atom.a):
        if id(var) in seen:
            return None
        seen.add(id(var))
    c = atom.b.value
    ends = (inner.lo // c, inner.hi // c)
    if atom.op == "floordiv":
        return Interval(min(ends), max(ends))  # monotone: the ends map to the ends
    if ends[0] == ends[1]:
        return Interval(inner.lo - c * ends[0], inner.hi - c * ends[0])  # no wrap: a shift
    terms = linearize(atom.a).terms
    if len(terms) == 1 and isinstance(terms[0][0], Var) and abs(terms[0][1]) == 1:
        # Steps through every integer past a multiple of c: every remainder comes up.
        return Interval(0, c - 1) if c > 0 else Interval(c + 1, 0)
    return None


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
