"""Simplification of index expressions under known variable ranges.

The rules, each valid for every value of the variables in their ranges (floor semantics):

======================================  ===========================================
rule                                    condition
======================================  ===========================================
constant folding                        all operands constant (integers wrap)
linear terms merge, ``x - x -> 0``      always (canonical linear form)
``(c*q + r) // c -> q + r // c``        always
``r // c -> k``                         ``r`` in ``[k*c, k*c + c-1]``
``(x // a) // b -> x // (a*b)``         ``a, b > 0``
``(k*q + r) // c -> q // (c/k)``        ``k`` divides ``c``, ``r`` in ``[0, k-1]``
``(k*q + r) % c -> k*(q % (c/k)) + r``  ``k`` divides ``c``, ``r`` in ``[0, k-1]``
``(c*q + r) % c -> r % c``              always
``r % c -> r - k*c``                    ``r`` in ``[k*c, k*c + c-1]``
``(x % a) % b -> x % b``                ``a % b == 0``
``k*c*(x // c) + k*(x % c) -> k*x``     always (undoes split after fuse)
``min/max(a, b) -> a or b``             ``a - b`` has one sign over the ranges
comparison -> True/False                ``a - b`` decides it over the ranges
``select(True/False, a, b)``, logic     constant condition
``v -> c``                              ``v``'s range is the single value ``c``
======================================  ===========================================

Float arithmetic is left alone, so rounding never changes.
"""

from __future__ import annotations

from collections.abc import Mapping

from ir import dtypes
from ir.arith.bound import bound_form
from ir.arith.interval import Interval
from ir.arith.linear import LinearForm, linearize, to_expr
from ir.expr import (BinOp, BufferLoad, Call, Cast, Expr, IntImm, Not, Select, Var)

Ranges = Mapping[Var, Interval]

TRUE = IntImm(1, dtypes.bool_)
FALSE = IntImm(0, dtypes.bool_)


def simplify(expr: Expr, ranges: Ranges | None = None) -> Expr:
    """``expr`` simplified under ``ranges`` (variable -> Interval). Returns the very same
    object when no rule applies, so callers can test ``result is expr``."""
    result = _Simplifier(ranges or {}).visit(expr)
    return expr if result == expr else result


def prove(cond: Expr, ranges: Ranges | None = None) -> bool:
    """True when the bool expression ``cond`` holds for every value in ``ranges``
    (False means "not proven", not "false")."""
    return _is_const(simplify(cond, ranges), 1)


def equal(a: Expr, b: Expr, ranges: Ranges | None = None) -> bool:
    """True when the integer expressions ``a`` and ``b`` are provably equal."""
    ranges = ranges or {}
    simplifier = _Simplifier(ranges)
    diff = simplifier.form(simplifier.visit(a)) - simplifier.form(simplifier.visit(b))
    return bound_form(diff, ranges).is_point and bound_form(diff, ranges).lo == 0


def const_int(expr: Expr) -> int | None:
    """The value of an integer constant expression, or None."""
    folded = simplify(expr)
    if isinstance(folded, IntImm) and not folded.dtype.is_bool:
        return folded.value
    return None


def _is_const(expr: Expr, value: int | None = None) -> bool:
    return isinstance(expr, IntImm) and (value is None or expr.value == value)


def _wrap(value: int, dt: dtypes.DType) -> int:
    span = 1 << dt.bits
    value &= span - 1
    return value - span if dt.min < 0 and value > dt.max else value


