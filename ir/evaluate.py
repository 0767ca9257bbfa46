"""Evaluating index expressions to Python integers, for code that walks a loop nest
at compile time (the NPU emitter, counting intrinsic calls)."""

from __future__ import annotations

from collections.abc import Mapping

from ir.errors import ExecutionError
from ir.expr import BinOp, Cast, Expr, IntImm, Not, Select, Var

_OPS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b, "floormod": lambda a, b: a % b,
    "min": min, "max": max,
    "eq": lambda a, b: int(a == b), "ne": lambda a, b: int(a != b),
    "lt": lambda a, b: int(a < b), "le": lambda a, b: int(a <= b),
    "gt": lambda a, b: int(a > b), "ge": lambda a, b: int(a >= b),
    "and": lambda a, b: int(bool(a and b)), "or": lambda a, b: int(bool(a or b)),
}


def evaluate(expr: Expr, env: Mapping[Var, int]) -> int:
    """The integer value of an index or predicate expression under ``env``.

    Only what addresses and predicates use is accepted: variables, integer constants,
    arithmetic, comparisons, logic, selects and integer casts.
    """
    if isinstance(expr, Var):
        if expr not in env:
            raise ExecutionError(f"variable {expr.name} has no value here")
        return env[expr]
    if isinstance(expr, IntImm):
        return expr.value
    if isinstance(expr, BinOp) and expr.op in _OPS:
        return _OPS[expr.op](evaluate(expr.a, env), evaluate(expr.b, env))
    if isinstance(expr, Not):
        return int(not evaluate(expr.a, env))
    if isinstance(expr, Select):
        chosen = expr.true_value if evaluate(expr.cond, env) else expr.false_value
        return evaluate(chosen, env)
    if isinstance(expr, Cast) and expr.dtype.is_int:
        return evaluate(expr.value, env)
    raise ExecutionError(f"the NPU backend evaluates only integer index expressions, got {expr}")
