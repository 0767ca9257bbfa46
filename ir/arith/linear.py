"""Canonical linear forms of integer index expressions.

A :class:`LinearForm` is ``const + sum(coeff * atom)``. Atoms are variables or sub-expressions
that are not linear (``x // 4``, ``x % 4``, ``min(a, b)``, loads); they are compared by value,
so ``i // 4`` written twice is one atom. Two expressions with equal forms are equal for every
value of their variables.
"""

from __future__ import annotations

from dataclasses import dataclass

from ir import dtypes
from ir.dtypes import DType
from ir.expr import BinOp, Expr, IntImm, Var


@dataclass(frozen=True, slots=True)
class LinearForm:
    """``const + sum(coeff * atom for atom, coeff in terms)``; no zero coefficients, each atom
    once, in order of first appearance."""

    terms: tuple[tuple[Expr, int], ...]
    const: int = 0

    @staticmethod
    def of_const(value: int) -> LinearForm:
        """The form of a constant."""
        return LinearForm((), value)

    @staticmethod
    def of_atom(atom: Expr, coeff: int = 1) -> LinearForm:
        """The form ``coeff * atom``."""
        return LinearForm(((atom, coeff),) if coeff else (), 0)

    @property
    def is_const(self) -> bool:
        """True when no atom remains."""
        return not self.terms

    def coeff(self, atom: Expr) -> int:
        """The coefficient of ``atom`` (0 when absent)."""
        for a, c in self.terms:
            if _same_atom(a, atom):
                return c
        return 0

    def __add__(self, other: LinearForm) -> LinearForm:
        merged: list[list] = [[a, c] for a, c in self.terms]
        for atom, coeff in other.terms:
            for entry in merged:
                if _same_atom(entry[0], atom):
                    entry[1] += coeff
                    break
            else:
                merged.append([atom, coeff])
        return LinearForm(tuple((a, c) for a, c in merged if c), self.const + other.const)

    def scale(self, factor: int) -> LinearForm:
        """Every coefficient and the constant multiplied by ``factor``."""
        if factor == 0:
            return LinearForm.of_const(0)
        return LinearForm(tuple((a, c * factor) for a, c in self.terms), self.const * factor)

    def __neg__(self) -> LinearForm:
        return self.scale(-1)

    def __sub__(self, other: LinearForm) -> LinearForm:
        return self + (-other)

    def without(self, atom: Expr) -> LinearForm:
        """The form with ``atom``'s term removed."""
        return LinearForm(tuple((a, c) for a, c in self.terms if not _same_atom(a, atom)),
                          self.const)

    def vars(self) -> list[Var]:
        """The atoms that are plain variables."""
        return [a for a, _ in self.terms if isinstance(a, Var)]


def _same_atom(a: Expr, b: Expr) -> bool:
    # Vars compare by identity; other atoms by value (dataclass equality, locations ignored).
    if isinstance(a, Var) or isinstance(b, Var):
        return a is b
    return a == b


def linearize(expr: Expr) -> LinearForm:
    """The linear form of an integer expression; non-linear parts become atoms.

    The walk keeps its own stack, so an index as long as a kernel may write (thousands of
    terms) takes no recursion.
    """
    forms: list[LinearForm] = []
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, operands_done = stack.pop()
        if not _is_linear_op(node):
            forms.append(_leaf_form(node))
        elif not operands_done:
            stack.extend(((node, True), (node.b, False), (node.a, False)))
        else:
            b = forms.pop()
            a = forms.pop()
            forms.append(_combine(node, a, b))
    return forms[0]


def _is_linear_op(expr: Expr) -> bool:
    return (isinstance(expr, BinOp) and expr.op in ("add", "sub", "mul") and expr.dtype.is_int
            and not expr.dtype.is_bool)


def _leaf_form(expr: Expr) -> LinearForm:
    if isinstance(expr, IntImm) and not expr.dtype.is_bool:
        return LinearForm.of_const(expr.value)
    return LinearForm.of_atom(expr)


def _combine(node: BinOp, a: LinearForm, b: LinearForm) -> LinearForm:
    """The form of ``node`` from its operands' forms; a product of two non-constants is an
    atom."""
    if node.op == "add":
        return a + b
    if node.op == "sub":
        return a - b
    if b.is_const:
        return a.scale(b.const)
    if a.is_const:
        return b.scale(a.const)
    return LinearForm.of_atom(node)


def to_expr(form: LinearForm, dtype: DType = dtypes.int32) -> Expr:
    """Rebuild an expression from a form: ``i * 4 + j - 1`` style, terms in form order."""
    result: Expr | None = None
    for atom, coeff in form.terms:
        magnitude = abs(coeff)
        term = atom if magnitude == 1 else BinOp("mul", atom, IntImm(magnitude, dtype))
        if result is None:
            result = term if coeff > 0 else BinOp("mul", atom, IntImm(coeff, dtype))
        else:
            result = BinOp("add" if coeff > 0 else "sub", result, term)
    if result is None:
        return IntImm(form.const, dtype)
    if form.const > 0:
        return BinOp("add", result, IntImm(form.const, dtype))
    if form.const < 0:
        return BinOp("sub", result, IntImm(-form.const, dtype))
    return result


def is_affine(expr: Expr) -> bool:
    """True for quasi-affine integer expressions of variables: sums of constant multiples of
    variables, and floor division / modulo of such by positive constants (the forms that
    split and fuse produce)."""
    # A sum is a chain down its left operands: follow it in a loop, recursing on the rest.
    while (isinstance(expr, BinOp) and expr.op in ("add", "sub") and expr.dtype.is_int
           and not expr.dtype.is_bool):
        if not is_affine(expr.b):
            return False
        expr = expr.a
    if isinstance(expr, (Var, IntImm)):
        return expr.dtype.is_int and not expr.dtype.is_bool
    if not isinstance(expr, BinOp) or not expr.dtype.is_int or expr.dtype.is_bool:
        return False
    if expr.op == "mul":
        return ((is_affine(expr.a) and _is_const(expr.b))
                or (_is_const(expr.a) and is_affine(expr.b)))
    if expr.op in ("floordiv", "floormod"):
        return is_affine(expr.a) and _is_const(expr.b) and expr.b.value > 0
    return False


def _is_const(expr: Expr) -> bool:
    return isinstance(expr, IntImm) and not expr.dtype.is_bool
