"""Expressions: values computed from variables, immediates and buffer loads.

Python operators build expressions (``a + b``, ``a * 2``, ``a // 4``, ``a < b``); ``==`` is
left as value equality, so use :func:`eq` / :func:`ne` to build comparisons.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Union

from ir import dtypes
from ir.dtypes import DType
from ir.errors import IRError
from ir.node import LocT, Node, loc_field

if TYPE_CHECKING:
    from ir.buffer import Buffer

ARITH_OPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "min", "max")
COMPARE_OPS = ("eq", "ne", "lt", "le", "gt", "ge")
LOGIC_OPS = ("and", "or")
BINARY_OPS = ARITH_OPS + COMPARE_OPS + LOGIC_OPS

# Pure math functions a kernel may call; the executor and backends know each one.
# ``rint`` rounds to the nearest integer, ties to even (IEEE 754 roundTiesToEven), and keeps
# the float type: what requantisation needs, where a cast to an integer truncates.
MATH_FUNCTIONS = ("exp", "log", "sqrt", "tanh", "sigmoid", "abs", "erf", "rint")


class Expr(Node):
    """Base of expressions. ``dtype`` is the expression's result type."""

    __slots__ = ()

    @property
    def dtype(self) -> DType:
        raise NotImplementedError

    def __add__(self, other: ExprLike) -> Expr:
        return binop("add", self, other)

    def __radd__(self, other: ExprLike) -> Expr:
        return binop("add", other, self)

    def __sub__(self, other: ExprLike) -> Expr:
        return binop("sub", self, other)

    def __rsub__(self, other: ExprLike) -> Expr:
        return binop("sub", other, self)

    def __mul__(self, other: ExprLike) -> Expr:
        return binop("mul", self, other)

    def __rmul__(self, other: ExprLike) -> Expr:
        return binop("mul", other, self)

    def __truediv__(self, other: ExprLike) -> Expr:
        return binop("div", self, other)

    def __rtruediv__(self, other: ExprLike) -> Expr:
        return binop("div", other, self)

    def __floordiv__(self, other: ExprLike) -> Expr:
        return binop("floordiv", self, other)

    def __rfloordiv__(self, other: ExprLike) -> Expr:
        return binop("floordiv", other, self)

    def __mod__(self, other: ExprLike) -> Expr:
        return binop("floormod", self, other)

    def __rmod__(self, other: ExprLike) -> Expr:
        return binop("floormod", other, self)

    def __neg__(self) -> Expr:
        return binop("sub", zero_like(self), self)

    def __lt__(self, other: ExprLike) -> Expr:
        return binop("lt", self, other)

    def __le__(self, other: ExprLike) -> Expr:
        return binop("le", self, other)

    def __gt__(self, other: ExprLike) -> Expr:
        return binop("gt", self, other)

    def __ge__(self, other: ExprLike) -> Expr:
        return binop("ge", self, other)


ExprLike = Union[Expr, int, float, bool]


@dataclass(frozen=True, slots=True, eq=False)
class Var(Expr):
    """A variable: an identity with a name hint. Two Vars are equal only if they are one object.

    Loop variables and block iterators are Vars (int32 unless stated).
    """

    name: str
    type: DType = dtypes.int32
    loc: LocT = loc_field()

    @property
    def dtype(self) -> DType:
        return self.type

    def __repr__(self) -> str:
        return f"Var({self.name}@{id(self) & 0xFFFF:x})"


@dataclass(frozen=True, slots=True)
class IntImm(Expr):
    """An integer (or bool) constant of a given dtype."""

    value: int
    type: DType = dtypes.int32
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        # numpy and bool values become plain ints, so equal constants compare and hash equal.
        object.__setattr__(self, "value", int(self.value))
        if not (self.type.is_int or self.type.is_bool):
            raise IRError(f"IntImm requires an integer dtype, got {self.type}", self.loc)
        if not self.type.min <= self.value <= self.type.max:
            raise IRError(f"constant {self.value} does not fit in {self.type} "
                          f"[{self.type.min}, {self.type.max}]", self.loc)

    @property
    def dtype(self) -> DType:
        return self.type


