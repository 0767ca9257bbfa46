"""Evaluating index expressions to Python integers, for code that walks a loop nest
at compile time (the NPU emitter, counting intrinsic calls)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ir.errors import ExecutionError
from ir.expr import COMPARE_OPS, BinOp, Cast, Expr, IntImm, Not, Select, Var

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


_PY_OPS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "floormod": "%",
           "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def compile_index(expr: Expr) -> Callable[[Mapping[Var, int]], int]:
    """:func:`evaluate` for one expression evaluated many times: the expression becomes a
    Python function of the environment (compiled once), with the same semantics (Python's
    ``//`` and ``%`` floor as the IR's floordiv and floormod do)."""
    names: dict[Var, str] = {}

    def text(node: Expr) -> str:
        if isinstance(node, Var):
            if node not in names:
                names[node] = f"v{len(names)}"
            return f"env[{names[node]}]"
        if isinstance(node, IntImm):
            return repr(node.value)
        if isinstance(node, BinOp) and node.op in _PY_OPS:
            result = f"({text(node.a)} {_PY_OPS[node.op]} {text(node.b)})"
            return f"int{result}" if node.op in COMPARE_OPS else result
        if isinstance(node, BinOp) and node.op in ("min", "max"):
            return f"{node.op}({text(node.a)}, {text(node.b)})"
        if isinstance(node, BinOp) and node.op in ("and", "or"):
            return f"int(bool({text(node.a)}) {node.op} bool({text(node.b)}))"
        if isinstance(node, Not):
            return f"int(not {text(node.a)})"
        if isinstance(node, Select):
            return f"({text(node.true_value)} if {text(node.cond)} else {text(node.false_value)})"
        if isinstance(node, Cast) and node.dtype.is_int:
            return text(node.value)
        raise ExecutionError(f"the NPU backend evaluates only integer index expressions, "
                             f"got {node}")

    body = text(expr)
    namespace = {name: var for var, name in names.items()}
    return eval(f"lambda env: {body}", namespace)  # noqa: S307 (text built from the IR above)
