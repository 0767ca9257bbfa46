"""Expressions to LLVM IR, with the IR's semantics made explicit where LLVM's differ.

- Integer ``add``/``sub``/``mul`` run in the expression's own width with no overflow flags,
  so they wrap exactly like numpy's fixed-width integers.
- ``floordiv``/``floormod`` round toward negative infinity: LLVM's ``sdiv``/``srem`` truncate,
  so the quotient and remainder are corrected when the remainder's sign differs from the
  divisor's. Division by zero gives 0 and ``MIN // -1`` wraps, as numpy does, instead of
  trapping.
- Float ``min``/``max`` propagate NaN (``llvm.minimum``/``llvm.maximum``), like numpy's
  ``minimum``/``maximum``, so poisoned values stay visible.
- 16-bit floats compute in float32 and round after every operation (:mod:`.numerics`).
- Every buffer access checks each index against its dimension; a failed check stops the
  function and reports the access (:class:`BoundsSite`) instead of touching memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir as ll

from ir.buffer import Buffer
from ir.dtypes import DType
from ir.errors import ExecutionError
from ir.expr import (
    COMPARE_OPS,
    BinOp,
    BufferLoad,
    Call,
    Cast,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Select,
    Var,
)
from targets.host import numerics as nm
from targets.host.numerics import F32, I64

_SIGNED_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
# Ordered comparisons are false on NaN; "ne" is unordered, true on NaN, as in numpy.
_FLOAT_COMPARE = {"eq": ("o", "=="), "ne": ("u", "!="), "lt": ("o", "<"), "le": ("o", "<="),
                  "gt": ("o", ">"), "ge": ("o", ">=")}
# libm names of the math functions LLVM has no intrinsic for, by float width.
_LIBM = {("tanh", 32): "tanhf", ("tanh", 64): "tanh", ("erf", 32): "erff", ("erf", 64): "erf"}
_LLVM_MATH = {"exp": "llvm.exp", "log": "llvm.log", "sqrt": "llvm.sqrt", "abs": "llvm.fabs",
              "rint": "llvm.roundeven"}


@dataclass(frozen=True)
class BoundsSite:
    """One checked buffer access (a ``load`` or a ``store``), for the error message when one
    of its indices is out of range."""

    block: str
    kind: str
    buffer: Buffer
    indices: tuple[Expr, ...]

    def access(self) -> str:
        """The access as the script syntax writes it, ``A[vi, vk + 1]``."""
        return f"{self.buffer.name}[{', '.join(str(i) for i in self.indices)}]"


class ExprEmitter:
    """Emits expressions into ``builder`` for a function whose buffers live at ``pointers``.

    ``env`` maps each variable in scope (loop variables, block iterators) to its LLVM value.
    An out-of-bounds access writes (its site in :attr:`sites` plus one, the dimension, the
    index) to the three int64s at ``status`` and returns from the function.
    """

    def __init__(self, function: ll.Function, builder: ll.IRBuilder,
                 pointers: dict[Buffer, ll.Value], status: ll.Value) -> None:
        self.module: ll.Module = function.module
        self.function = function
        self.b = builder
        self.pointers = pointers
        self.status = status
        self.env: dict[Var, ll.Value] = {}
        self.block_name = "root"
        self.sites: list[BoundsSite] = []
        self._oob: tuple[ll.Block, tuple[ll.PhiInstr, ...]] | None = None

    # -- dispatch --------------------------------------------------------------------------

    def expr(self, node: Expr) -> ll.Value:
        """The LLVM value of ``node`` in its register form (see :mod:`.numerics`)."""
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise ExecutionError(f"the host backend requires expressions it knows, got "
                                 f"{type(node).__name__}")
        return method(node)

    def _Var(self, var: Var) -> ll.Value:
        value = self.env.get(var)
        if value is None:
            raise ExecutionError(f"block {self.block_name!r} uses variable {var.name} outside "
                                 "the loop or block that binds it", var.loc)
        return value

    def _IntImm(self, imm: IntImm) -> ll.Value:
        return nm.constant(imm.type, imm.value)

    def _FloatImm(self, imm: FloatImm) -> ll.Value:
        return nm.constant(imm.type, imm.value)

    def _Cast(self, cast: Cast) -> ll.Value:
        return nm.convert(self.b, cast.value.dtype, cast.type, self.expr(cast.value))

    def _Not(self, node: Not) -> ll.Value:
        return self.b.not_(self.expr(node.a))

    def _Select(self, node: Select) -> ll.Value:
        cond = self.expr(node.cond)
        return self.b.select(cond, self.expr(node.true_value), self.expr(node.false_value))

    def _BufferLoad(self, load: BufferLoad) -> ll.Value:
        address = self.address(load.buffer, load.indices, "load")
        raw = self.b.load(address, typ=nm.memory_type(load.buffer.dtype))
        return nm.from_memory(self.b, load.buffer.dtype, raw)

    # -- operators -------------------------------------------------------------------------

    def _BinOp(self, node: BinOp) -> ll.Value:
        # A chain down the left operands (a + b + c + ...) may be thousands long: emit it in a
        # loop, left operand before right as at every level, recursing only on the right.
        chain = [node]
        while isinstance(chain[-1].a, BinOp):
            chain.append(chain[-1].a)
        value = self.expr(chain[-1].a)
        for link in reversed(chain):
            value = self.binary(link, value, self.expr(link.b))
        return value

    def binary(self, node: BinOp, x: ll.Value, y: ll.Value) -> ll.Value:
        """``node`` applied to the values of its operands, ``x`` and ``y``."""
        b = self.b
        if node.op in ("and", "or"):
            return b.and_(x, y) if node.op == "and" else b.or_(x, y)
        dt = node.a.dtype
        if node.op in COMPARE_OPS:
            return self._compare(node.op, dt, x, y)
        if dt.is_bool:
            raise ExecutionError(f"'{node.op}' requires numeric operands, got bool", node.loc)
        if dt.is_float:
            return nm.round_to(b, dt, self._float_arith(node.op, x, y))
        return self._int_arith(node.op, dt, x, y)

    def _compare(self, op: str, dt: DType, x: ll.Value, y: ll.Value) -> ll.Value:
        if dt.is_float:
            order, symbol = _FLOAT_COMPARE[op]
            if order == "o":
                return self.b.fcmp_ordered(symbol, x, y)
            return self.b.fcmp_unordered(symbol, x, y)
        if nm.is_signed(dt):
            return self.b.icmp_signed(_SIGNED_COMPARE[op], x, y)
        return self.b.icmp_unsigned(_SIGNED_COMPARE[op], x, y)

    def _float_arith(self, op: str, x: ll.Value, y: ll.Value) -> ll.Value:
        b = self.b
        if op == "add":
            return b.fadd(x, y)
        if op == "sub":
            return b.fsub(x, y)
        if op == "mul":
            return b.fmul(x, y)
        if op == "div":
            return b.fdiv(x, y)
        name = "llvm.minimum" if op == "min" else "llvm.maximum"
        return b.call(self.llvm_intrinsic(name, x.type, 2), [x, y])

    def _int_arith(self, op: str, dt: DType, x: ll.Value, y: ll.Value) -> ll.Value:
        b = self.b
        if op == "add":
            return b.add(x, y)
        if op == "sub":
            return b.sub(x, y)
        if op == "mul":
            return b.mul(x, y)
        if op in ("min", "max"):
            symbol = "<" if op == "min" else ">"
            if nm.is_signed(dt):
                return b.select(b.icmp_signed(symbol, x, y), x, y)
            return b.select(b.icmp_unsigned(symbol, x, y), x, y)
        if nm.is_signed(dt):
            quotient, remainder = self._signed_floor_divmod(x, y)
        else:
            quotient, remainder = self._unsigned_divmod(x, y)
        return quotient if op == "floordiv" else remainder

    def _signed_floor_divmod(self, x: ll.Value, y: ll.Value) -> tuple[ll.Value, ll.Value]:
        b = self.b
        ty = x.type
        zero, one, minus_one = ll.Constant(ty, 0), ll.Constant(ty, 1), ll.Constant(ty, -1)
        by_zero = b.icmp_signed("==", y, zero)
        by_minus_one = b.icmp_signed("==", y, minus_one)
        # sdiv by 0 or MIN / -1 is undefined in LLVM: divide by 1 there and fix up below.
        safe = b.select(b.or_(by_zero, by_minus_one), one, y)
        quotient = b.sdiv(x, safe)
        remainder = b.srem(x, safe)
        # Truncation rounded toward zero; step down when the remainder and divisor differ in
        # sign (x = q * y + r with r taking the divisor's sign).
        signs_differ = b.icmp_signed("<", b.xor(remainder, safe), zero)
        adjust = b.and_(b.icmp_signed("!=", remainder, zero), signs_differ)
        quotient = b.sub(quotient, b.zext(adjust, ty))
        remainder = b.add(remainder, b.select(adjust, safe, zero))
        quotient = b.select(by_minus_one, b.sub(zero, x), quotient)
        return b.select(by_zero, zero, quotient), b.select(by_zero, zero, remainder)

    def _unsigned_divmod(self, x: ll.Value, y: ll.Value) -> tuple[ll.Value, ll.Value]:
        b = self.b
        zero = ll.Constant(x.type, 0)
        by_zero = b.icmp_unsigned("==", y, zero)
        safe = b.select(by_zero, ll.Constant(x.type, 1), y)
        quotient = b.select(by_zero, zero, b.udiv(x, safe))
        return quotient, b.select(by_zero, zero, b.urem(x, safe))

    # -- math functions --------------------------------------------------------------------

    def _Call(self, call: Call) -> ll.Value:
        if len(call.args) != 1:
            raise ExecutionError(f"{call.name} requires one argument, got {len(call.args)}",
                                 call.loc)
        arg_dtype = call.args[0].dtype
        x = self.expr(call.args[0])
        if not arg_dtype.is_float:
            if call.name != "abs":
                raise ExecutionError(f"{call.name} requires a float argument, got {arg_dtype}",
                                     call.loc)
            result = self._int_abs(arg_dtype, x)
        else:
            result = nm.round_to(self.b, arg_dtype, self._float_math(call.name, x))
        return nm.convert(self.b, arg_dtype, call.type, result)

    def _int_abs(self, dt: DType, x: ll.Value) -> ll.Value:
        if not nm.is_signed(dt):
            return x
        negative = self.b.icmp_signed("<", x, ll.Constant(x.type, 0))
        return self.b.select(negative, self.b.neg(x), x)

    def _float_math(self, name: str, x: ll.Value) -> ll.Value:
        b = self.b
        if name == "sigmoid":
            one = ll.Constant(x.type, 1.0)
            exp = b.call(self.llvm_intrinsic("llvm.exp", x.type, 1), [b.fneg(x)])
            return b.fdiv(one, b.fadd(one, exp))
        if name in _LLVM_MATH:
            return b.call(self.llvm_intrinsic(_LLVM_MATH[name], x.type, 1), [x])
        width = 32 if x.type == F32 else 64
        return b.call(self.declare(_LIBM[(name, width)], x.type, (x.type,)), [x])

    def llvm_intrinsic(self, name: str, ty: ll.Type, arity: int) -> ll.Function:
        """The LLVM intrinsic ``name`` overloaded on float type ``ty``."""
        suffix = "f32" if ty == F32 else "f64"
        return self.declare(f"{name}.{suffix}", ty, (ty,) * arity)

    def declare(self, name: str, ret: ll.Type, args: tuple[ll.Type, ...]) -> ll.Function:
        """An external function of the module, declared once."""
        existing = self.module.globals.get(name)
        if isinstance(existing, ll.Function):
            return existing
        return ll.Function(self.module, ll.FunctionType(ret, args), name)

    # -- addressing ------------------------------------------------------------------------

    def address(self, buffer: Buffer, indices: tuple[Expr, ...], kind: str) -> ll.Value:
        """A pointer to ``buffer[indices]``, after checking every index against its extent."""
        base = self.pointers.get(buffer)
        if base is None:
            raise ExecutionError(f"block {self.block_name!r} requires buffer {buffer.name} to be "
                                 "a parameter or allocated by an enclosing block")
        site = len(self.sites)
        self.sites.append(BoundsSite(self.block_name, kind, buffer, indices))
        offset: ll.Value | None = None
        for dim, (index, extent, stride) in enumerate(
                zip(indices, buffer.shape, buffer.effective_strides)):
            value = self._index(index)
            self._check_bound(value, extent, site, dim)
            term = value if stride == 1 else self.b.mul(value, ll.Constant(I64, stride))
            offset = term if offset is None else self.b.add(offset, term)
        if offset is None:
            offset = ll.Constant(I64, 0)
        return self.b.gep(base, [offset], source_etype=nm.memory_type(buffer.dtype))

    def _index(self, index: Expr) -> ll.Value:
        value = self.expr(index)
        if value.type.width == 64:
            return value
        if nm.is_signed(index.dtype):
            return self.b.sext(value, I64)
        return self.b.zext(value, I64)

    def _check_bound(self, value: ll.Value, extent: int, site: int, dim: int) -> None:
        b = self.b
        # Unsigned: a negative index reads as a huge one, so one compare checks both ends.
        inside = b.icmp_unsigned("<", value, ll.Constant(I64, extent))
        here = b.block
        fail_block, (site_phi, dim_phi, index_phi) = self._out_of_bounds()
        ok_block = b.append_basic_block("inbounds")
        b.cbranch(inside, ok_block, fail_block)
        site_phi.add_incoming(ll.Constant(I64, site + 1), here)
        dim_phi.add_incoming(ll.Constant(I64, dim), here)
        index_phi.add_incoming(value, here)
        b.position_at_end(ok_block)

    def _out_of_bounds(self) -> tuple[ll.Block, tuple[ll.PhiInstr, ...]]:
        """The block every failed check branches to: it records the failure and returns."""
        if self._oob is None:
            block = self.function.append_basic_block("out_of_bounds")
            fail = ll.IRBuilder(block)
            phis = tuple(fail.phi(I64, name) for name in ("site", "dim", "index"))
            for slot, phi in enumerate(phis):
                fail.store(phi, fail.gep(self.status, [ll.Constant(I64, slot)],
                                         source_etype=I64))
            fail.ret_void()
            self._oob = (block, phis)
        return self._oob
