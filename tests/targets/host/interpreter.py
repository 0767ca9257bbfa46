"""A small, slow, straightforward interpreter of the IR in Python: the independent reference
the host backend's random tests compare against.

Integers are Python ints wrapped to their dtype after every operation; floats are numpy
scalars of their dtype, so numpy rounds every operation; casts go through numpy's astype.
Nothing here shares code with the backend.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import ir
from ir.dtypes import DType

_POISON_BITS = {"float16": ("uint16", 0x7E00), "bfloat16": ("uint16", 0x7FC0),
                "float32": ("uint32", 0x7FC00000), "float64": ("uint64", 0x7FF8000000000000)}


def _wrap(value: int, dt: DType) -> int:
    """``value`` reduced modulo 2**bits into ``dt``'s range."""
    if dt.is_bool:
        return int(value != 0)
    span = 1 << dt.bits
    value %= span
    if dt.kind == "int" and value >= span // 2:
        value -= span
    return value


def _floor_div(a: int, b: int) -> int:
    return 0 if b == 0 else a // b


def _floor_mod(a: int, b: int) -> int:
    return 0 if b == 0 else a % b


_INT_OPS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "floordiv": _floor_div, "floormod": _floor_mod, "min": min, "max": max,
}
_FLOAT_OPS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "min": np.minimum, "max": np.maximum,
}
_COMPARE = {
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
}
_MATH = {"exp": math.exp, "log": math.log, "sqrt": math.sqrt, "tanh": math.tanh,
         "abs": abs, "erf": math.erf, "sigmoid": lambda x: 1 / (1 + math.exp(-x))}


class Interpreter:
    """Runs one PrimFunc on numpy arrays, in place."""

    def __init__(self, func: ir.PrimFunc) -> None:
        self.func = func
        self.arrays: dict[ir.Buffer, np.ndarray] = {}
        self.env: dict[ir.Var, int] = {}

    def run(self, arrays: list[np.ndarray]) -> None:
        """Execute with one array per parameter."""
        self.arrays = dict(zip(self.func.params, arrays))
        self.stmt(self.func.body)

    # -- statements ------------------------------------------------------------------------

    def stmt(self, node: ir.Stmt) -> None:
        if isinstance(node, ir.SeqStmt):
            for item in node.stmts:
                self.stmt(item)
        elif isinstance(node, ir.For):
            for value in range(node.extent):
                self.env[node.var] = value
                self.stmt(node.body)
        elif isinstance(node, ir.IfThenElse):
            if self.expr(node.cond):
                self.stmt(node.then_case)
            elif node.else_case is not None:
                self.stmt(node.else_case)
        elif isinstance(node, ir.BufferStore):
            value = self.expr(node.value)
            self.arrays[node.buffer][self.indices(node.buffer, node.indices)] = value
        elif isinstance(node, ir.BlockRealize):
            self.realize(node)
        else:
            raise NotImplementedError(type(node).__name__)

    def realize(self, node: ir.BlockRealize) -> None:
        block = node.block
        values = [self.expr(b) for b in node.bindings]
        if not self.expr(node.predicate):
            return
        for buffer in block.alloc_buffers:
            if buffer not in self.arrays:
                self.arrays[buffer] = _poisoned(buffer)
        for iv, value in zip(block.iter_vars, values):
            self.env[iv.var] = value
        reduce_values = [v for iv, v in zip(block.iter_vars, values)
                         if iv.kind is ir.IterKind.REDUCE]
        if block.init is not None and all(v == 0 for v in reduce_values):
            self.stmt(block.init)
        self.stmt(block.body)

    def indices(self, buffer: ir.Buffer, indices: tuple[ir.Expr, ...]) -> tuple[int, ...]:
        found = tuple(int(self.expr(i)) for i in indices)
        for index, extent in zip(found, buffer.shape):
            if not 0 <= index < extent:
                raise IndexError(f"{buffer.name}{list(found)} outside {buffer.shape}")
        return found

    # -- expressions -----------------------------------------------------------------------

    def expr(self, node: ir.Expr) -> Any:
        if isinstance(node, ir.Var):
            return self.env[node]
        if isinstance(node, ir.IntImm):
            return node.value
        if isinstance(node, ir.FloatImm):
            return node.type.numpy.type(node.value)
        if isinstance(node, ir.BufferLoad):
            value = self.arrays[node.buffer][self.indices(node.buffer, node.indices)]
            return _scalar(value, node.buffer.dtype)
        if isinstance(node, ir.Cast):
            return _cast(self.expr(node.value), node.value.dtype, node.type)
        if isinstance(node, ir.Not):
            return int(not self.expr(node.a))
        if isinstance(node, ir.Select):
            cond = self.expr(node.cond)
            true_value, false_value = self.expr(node.true_value), self.expr(node.false_value)
            return true_value if cond else false_value
        if isinstance(node, ir.Call):
            arg = self.expr(node.args[0])
            result = node.args[0].dtype.numpy.type(_MATH[node.name](float(arg)))
            return _cast(result, node.args[0].dtype, node.type)
        if isinstance(node, ir.BinOp):
            return self.binop(node)
        raise NotImplementedError(type(node).__name__)

    def binop(self, node: ir.BinOp) -> Any:
        a, b = self.expr(node.a), self.expr(node.b)
        if node.op == "and":
            return int(bool(a) and bool(b))
        if node.op == "or":
            return int(bool(a) or bool(b))
        if node.op in _COMPARE:
            return int(bool(_COMPARE[node.op](a, b)))
        dt = node.a.dtype
        if dt.is_float:
            with np.errstate(all="ignore"):
                return dt.numpy.type(_FLOAT_OPS[node.op](a, b))
        return _wrap(_INT_OPS[node.op](a, b), dt)


def _scalar(value: Any, dt: DType) -> Any:
    if dt.is_bool:
        return int(bool(value))
    if dt.is_int:
        return int(value)
    return dt.numpy.type(value)


def _cast(value: Any, src: DType, dst: DType) -> Any:
    if src == dst:
        return value
    with np.errstate(all="ignore"):
        converted = np.array(value, dtype=src.numpy).astype(dst.numpy)[()]
    return _scalar(converted, dst)


def _poisoned(buffer: ir.Buffer) -> np.ndarray:
    array = np.zeros(buffer.shape, buffer.dtype.numpy)
    bits, value = _POISON_BITS.get(buffer.dtype.name, ("uint8", 0x5A))
    array.view(bits)[...] = value
    return array

