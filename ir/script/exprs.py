"""Expressions of the script syntax: Python AST -> IR expressions.

Shared by kernels (``T.max(a, b)``, ``T.cast(x, "int32")``) and intrinsic semantics
(``max(a, b)``, ``i32(x)``): the two differ only in how names and function calls are spelled,
which subclasses decide in :meth:`ExprParser.resolve_name` and :meth:`ExprParser.function_name`.

Python number literals stay Python values until their context gives them a dtype: the other
operand of an operator, the buffer a store writes, or an index (int32). Without context an int
is int32, a float float32 and a bool is bool.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Callable
from typing import TypeVar

from ir import dtypes
from ir.buffer import Buffer
from ir.dtypes import DType
from ir.errors import IRError, KernelError, SourceLoc
from ir.expr import (
    MATH_FUNCTIONS,
    BinOp,
    BufferLoad,
    Call,
    Cast,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Select,
)
from ir.script.source import SourceText, check_index_depth

Literal = int | float | bool
Value = Expr | Literal
Built = TypeVar("Built")

_BINARY = {ast.Add: ("add", "+"), ast.Sub: ("sub", "-"), ast.Mult: ("mul", "*"),
           ast.Div: ("div", "/"), ast.FloorDiv: ("floordiv", "//"), ast.Mod: ("floormod", "%")}
_COMPARE = {ast.Eq: ("eq", "=="), ast.NotEq: ("ne", "!="), ast.Lt: ("lt", "<"),
            ast.LtE: ("le", "<="), ast.Gt: ("gt", ">"), ast.GtE: ("ge", ">=")}
_SYMBOL = {op: symbol for op, symbol in [*_BINARY.values(), *_COMPARE.values()]}
_SYMBOL.update({"min": "min", "max": "max", "and": "and", "or": "or"})
# The spellings float() reads as infinity or NaN, which have no Python literal.
_NON_FINITE = re.compile(r"\s*[+-]?(inf|infinity|nan)\s*", re.IGNORECASE)
# The longest quotation of the user's source in a message.
_SPELLED = 60


def literal_expr(value: Literal, like: DType | None, loc: SourceLoc | None) -> Expr:
    """An immediate for a Python literal, of dtype ``like`` when the literal can take it."""
    if isinstance(value, bool):
        return IntImm(int(value), dtypes.bool_, loc)
    if isinstance(value, int):
        if like is not None and like.is_float:
            return FloatImm(float(value), like, loc)
        if like is not None and like.is_int:
            return IntImm(value, like, loc)
        return IntImm(value, dtypes.int32, loc)
    if like is not None and like.is_float:
        return FloatImm(float(value), like, loc)
    return FloatImm(float(value), dtypes.float32, loc)


class ExprParser:
    """Translate Python expression ASTs into IR expressions, with the user's positions."""

    #: How calls are written in error messages (``T.`` for kernels, nothing for semantics).
    call_prefix = "T."

    def __init__(self, source: SourceText) -> None:
        self.source = source
        self._functions: dict[str, Callable[[ast.Call, str], Value]] = {
            "cast": self._call_cast, "max": self._call_binary, "min": self._call_binary,
            "floordiv": self._call_binary, "floormod": self._call_binary,
            "if_then_else": self._call_select,
        }
        for name in MATH_FUNCTIONS:
            self._functions[name] = self._call_math

    # -- hooks for the two dialects --------------------------------------------------------

    def resolve_name(self, node: ast.Name) -> Value | Buffer:
        """The Var, Buffer or constant a name stands for; raise KernelError when unknown."""
        raise NotImplementedError

    def function_name(self, node: ast.expr) -> str | None:
        """The script function a call's callee names (``"max"`` for ``T.max``), or None."""
        raise NotImplementedError

    # -- entry points ----------------------------------------------------------------------

    def error(self, node: ast.AST, message: str) -> KernelError:
        """A KernelError at ``node``."""
        return self.source.error(node, message)

    def spelled(self, node: ast.AST) -> str:
        """How ``node`` is written in the source, on one line, cut to ``_SPELLED`` characters
        (a message quotes it; the caret already points at all of it)."""
        text = " ".join(self.source.segment(node).split())
        if not text:
            return _describe(node)
        return text if len(text) <= _SPELLED else text[:_SPELLED - 3] + "..."

    def expr(self, node: ast.expr, like: DType | None = None) -> Expr:
        """Translate ``node``; a bare literal takes dtype ``like`` (or its default)."""
        return self.to_expr(self.value(node), like, node)

    def to_expr(self, value: Value, like: DType | None, node: ast.AST) -> Expr:
        """An Expr for a translated value: literals become immediates located at ``node``."""
        if isinstance(value, Expr):
            return value
        return self.build(node, lambda: literal_expr(value, like, self.source.loc(node)))

    def index(self, node: ast.expr) -> Expr:
        """An integer index expression (literals are int32)."""
        check_index_depth(self.source, node, "an index")
        return self.expr(node, dtypes.int32)

    def condition(self, node: ast.expr) -> Expr:
        """The condition of an if, T.where or T.if_then_else."""
        check_index_depth(self.source, node, "a condition")
        return self.expr(node)

    def build(self, node: ast.AST, make: Callable[[], Built]) -> Built:
        """Run an IR constructor; its IRError becomes a KernelError at ``node``."""
        try:
            return make()
        except IRError as err:
            raise self.error(node, err.message) from None

    def value(self, node: ast.expr) -> Value:
        """Translate ``node`` to an Expr, or to a Python literal when it is one."""
        method = getattr(self, "_visit_" + type(node).__name__, None)
        if method is None:
            raise self.error(node, f"kernels cannot use Python {_describe(node)} here")
        return method(node)

    # -- expression kinds ------------------------------------------------------------------

    def _visit_Constant(self, node: ast.Constant) -> Value:
        if isinstance(node.value, (bool, int, float)):
            return node.value
        raise self.error(node, f"a kernel expression requires a number, got {node.value!r}")

    def _visit_Name(self, node: ast.Name) -> Value:
        found = self.resolve_name(node)
        if isinstance(found, Buffer):
            example = ", ".join(["..."] * found.ndim)
            raise self.error(node, f"buffer {node.id} is used as a value; index it, as in "
                                   f"{node.id}[{example}]")
        return found

    def _visit_UnaryOp(self, node: ast.UnaryOp) -> Value:
        operand = self.value(node.operand)
        if isinstance(node.op, ast.Not):
            a = self.to_expr(operand, None, node.operand)
            return self.build(node, lambda: Not(a, self.source.loc(node)))
        if isinstance(node.op, ast.UAdd):
            return operand
        if isinstance(node.op, ast.USub):
            if isinstance(operand, bool) or not isinstance(operand, (int, float, Expr)):
                raise self.error(node, "unary '-' requires a number")
            if not isinstance(operand, Expr):
                return -operand
            return self.binary("sub", 0, operand, node)
        raise self.error(node, "kernels cannot use the '~' operator")

    def _visit_BinOp(self, node: ast.BinOp) -> Value:
        # ``a + b + c + ...`` is a chain down the left operands, as long as the expression:
        # walk it in a loop rather than recursing once per term.
        chain = [node]
        while isinstance(chain[-1].left, ast.BinOp):
            chain.append(chain[-1].left)
        for link in chain:
            if type(link.op) not in _BINARY:
                raise self.error(link, f"kernels cannot use the Python operator "
                                       f"{type(link.op).__name__}; use + - * / // %")
        result = self.value(chain[-1].left)
        for link in reversed(chain):
            result = self.binary(_BINARY[type(link.op)][0], result, self.value(link.right), link)
        return result

    def _visit_Compare(self, node: ast.Compare) -> Value:
        # Python chains comparisons: a < b < c means a < b and b < c.
        terms = []
        left = self.value(node.left)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            entry = _COMPARE.get(type(op))
            if entry is None:
                raise self.error(node, f"kernels cannot compare with {type(op).__name__}")
            right = self.value(comparator)
            terms.append(self.binary(entry[0], left, right, node))
            left = right
        result = terms[0]
        for term in terms[1:]:
            result = self.binary("and", result, term, node)
        return result

    def _visit_BoolOp(self, node: ast.BoolOp) -> Value:
        op = "and" if isinstance(node.op, ast.And) else "or"
        result = self.expr(node.values[0])
        for operand in node.values[1:]:
            result = self.binary(op, result, self.expr(operand), node)
        return result

    def _visit_IfExp(self, node: ast.IfExp) -> Value:
        return self.select(node, node.test, node.body, node.orelse)

    def _visit_Subscript(self, node: ast.Subscript) -> Value:
        buffer = self.buffer(node.value)
        items = subscript_items(node)
        for item in items:
            if isinstance(item, ast.Slice):
                prefix = self.call_prefix
                raise self.error(item, f"a slice of {buffer.name} is a region, which only "
                                       f"{prefix}reads, {prefix}writes and "
                                       f"{prefix}call_intrinsic take; index one element here")
        indices = tuple(self.index(item) for item in items)
        return self.build(node, lambda: BufferLoad(buffer, indices, self.source.loc(node)))

    def _visit_Call(self, node: ast.Call) -> Value:
        name = self.function_name(node.func)
        if name is None:
            raise self.unknown_function(node)
        if dtypes.is_dtype_name(name):
            return self.convert(node, dtypes.dtype(name))
        handler = self._functions.get(name)
        if handler is None:
            raise self.unknown_function(node)
        return handler(node, name)

    def unknown_function(self, node: ast.Call) -> KernelError:
        """The error for a call of something the script does not define."""
        spelled = self.spelled(node.func)
        known = [self.call_prefix + name for name in self.known_functions()]
        close = difflib.get_close_matches(spelled, known, n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(sorted(known))}"
        return self.error(node.func, f"unknown function {spelled}{hint}")

    def known_functions(self) -> list[str]:
        """Names callable in expressions (dtype names included)."""
        return [*self._functions, *(d.name for d in dtypes.ALL_DTYPES)]

    # -- building blocks -------------------------------------------------------------------

    def buffer(self, node: ast.expr) -> Buffer:
        """The buffer a name denotes."""
        if not isinstance(node, ast.Name):
            raise self.error(node, f"only a buffer can be indexed, got {_describe(node)}")
        found = self.resolve_name(node)
        if not isinstance(found, Buffer):
            raise self.error(node, f"{node.id} is not a buffer, so it cannot be indexed")
        return found

    def binary(self, op: str, a: Value, b: Value, node: ast.AST) -> Expr:
        """``a op b``: a literal takes the dtype of the other operand."""
        left = self.to_expr(a, b.dtype if isinstance(b, Expr) else None, node)
        right = self.to_expr(b, left.dtype, node)
        if op not in ("and", "or") and left.dtype != right.dtype:
            symbol = _SYMBOL[op] if op not in ("min", "max") else self.call_prefix + op
            wider = _wider(left.dtype, right.dtype)
            raise self.error(node, f"'{symbol}' requires operands of one dtype, got "
                                   f"{left.dtype} and {right.dtype}; convert one with "
                                   f"{self.call_prefix}cast(x, \"{wider}\")")
        if op in ("floordiv", "floormod") and isinstance(right, IntImm) and right.value == 0:
            # The backends define x // 0 as 0, as numpy does; written out, it is a mistake.
            raise self.error(node, f"'{_SYMBOL[op]}' requires a nonzero divisor, got 0")
        loc = self.source.loc(node)
        return self.build(node, lambda: BinOp(op, left, right, loc))

    def select(self, node: ast.AST, cond: ast.expr, a: ast.expr, b: ast.expr) -> Expr:
        """``a`` where ``cond`` holds, else ``b``; a literal branch takes the other's dtype."""
        condition = self.condition(cond)
        true_value, false_value = self.value(a), self.value(b)
        left = self.to_expr(true_value,
                            false_value.dtype if isinstance(false_value, Expr) else None, a)
        right = self.to_expr(false_value, left.dtype, b)
        loc = self.source.loc(node)
        return self.build(node, lambda: Select(condition, left, right, loc))

    def convert(self, node: ast.Call, target: DType) -> Value:
        """``T.int32(x)``: an immediate for a literal, a Cast for an expression."""
        (arg,) = self.required_arguments(node, ("value",))
        loc = self.source.loc(node)
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and target.is_float:
            text = arg.value  # "inf", "-inf" and "nan" have no literal
            if not _NON_FINITE.fullmatch(text):
                raise self.error(arg, f"{self.call_prefix}{target.name} takes a string only for "
                                      f"\"inf\", \"-inf\" or \"nan\", got {text!r}")
            return self.build(node, lambda: FloatImm(float(text), target, loc))
        value = self.value(arg)
        if isinstance(value, Expr):
            return Cast(target, value, loc)
        if isinstance(value, float) and not target.is_float:
            raise self.error(node, f"{self.call_prefix}{target.name} requires an integer "
                                   f"literal, got {value!r}")
        return self.build(node, lambda: literal_expr(value, target, loc))

    def arguments(self, node: ast.Call, names: tuple[str, ...],
                  required: int | None = None) -> dict[str, ast.expr]:
        """A call's positional-or-keyword arguments by name; the first ``required`` names
        (all by default) must be given, the others may be absent from the result."""
        required = len(names) if required is None else required
        spelled = self.spelled(node.func)
        if len(node.args) > len(names):
            raise self.error(node, f"{spelled} takes at most {len(names)} arguments "
                                   f"({', '.join(names)}), got {len(node.args)}")
        found = dict(zip(names, node.args, strict=False))
        for keyword in node.keywords:
            if keyword.arg not in names:
                raise self.error(keyword, f"{spelled} has no argument {keyword.arg!r}; its "
                                          f"arguments are {', '.join(names)}")
            if keyword.arg in found:
                raise self.error(keyword, f"{spelled} got argument {keyword.arg!r} twice")
            found[keyword.arg] = keyword.value
        missing = [name for name in names[:required] if name not in found]
        if missing:
            raise self.error(node, f"{spelled} requires argument {missing[0]!r} "
                                   f"({', '.join(names)})")
        return found

    def required_arguments(self, node: ast.Call, names: tuple[str, ...]) -> list[ast.expr]:
        """All the arguments ``names`` of a call, in order; each one must be given."""
        found = self.arguments(node, names)
        return [found[name] for name in names]

    def string(self, node: ast.expr, what: str) -> str:
        """A string literal argument."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        raise self.error(node, f"{what} requires a string literal, got {_describe(node)}")

    def dtype_argument(self, node: ast.expr, what: str) -> DType:
        """A dtype named by a string literal (``"int32"``)."""
        name = self.string(node, what)
        if not dtypes.is_dtype_name(name):
            known = ", ".join(d.name for d in dtypes.ALL_DTYPES)
            raise self.error(node, f"{what} requires a dtype name, got {name!r}; known: {known}")
        return dtypes.dtype(name)

    # -- functions -------------------------------------------------------------------------

    def _call_cast(self, node: ast.Call, name: str) -> Value:
        value_node, dtype_node = self.required_arguments(node, ("value", "dtype"))
        target = self.dtype_argument(dtype_node, f"{self.call_prefix}{name}")
        return Cast(target, self.expr(value_node), self.source.loc(node))

    def _call_binary(self, node: ast.Call, name: str) -> Value:
        a, b = self.required_arguments(node, ("a", "b"))
        return self.binary(name, self.value(a), self.value(b), node)

    def _call_select(self, node: ast.Call, name: str) -> Value:
        cond, a, b = self.required_arguments(node, ("cond", "true_value", "false_value"))
        return self.select(node, cond, a, b)

    def _call_math(self, node: ast.Call, name: str) -> Value:
        args = self.arguments(node, ("x", "dtype"), required=1)
        arg = self.expr(args["x"])
        result = arg.dtype
        if "dtype" in args:
            result = self.dtype_argument(args["dtype"], f"{self.call_prefix}{name}")
        if not arg.dtype.is_float:
            raise self.error(node, f"{self.call_prefix}{name} requires a float argument, got "
                                   f"{arg.dtype}; convert it with "
                                   f"{self.call_prefix}cast(x, \"float32\")")
        loc = self.source.loc(node)
        return self.build(node, lambda: Call(name, (arg,), result, loc))


def subscript_items(node: ast.Subscript) -> list[ast.expr]:
    """The comma-separated items of ``X[a, b:c]``."""
    if isinstance(node.slice, ast.Tuple):
        return list(node.slice.elts)
    return [node.slice]


def _wider(a: DType, b: DType) -> str:
    if a.is_float != b.is_float:
        return (a if a.is_float else b).name
    return (a if a.bits >= b.bits else b).name


def _describe(node: ast.AST | None) -> str:
    if node is None:
        return "nothing"
    names = {ast.Lambda: "lambda", ast.ListComp: "list comprehension", ast.Dict: "dict",
             ast.List: "list", ast.Tuple: "tuple", ast.Attribute: "attribute access",
             ast.Constant: "constant", ast.Starred: "starred expression"}
    return names.get(type(node), type(node).__name__)
