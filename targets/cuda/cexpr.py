"""IR expressions as CUDA C++ expressions, with the IR's exact semantics.

- Integers narrower than ``int`` wrap: every arithmetic result of such a type is cast back
  to it (C++ would otherwise compute in ``int``).
- ``floordiv``/``floormod`` round toward negative infinity (the prelude's ``tz_floordiv``/
  ``tz_floormod``); where both operands are provably non-negative, plain ``/`` and ``%``.
- float16 arithmetic computes in float and rounds to half after every operation, as the
  reference executor does.
- Float constants are written as hexadecimal literals, so they are exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from ir import (BinOp, BufferLoad, Call, Cast, DType, Expr, FloatImm, IntImm, Not, Select, Var,
                dtypes)
from ir.arith import Interval, bound
from targets.cuda.errors import EmitError

__all__ = ["CTYPES", "ExprPrinter", "PRELUDE", "ctype", "device_numpy", "string_literal"]

CTYPES = {
    "bool": "bool", "int8": "signed char", "int16": "short", "int32": "int",
    "int64": "long long", "uint8": "unsigned char", "uint16": "unsigned short",
    "uint32": "unsigned int", "float16": "half", "bfloat16": "__nv_bfloat16",
    "float32": "float", "float64": "double",
    "float8_e4m3": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2",
    "int4": "signed char", "uint4": "unsigned char",
}
# Types the backend stores, moves and converts to wider ones but never computes in: C++ has
# no 4-bit integer (a 4-bit value is held in a byte, below) and CUDA's 8-bit floats convert
# from float with a saturation the host reference does not model.
STORAGE_ONLY = frozenset({"int4", "uint4", "float8_e4m3", "float8_e5m2"})

# Helpers every emitted source starts with (host and device, so the emulation can use them).
PRELUDE = """\
template <class T> __host__ __device__ inline T tz_floordiv(T a, T b) {
  T q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? T(q - 1) : q;
}
template <class T> __host__ __device__ inline T tz_floormod(T a, T b) {
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? T(r + b) : r;
}
template <class T> __host__ __device__ inline T tz_min(T a, T b) { return a < b ? a : b; }
template <class T> __host__ __device__ inline T tz_max(T a, T b) { return a < b ? b : a; }
// An 8-bit float constant from its bits (CUDA's __nv_fp8_* keep them in __x).
template <class T> __host__ __device__ inline T tz_fp8_bits(unsigned char bits) {
  T value;
  value.__x = bits;
  return value;
}
#ifndef TZ_EMULATION
// 16 bytes in one 128-bit load and one 128-bit store; both addresses are 16-byte aligned
// (the backend proves it). The emulation defines its own, which checks that.
__device__ inline void tz_copy16(void* dst, const void* src) {
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}
// 16 bytes a thread computed into registers, stored at once (an epilogue's lanes).
__device__ inline void tz_store16(void* dst, const void* src) {
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}
// Asynchronous 16-byte copies from global to shared memory (sm_80 and later; a plain copy
// before): issued, committed as a group, and complete for this thread after the wait.
__device__ inline void tz_cp_async16(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::
               "r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(__cvta_generic_to_global(src)) : "memory");
#else
  tz_copy16(dst, src);
#endif
}
// The zero-filling forms (a convolution's halo): src's 16 bytes when full, else 16 zeros
// and nothing read (cp.async's src-size operand 0), so src may then point anywhere.
__device__ inline void tz_copy16_zfill(void* dst, const void* src, bool full) {
  *reinterpret_cast<uint4*>(dst) =
      full ? *reinterpret_cast<const uint4*>(src) : make_uint4(0u, 0u, 0u, 0u);
}
__device__ inline void tz_cp_async16_zfill(void* dst, const void* src, bool full) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::
               "r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(__cvta_generic_to_global(src)), "r"(full ? 16u : 0u) : "memory");
#else
  tz_copy16_zfill(dst, src, full);