class _Simplifier:
    def __init__(self, ranges: Ranges) -> None:
        self.ranges = ranges

    # -- linear forms ------------------------------------------------------------------

    def form(self, expr: Expr) -> LinearForm:
        return _merge_split_pairs(linearize(expr), self.quotient)

    def quotient(self, x: Expr, c: int) -> Expr:
        """``x // c`` in the canonical form the simplifier gives it."""
        return self.div_mod("floordiv", x, c, x.dtype)

    def bound(self, form: LinearForm) -> Interval:
        return bound_form(form, self.ranges)

    def rebuild(self, form: LinearForm, dt: dtypes.DType) -> Expr:
        if not form.is_const and dt.bits < 64:
            # The rebuilt constant must fit the dtype; keep it when it does not.
            if not dt.min <= form.const <= dt.max:
                return to_expr(LinearForm(form.terms), dt) + IntImm(_wrap(form.const, dt), dt)
        return to_expr(LinearForm(form.terms, _wrap(form.const, dt)), dt)

    # -- dispatch ----------------------------------------------------------------------

    def visit(self, expr: Expr) -> Expr:
        if isinstance(expr, BinOp):
            return self.binop(expr)
        if isinstance(expr, Cast):
            value = self.visit(expr.value)
            if _is_const(value) and expr.dtype.is_int and not expr.dtype.is_bool:
                return IntImm(_wrap(value.value, expr.dtype), expr.dtype)
            return expr if value is expr.value else Cast(expr.type, value, expr.loc)
        if isinstance(expr, Select):
            cond = self.visit(expr.cond)
            t, f = self.visit(expr.true_value), self.visit(expr.false_value)
            if _is_const(cond):
                return t if cond.value else f
            return Select(cond, t, f, expr.loc)
        if isinstance(expr, Not):
            a = self.visit(expr.a)
            if _is_const(a):
                return FALSE if a.value else TRUE
            return Not(a, expr.loc)
        if isinstance(expr, Var):
            span = self.ranges.get(expr)
            if span is not None and span.is_point and expr.dtype.is_int:
                return IntImm(span.lo, expr.dtype)  # a variable with one value is that value
            return expr
        if isinstance(expr, BufferLoad):
            return BufferLoad(expr.buffer, tuple(self.visit(i) for i in expr.indices), expr.loc)
        if isinstance(expr, Call):
            return Call(expr.name, tuple(self.visit(a) for a in expr.args), expr.type, expr.loc)
        return expr

    def binop(self, expr: BinOp) -> Expr:
        a, b = self.visit(expr.a), self.visit(expr.b)
        op, dt = expr.op, expr.a.dtype
        if op in ("and", "or"):
            return self.logic(op, a, b, expr)
        if not dt.is_int or dt.is_bool:
            return BinOp(op, a, b, expr.loc)
        if op in ("eq", "ne", "lt", "le", "gt", "ge"):
            return self.compare(op, a, b, expr)
        if op in ("add", "sub", "mul"):
            return self.rebuild(self.form(BinOp(op, a, b)), dt)
        if op in ("min", "max"):
            return self.min_max(op, a, b, expr)
        if isinstance(b, IntImm) and b.value > 0:
            return self.div_mod(op, a, b.value, dt)
        if _is_const(a) and _is_const(b) and b.value != 0:
            value = a.value // b.value if op == "floordiv" else a.value % b.value
            return IntImm(_wrap(value, dt), dt)
        return BinOp(op, a, b, expr.loc)

    def logic(self, op: str, a: Expr, b: Expr, expr: BinOp) -> Expr:
        absorbing, neutral = (0, 1) if op == "and" else (1, 0)
        for x, y in ((a, b), (b, a)):
            if _is_const(x, absorbing):
                return x
            if _is_const(x, neutral):
                return y
        return BinOp(op, a, b, expr.loc)

    def compare(self, op: str, a: Expr, b: Expr, expr: BinOp) -> Expr:
        span = self.bound(self.form(a) - self.form(b))
        lo, hi = span.lo, span.hi
        decided = {
            "eq": (span.is_point and lo == 0, (lo is not None and lo > 0)
                   or (hi is not None and hi < 0)),
            "ne": ((lo is not None and lo > 0) or (hi is not None and hi < 0),
                   span.is_point and lo == 0),
            "lt": (hi is not None and hi < 0, lo is not None and lo >= 0),
            "le": (hi is not None and hi <= 0, lo is not None and lo > 0),
            "gt": (lo is not None and lo > 0, hi is not None and hi <= 0),
            "ge": (lo is not None and lo >= 0, hi is not None and hi < 0),
        }[op]
        if decided[0]:
            return TRUE
        if decided[1]:
            return FALSE
        return BinOp(op, a, b, expr.loc)

    def min_max(self, op: str, a: Expr, b: Expr, expr: BinOp) -> Expr:
        span = self.bound(self.form(a) - self.form(b))
        a_smaller = span.hi is not None and span.hi <= 0
        b_smaller = span.lo is not None and span.lo >= 0
        if a_smaller or b_smaller:
            if op == "min":
                return a if a_smaller else b
            return b if a_smaller else a
        return BinOp(op, a, b, expr.loc)

    def div_mod(self, op: str, a: Expr, c: int, dt: dtypes.DType) -> Expr:
        form = self.form(a)
        # Split off the terms that are exact multiples of c.
        whole = LinearForm(tuple((t, k // c) for t, k in form.terms if k % c == 0),
                           form.const // c)
        rest = LinearForm(tuple((t, k) for t, k in form.terms if k % c != 0), form.const % c)
        span = self.bound(rest)
        if span.is_bounded and span.lo // c == span.hi // c:
            k = span.lo // c
            if op == "floordiv":
                return self.rebuild(whole + LinearForm.of_const(k), dt)
            return self.rebuild(rest - LinearForm.of_const(k * c), dt)
        factored = self.factor_out(op, rest, c, dt)
        if factored is not None:
            if op == "floordiv":
                return self.rebuild(whole + self.form(factored), dt)
            return factored
        nested = _single_atom(rest)
        if op == "floordiv":
            if isinstance(nested, BinOp) and nested.op == "floordiv" and _is_const(nested.b):
                inner = BinOp("floordiv", nested.a, IntImm(nested.b.value * c, dt))
            else:
                inner = BinOp("floordiv", self.rebuild(rest, dt), IntImm(c, dt))
            return self.rebuild(whole + LinearForm.of_atom(inner), dt)
        if (isinstance(nested, BinOp) and nested.op == "floormod" and _is_const(nested.b)
                and nested.b.value % c == 0):
            return self.visit(BinOp("floormod", nested.a, IntImm(c, dt)))
        return BinOp("floormod", self.rebuild(rest, dt), IntImm(c, dt))

    def factor_out(self, op: str, rest: LinearForm, c: int, dt: dtypes.DType) -> Expr | None:
        """``(k*q + r) // c -> q // (c/k)`` and ``(k*q + r) % c -> k*(q % (c/k)) + r`` for a
        divisor k of c with r in [0, k-1] (a split of a fused loop, seen from one tile)."""
        for k in sorted((d for d in range(2, c) if c % d == 0), reverse=True):
            q = LinearForm(tuple((t, v // k) for t, v in rest.terms if v % k == 0))
            r = LinearForm(tuple((t, v) for t, v in rest.terms if v % k != 0), rest.const)
            if q.is_const or not self.bound(r).within(0, k - 1):
                continue
            inner = self.div_mod(op, self.rebuild(q, dt), c // k, dt)
            if op == "floordiv":
                return inner
            return self.rebuild(self.form(inner).scale(k) + r, dt)
        return None


def _single_atom(form: LinearForm) -> Expr | None:
    """The atom when the form is exactly ``1 * atom``."""
    if form.const == 0 and len(form.terms) == 1 and form.terms[0][1] == 1:
        return form.terms[0][0]
    return None


def _merge_split_pairs(form: LinearForm, quotient) -> LinearForm:
    """Replace ``k*c*(x // c) + k*(x % c)`` by ``k*x`` wherever both terms are present.

    ``quotient(x, c)`` gives ``x // c`` in canonical form, so the pair is found however the
    quotient was simplified (``(m // 4) // 2`` is ``m // 8``).
    """
    changed = True
    while changed:
        changed = False
        for atom, coeff in form.terms:
            if not (isinstance(atom, BinOp) and atom.op == "floormod" and _is_const(atom.b)):
                continue
            c = atom.b.value
            partner = linearize(quotient(atom.a, c))
            if len(partner.terms) != 1 or partner.terms[0][1] != 1 or partner.const:
                continue
            partner_atom = partner.terms[0][0]
            if form.coeff(partner_atom) == coeff * c:
                form = form.without(atom).without(partner_atom) + linearize(atom.a).scale(coeff)
                changed = True
                break
    return form