@dataclass(frozen=True, slots=True)
class FloatImm(Expr):
    """A floating-point constant of a given dtype."""

    value: float
    type: DType = dtypes.float32
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", float(self.value))
        if not self.type.is_float:
            raise IRError(f"FloatImm requires a float dtype, got {self.type}", self.loc)

    @property
    def dtype(self) -> DType:
        return self.type


@dataclass(frozen=True, slots=True)
class Cast(Expr):
    """Convert ``value`` to ``type``: integers wrap, floats round to nearest even,
    float to integer truncates toward zero."""

    type: DType
    value: Expr
    loc: LocT = loc_field()

    @property
    def dtype(self) -> DType:
        return self.type


@dataclass(frozen=True, slots=True)
class BinOp(Expr):
    """A binary operation. ``op`` is one of :data:`BINARY_OPS`.

    Arithmetic requires both operands to have one dtype and yields it; integer ``add``,
    ``sub`` and ``mul`` wrap. ``div`` is float division only; integers use ``floordiv`` and
    ``floormod`` (rounding toward negative infinity). Comparisons and logic yield bool.
    """

    op: str
    a: Expr
    b: Expr
    loc: LocT = loc_field()
    # The result dtype, found once here: reading it through ``a`` each time would walk a whole
    # chain (a + b + c + ...). Not a child, and not part of equality.
    result_type: DType = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.op not in BINARY_OPS:
            raise IRError(f"unknown binary operator {self.op!r}", self.loc)
        yields_bool = self.op in COMPARE_OPS or self.op in LOGIC_OPS
        object.__setattr__(self, "result_type", dtypes.bool_ if yields_bool else self.a.dtype)
        if self.op in LOGIC_OPS:
            if not (self.a.dtype.is_bool and self.b.dtype.is_bool):
                raise IRError(f"'{self.op}' requires bool operands, got {self.a.dtype} and "
                              f"{self.b.dtype}", self.loc)
            return
        if self.a.dtype != self.b.dtype:
            raise IRError(f"'{self.op}' requires operands of one dtype, got {self.a.dtype} and "
                          f"{self.b.dtype}; add a cast", self.loc)
        if self.op == "div" and not self.a.dtype.is_float:
            raise IRError(f"'/' requires float operands, got {self.a.dtype}; use '//' for "
                          "integer floor division", self.loc)
        if self.op in ("floordiv", "floormod") and not self.a.dtype.is_int:
            raise IRError(f"'{self.op}' requires integer operands, got {self.a.dtype}",
                          self.loc)

    @property
    def dtype(self) -> DType:
        return self.result_type

    # Equality and hashing as the dataclass would define them (op, a, b), but following the
    # chain of left operands in a loop rather than recursing once per operator.
    def __eq__(self, other: object) -> bool:
        if type(other) is not BinOp:
            return NotImplemented
        mine: Expr = self
        theirs: Expr = other
        while type(mine) is BinOp and type(theirs) is BinOp:
            if mine.op != theirs.op or mine.b != theirs.b:
                return False
            mine, theirs = mine.a, theirs.a
        return mine == theirs

    def __hash__(self) -> int:
        links = []
        node: Expr = self
        while type(node) is BinOp:
            links.append((node.op, node.b))
            node = node.a
        return hash((node, tuple(links)))


@dataclass(frozen=True, slots=True)
class Not(Expr):
    """Logical negation of a bool expression."""

    a: Expr
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        if not self.a.dtype.is_bool:
            raise IRError(f"'not' requires a bool operand, got {self.a.dtype}", self.loc)

    @property
    def dtype(self) -> DType:
        return dtypes.bool_


@dataclass(frozen=True, slots=True)
class Select(Expr):
    """``true_value`` where ``cond`` holds, else ``false_value`` (both evaluated)."""

    cond: Expr
    true_value: Expr
    false_value: Expr
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        if not self.cond.dtype.is_bool:
            raise IRError(f"select requires a bool condition, got {self.cond.dtype}", self.loc)
        if self.true_value.dtype != self.false_value.dtype:
            raise IRError(f"select requires both values of one dtype, got "
                          f"{self.true_value.dtype} and {self.false_value.dtype}", self.loc)

    @property
    def dtype(self) -> DType:
        return self.true_value.dtype