#endif
}
__device__ inline void tz_cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ inline void tz_cp_async_wait_group() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
#endif
}
#endif
"""

_ARITH = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_LOGIC = {"and": "&&", "or": "||"}
# rintf rounds ties to even in CUDA's (only) rounding mode.
_MATH = {"exp": "expf", "log": "logf", "sqrt": "sqrtf", "tanh": "tanhf", "erf": "erff",
         "rint": "rintf"}


def ctype(dtype: DType) -> str:
    """The C++ type holding values of ``dtype``."""
    return CTYPES[dtype.name]


def device_numpy(dtype: DType) -> np.dtype:
    """The numpy dtype of ``dtype``'s elements in device (and emulated) memory: its own,
    except that a 4-bit integer takes one byte holding its value sign- (or zero-) extended,
    an int8 of -8..7 (a uint8 of 0..15), so that C++ reads the right number. The mma.sync
    family's 4-bit loads pack two such bytes into one, low nibble first, as the tensor cores
    read them (``targets/cuda/ptx.py``)."""
    if dtype.is_int and dtype.bits == 4:
        return np.dtype(np.int8 if dtype.kind == "int" else np.uint8)
    return dtype.numpy


def string_literal(text: str) -> str:
    """``text`` as a C++ string literal of its UTF-8 bytes: ASCII letters, digits, ``_`` and
    spaces as they are, every other byte as a three-digit octal escape (which cannot run into
    the next character, form a trigraph or end a comment). A user's name reaches a report of
    the generated code this way, as the user wrote it."""
    safe = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_ ")
    return '"' + "".join(chr(b) if b in safe else f"\\{b:03o}" for b in text.encode()) + '"'


def _moved(expr: Expr) -> bool:
    """True when ``expr`` only picks a stored value: a load, an integer constant (exact in its
    byte), or a select of such (a padding copy's zeros)."""
    if isinstance(expr, Select):
        return _moved(expr.true_value) and _moved(expr.false_value)
    if isinstance(expr, FloatImm):
        return _fp8_bits(expr) is not None
    return isinstance(expr, (BufferLoad, IntImm))


def _fp8_bits(imm: FloatImm) -> int | None:
    """The bits of an 8-bit float constant, or None when its value does not fit exactly."""
    held = np.array(imm.value, np.float64).astype(imm.dtype.numpy)
    if float(held) != imm.value:
        return None
    return int(held.view(np.uint8))


def _narrow(dtype: DType) -> bool:
    return dtype.is_int and dtype.bits < 32


class ExprPrinter:
    """Prints expressions; ``names`` gives each variable's C++ name, ``address`` the text of
    ``buffer[indices]`` (the backend owns the memory layouts) and ``ranges`` the loop ranges
    used to drop floor-division corrections."""

    def __init__(self, names: Mapping[Var, str], address: Callable[[BufferLoad], str],
                 ranges: Mapping[Var, Interval]):
        self.names = names
        self.address = address
        self.ranges = ranges

    def __call__(self, expr: Expr) -> str:
        """The C++ text of ``expr`` (a value of ``ctype(expr.dtype)``)."""
        method = getattr(self, f"_{type(expr).__name__}", None)
        if expr.dtype.name in STORAGE_ONLY and not _moved(expr):
            raise EmitError(f"the CUDA backend moves {expr.dtype} values and converts them to "
                            f"wider types, but does not compute in {expr.dtype} "
                            f"({type(expr).__name__}); cast the operands up first")
        if method is None:
            raise EmitError(f"expression {type(expr).__name__} has no CUDA form")
        return method(expr)

    def float_of(self, expr: Expr) -> str:
        """``expr`` as a float value when it is float16, else as itself."""
        text = self(expr)
        return f"((float)({text}))" if expr.dtype == dtypes.float16 else text

    def _Var(self, var: Var) -> str:
        if var not in self.names:
            raise EmitError(f"variable {var.name} is used outside its scope")
        return self.names[var]

    def _IntImm(self, imm: IntImm) -> str:
        if imm.dtype.is_bool:
            return "true" if imm.value else "false"
        if imm.dtype == dtypes.int32:
            return str(imm.value) if imm.value != -2**31 else "(-2147483647 - 1)"
        if imm.dtype == dtypes.int64:
            return f"{imm.value}LL" if imm.value != -2**63 else "(-9223372036854775807LL - 1)"
        return f"(({ctype(imm.dtype)})({imm.value}))"

    def _FloatImm(self, imm: FloatImm) -> str:
        if imm.dtype.bits == 8:
            return f"tz_fp8_bits<{ctype(imm.dtype)}>({_fp8_bits(imm)})"
        value = imm.value
        if math.isnan(value):
            text = "(0.0f / 0.0f)"
        elif math.isinf(value):
            text = "(1.0f / 0.0f)" if value > 0 else "(-1.0f / 0.0f)"
        else:
            text = float.hex(value) + ("" if imm.dtype == dtypes.float64 else "f")
        if imm.dtype in (dtypes.float32, dtypes.float64):
            return text
        return f"(({ctype(imm.dtype)})({text}))"

    def _Cast(self, cast: Cast) -> str:
        source, target = cast.value.dtype, cast.dtype
        inner = self(cast.value)
        if source == dtypes.float16 or (target == dtypes.float16 and not source.is_float):
            # Through float: half converts to and from float everywhere, not from every type.
            inner = f"((float)({inner}))"
        if target.is_bool:
            return f"(({inner}) != 0)"
        return f"(({ctype(target)})({inner}))"

    def _Not(self, node: Not) -> str:
        return f"(!{self(node.a)})"

    def _Select(self, node: Select) -> str:
        return f"({self(node.cond)} ? {self(node.true_value)} : {self(node.false_value)})"

    def _BufferLoad(self, load: BufferLoad) -> str:
        return self.address(load)

    def _Call(self, call: Call) -> str:
        args = [self.float_of(a) for a in call.args]
        if call.name in _MATH:
            text = f"{_MATH[call.name]}({args[0]})"
        elif call.name == "sigmoid":
            text = f"(1.0f / (1.0f + expf(-({args[0]}))))"
        elif call.name == "abs":
            if not call.dtype.is_float:
                return f"(({ctype(call.dtype)})(({args[0]}) < 0 ? -({args[0]}) : ({args[0]})))"
            text = f"fabsf({args[0]})"
        else:
            raise EmitError(f"function {call.name} has no CUDA form")
        if call.dtype == dtypes.float64:
            return text
        return text if call.dtype == dtypes.float32 else f"(({ctype(call.dtype)})({text}))"

    def _BinOp(self, node: BinOp) -> str:
        op, dt = node.op, node.a.dtype
        if op in _LOGIC:
            return f"({self(node.a)} {_LOGIC[op]} {self(node.b)})"
        if op in _COMPARE:
            return f"({self.float_of(node.a)} {_COMPARE[op]} {self.float_of(node.b)})"
        a, b = self.float_of(node.a), self.float_of(node.b)
        if op in _ARITH:
            text = f"({a} {_ARITH[op]} {b})"
        elif op in ("min", "max"):
            kind = "float" if dt == dtypes.float16 else ctype(dt)
            text = f"tz_{op}<{kind}>({a}, {b})"
        elif self._non_negative(node.a) and self._non_negative(node.b):
            text = f"({a} {'/' if op == 'floordiv' else '%'} {b})"
        else:
            text = f"tz_{op}<{ctype(dt)}>({a}, {b})"
        if dt == dtypes.float16 or _narrow(dt):
            return f"(({ctype(dt)})({text}))"
        return text

    def _non_negative(self, expr: Expr) -> bool:
        if not expr.dtype.is_int:
            return False
        if expr.dtype.kind == "uint":
            return True
        low = bound(expr, self.ranges).lo
        return low is not None and low >= 0