@dataclass(frozen=True, slots=True)
class BufferLoad(Expr):
    """Read ``buffer[indices]``; one integer index per dimension."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        check_indices(self.buffer, self.indices, self.loc)

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype


@dataclass(frozen=True, slots=True)
class Call(Expr):
    """A pure math function (one of :data:`MATH_FUNCTIONS`) applied to float arguments."""

    name: str
    args: tuple[Expr, ...]
    type: DType
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        if self.name not in MATH_FUNCTIONS:
            raise IRError(f"unknown function {self.name!r}; known: {', '.join(MATH_FUNCTIONS)}",
                          self.loc)

    @property
    def dtype(self) -> DType:
        return self.type


def check_indices(buffer: Buffer, indices: tuple[Expr, ...], loc: LocT) -> None:
    """Raise IRError unless ``indices`` has one integer index per dimension of ``buffer``."""
    if len(indices) != len(buffer.shape):
        raise IRError(f"buffer {buffer.name} has {len(buffer.shape)} dimensions but is indexed "
                      f"with {len(indices)}", loc)
    for index in indices:
        if not index.dtype.is_int:
            raise IRError(f"index into {buffer.name} requires an integer, got {index.dtype}", loc)


def as_expr(value: ExprLike, like: DType | None = None) -> Expr:
    """Turn a Python number into an immediate (of dtype ``like`` if given); pass Exprs through."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool):
        return IntImm(int(value), dtypes.bool_)
    if isinstance(value, int):
        if like is not None and like.is_float:
            return FloatImm(float(value), like)
        return IntImm(value, like if like is not None and like.is_int else dtypes.int32)
    if isinstance(value, float):
        return FloatImm(value, like if like is not None and like.is_float else dtypes.float32)
    raise IRError(f"cannot use {type(value).__name__} value {value!r} as an expression")


def binop(op: str, a: ExprLike, b: ExprLike, loc: LocT = None) -> Expr:
    """Build ``a op b``; a Python number takes the dtype of the other operand."""
    if isinstance(a, Expr):
        b = as_expr(b, a.dtype)
    elif isinstance(b, Expr):
        a = as_expr(a, b.dtype)
    else:
        a, b = as_expr(a), as_expr(b)
    return BinOp(op, a, b, loc)


def zero_like(e: Expr) -> Expr:
    """The constant 0 of ``e``'s dtype."""
    return FloatImm(0.0, e.dtype) if e.dtype.is_float else IntImm(0, e.dtype)


def const(value: int | float, dt: DType | str) -> Expr:
    """An immediate of the given dtype."""
    dt = dtypes.dtype(dt)
    if dt.is_float:
        return FloatImm(float(value), dt)
    return IntImm(int(value), dt)


def cast(dt: DType | str, value: ExprLike) -> Expr:
    """Convert ``value`` to ``dt``; no node when it already has that dtype."""
    dt = dtypes.dtype(dt)
    value = as_expr(value, dt)
    if value.dtype == dt:
        return value
    return Cast(dt, value)


def eq(a: ExprLike, b: ExprLike) -> Expr:
    """``a == b`` as an expression."""
    return binop("eq", a, b)


def ne(a: ExprLike, b: ExprLike) -> Expr:
    """``a != b`` as an expression."""
    return binop("ne", a, b)


def min_(a: ExprLike, b: ExprLike) -> Expr:
    """``min(a, b)``."""
    return binop("min", a, b)


def max_(a: ExprLike, b: ExprLike) -> Expr:
    """``max(a, b)``."""
    return binop("max", a, b)


def and_(a: Expr, b: Expr) -> Expr:
    """Logical and."""
    return BinOp("and", a, b)


def or_(a: Expr, b: Expr) -> Expr:
    """Logical or."""
    return BinOp("or", a, b)


def select(cond: Expr, true_value: ExprLike, false_value: ExprLike) -> Expr:
    """``cond ? true_value : false_value``."""
    if isinstance(true_value, Expr):
        false_value = as_expr(false_value, true_value.dtype)
    elif isinstance(false_value, Expr):
        true_value = as_expr(true_value, false_value.dtype)
    return Select(cond, as_expr(true_value), as_expr(false_value))
