"""How each IR dtype is held in LLVM, and conversions that follow the IR's numeric rules.

A value of an IR dtype lives in one LLVM type in registers and maybe another in memory:

============  ============  ==========  =================================================
dtype         register      memory      why
============  ============  ==========  =================================================
bool          i1            i8          numpy stores bools as bytes
int*/uint*    iN            iN          LLVM integers carry no sign; operations pick it
float16       float         half        every operation rounds to half (below)
bfloat16      float         i16         LLVM's bfloat cannot be relied on for arithmetic
float8_*      float         i8          moved and widened only (below)
int4/uint4    i4            i8          one value a byte, in its low nibble, as ml_dtypes
float32/64    float/double  same
============  ============  ==========  =================================================

The 16-bit floats are carried as a float32 that holds a value representable in the 16-bit
type. Each operation computes in float32 and rounds the result back (:func:`round_to`), which
is what numpy does for float16 and ml_dtypes for bfloat16, so results agree bit for bit.
Rounding to bfloat16 is done on the bits, to nearest even, with NaN made quiet as ml_dtypes
does.

The 8-bit floats are storage types here, as on the GPUs whose tensor cores read them: a
value is loaded (decoded exactly to float32), stored back as it was, and converted to wider
types. Rounding a result to one (arithmetic in it, or a cast to it) is refused when the
function is built, with an ExecutionError, rather than rounded some other way than ml_dtypes.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from llvmlite import ir as ll

from ir import dtypes
from ir.dtypes import DType
from ir.errors import ExecutionError

I1 = ll.IntType(1)
I8 = ll.IntType(8)
I16 = ll.IntType(16)
I32 = ll.IntType(32)
I64 = ll.IntType(64)
F16 = ll.HalfType()
F32 = ll.FloatType()
F64 = ll.DoubleType()


def is_signed(dt: DType) -> bool:
    """True when integer operations on ``dt`` treat the top bit as a sign."""
    return dt.kind == "int"


def value_type(dt: DType) -> ll.Type:
    """The LLVM type that holds a value of ``dt`` in registers."""
    if dt.is_bool:
        return I1
    if dt.is_int:
        return ll.IntType(dt.bits)
    if dt.bits == 64:
        return F64
    return F32


def memory_type(dt: DType) -> ll.Type:
    """The LLVM type of one element of a buffer of ``dt`` (the numpy layout)."""
    if dt.is_bool or dt.bits == 4 or (dt.is_float and dt.bits == 8):
        return I8
    if dt == dtypes.float16:
        return F16
    if dt == dtypes.bfloat16:
        return I16
    return value_type(dt)


def constant(dt: DType, value: float) -> ll.Constant:
    """An LLVM constant holding ``value`` converted to ``dt`` (rounded for 16-bit floats)."""
    if dt.is_bool or dt.is_int:
        return ll.Constant(value_type(dt), int(value))
    with np.errstate(over="ignore"):  # a constant beyond the type's range is infinite
        if dt == dtypes.float16:
            value = float(np.float16(value))
        elif dt == dtypes.bfloat16:
            value = float(ml_dtypes.bfloat16(value))
        elif dt == dtypes.float32:
            value = float(np.float32(value))
    return ll.Constant(value_type(dt), float(value))


def from_memory(b: ll.IRBuilder, dt: DType, raw: ll.Value) -> ll.Value:
    """A loaded element turned into its register form."""
    if dt.is_bool:
        return b.icmp_unsigned("!=", raw, ll.Constant(I8, 0))
    if dt == dtypes.float16:
        return b.fpext(raw, F32)
    if dt == dtypes.bfloat16:
        return b.bitcast(b.shl(b.zext(raw, I32), ll.Constant(I32, 16)), F32)
    if dt.is_int and dt.bits == 4:
        return b.trunc(raw, value_type(dt))
    if dt == dtypes.float8_e5m2:
        # e5m2 is the top byte of a binary16, infinities and NaNs included.
        return b.fpext(b.bitcast(b.shl(b.zext(raw, I16), ll.Constant(I16, 8)), F16), F32)
    if dt == dtypes.float8_e4m3:
        return _e4m3_to_float(b, raw)
    return raw


# e4m3's exponent bias (7) against float32's (127): its 7 magnitude bits, placed as the top of
# a float32's exponent-and-fraction field, read 2**(7 - 127) times the value, subnormals too.
_E4M3_SCALE = float(2.0 ** (127 - 7))


def _e4m3_to_float(b: ll.IRBuilder, raw: ll.Value) -> ll.Value:
    """An e4m3 byte decoded exactly; its one NaN pattern per sign (S.1111.111) to a quiet
    NaN of that sign."""
    wide = b.zext(raw, I32)
    magnitude = b.and_(wide, ll.Constant(I32, 0x7F))
    sign = b.shl(b.and_(wide, ll.Constant(I32, 0x80)), ll.Constant(I32, 24))
    small = b.bitcast(b.or_(sign, b.shl(magnitude, ll.Constant(I32, 20))), F32)
    value = b.fmul(small, ll.Constant(F32, _E4M3_SCALE))
    is_nan = b.icmp_unsigned("==", magnitude, ll.Constant(I32, 0x7F))
    signed_nan = b.bitcast(b.or_(sign, ll.Constant(I32, 0x7FC00000)), F32)
    return b.select(is_nan, signed_nan, value)


def _float_to_e4m3(b: ll.IRBuilder, value: ll.Value) -> ll.Value:
    """The inverse of :func:`_e4m3_to_float` for a value e4m3 holds (registers hold only
    those): scaling down is exact, and the bits sit where the decoder put them."""
    bits = b.bitcast(b.fmul(value, ll.Constant(F32, 1.0 / _E4M3_SCALE)), I32)
    magnitude = b.and_(b.lshr(bits, ll.Constant(I32, 20)), ll.Constant(I32, 0x7F))
    is_nan = b.fcmp_unordered("uno", value, value)
    magnitude = b.select(is_nan, ll.Constant(I32, 0x7F), magnitude)
    sign = b.and_(b.lshr(bits, ll.Constant(I32, 24)), ll.Constant(I32, 0x80))
    return b.trunc(b.or_(sign, magnitude), I8)


def to_memory(b: ll.IRBuilder, dt: DType, value: ll.Value) -> ll.Value:
    """A register value turned into its element form; exact, as registers hold rounded values."""
    if dt.is_bool:
        return b.zext(value, I8)
    if dt == dtypes.float16:
        return b.fptrunc(value, F16)
    if dt == dtypes.bfloat16:
        return b.trunc(b.lshr(b.bitcast(value, I32), ll.Constant(I32, 16)), I16)
    if dt.is_int and dt.bits == 4:
        return b.zext(value, I8)
    if dt == dtypes.float8_e5m2:
        return b.trunc(b.lshr(b.bitcast(b.fptrunc(value, F16), I16), ll.Constant(I16, 8)), I8)
    if dt == dtypes.float8_e4m3:
        return _float_to_e4m3(b, value)
    return value


def round_to(b: ll.IRBuilder, dt: DType, value: ll.Value) -> ll.Value:
    """Round a float32 (or, for float64 ``dt``, double) result to ``dt``'s precision."""
    if dt == dtypes.float16:
        return b.fpext(b.fptrunc(value, F16), F32)
    if dt == dtypes.bfloat16:
        return _round_bfloat16(b, value)
    if dt.is_float and dt.bits == 8:
        raise ExecutionError(f"the host executor moves {dt} values and widens them, but does "
                             f"not round results to {dt}")
    return value


def _round_bfloat16(b: ll.IRBuilder, value: ll.Value) -> ll.Value:
    """float32 -> bfloat16 -> float32 with round-to-nearest-even on the bits."""
    bits = b.bitcast(value, I32)
    # Adding 0x7FFF plus the lowest kept bit, then dropping 16 bits, rounds ties to even;
    # a carry out of the mantissa bumps the exponent, overflowing to infinity as it should.
    lowest_kept = b.and_(b.lshr(bits, ll.Constant(I32, 16)), ll.Constant(I32, 1))
    bias = b.add(ll.Constant(I32, 0x7FFF), lowest_kept)
    rounded = b.and_(b.add(bits, bias), ll.Constant(I32, 0xFFFF0000))
    # NaN keeps its sign and becomes the canonical quiet NaN.
    quiet_nan = b.or_(b.and_(bits, ll.Constant(I32, 0x80000000)), ll.Constant(I32, 0x7FC00000))
    is_nan = b.fcmp_unordered("uno", value, value)
    return b.bitcast(b.select(is_nan, quiet_nan, rounded), F32)


def convert(b: ll.IRBuilder, src: DType, dst: DType, value: ll.Value) -> ll.Value:
    """The IR's Cast: integers wrap, float to integer truncates toward zero, results that are
    floats round to nearest even."""
    if src == dst:
        return value
    if dst.is_bool:
        return _to_bool(b, src, value)
    if src.is_bool or src.is_int:
        return _int_to(b, src, dst, value)
    if dst.is_int:
        return _float_to_int(b, dst, value)
    return _float_to_float(b, src, dst, value)


def _to_bool(b: ll.IRBuilder, src: DType, value: ll.Value) -> ll.Value:
    if src.is_float:
        # unordered: NaN is true, as bool(nan) is in Python and numpy.
        return b.fcmp_unordered("!=", value, ll.Constant(value.type, 0.0))
    return b.icmp_unsigned("!=", value, ll.Constant(value.type, 0))


def _int_to(b: ll.IRBuilder, src: DType, dst: DType, value: ll.Value) -> ll.Value:
    signed = is_signed(src)
    if dst.is_int:
        target = value_type(dst)
        if target.width == value.type.width:
            return value
        if target.width < value.type.width:
            return b.trunc(value, target)
        return b.sext(value, target) if signed else b.zext(value, target)
    # To a 16-bit float through float32: exact below 2**24, where every half value lies, and
    # rounding monotonically above it, to values half overflows on anyway; for bfloat16 this
    # rounds twice, as ml_dtypes does.
    target = value_type(dst)
    result = b.sitofp(value, target) if signed else b.uitofp(value, target)
    return round_to(b, dst, result)


def _float_to_int(b: ll.IRBuilder, dst: DType, value: ll.Value) -> ll.Value:
    """Truncate toward zero in a 32- or 64-bit integer, then wrap to ``dst``.

    A value outside that integer's range (or NaN) gives its minimum, as x86's conversion does,
    so results match numpy's on x86 everywhere, not only where the IR defines them.
    """
    width = 64 if dst.bits == 64 or dst == dtypes.uint32 else 32
    wide = ll.IntType(width)
    limit = float(2 ** (width - 1))
    low = b.fcmp_ordered(">=", value, ll.Constant(value.type, -limit))
    high = b.fcmp_ordered("<", value, ll.Constant(value.type, limit))
    in_range = b.and_(low, high)
    # fptosi of an out-of-range value is poison, but select never lets the unchosen arm through.
    truncated = b.select(in_range, b.fptosi(value, wide), ll.Constant(wide, -(1 << (width - 1))))
    return _int_to(b, dtypes.int64 if width == 64 else dtypes.int32, dst, truncated)


def _float_to_float(b: ll.IRBuilder, src: DType, dst: DType, value: ll.Value) -> ll.Value:
    if src.bits == 64:
        if dst == dtypes.float16:
            return round_to(b, dst, _double_to_float_odd(b, value))
        return round_to(b, dst, b.fptrunc(value, F32))
    if dst.bits == 64:
        return b.fpext(value, F64)
    return round_to(b, dst, value)


def _double_to_float_odd(b: ll.IRBuilder, value: ll.Value) -> ll.Value:
    """double -> float rounding to odd: truncate toward zero, and set the last bit if the
    result is inexact.

    Rounding that to half (to nearest even) equals rounding the double to half directly, as
    numpy does, because float32 keeps more than two bits beyond half's precision. LLVM's own
    double -> half conversion is a library call MCJIT cannot resolve on x86.
    """
    nearest = b.fptrunc(value, F32)
    bits = b.bitcast(nearest, I32)
    widened = b.fpext(nearest, F64)
    # Rounding to nearest went away from zero when the result's magnitude exceeds the value's:
    # step the magnitude (the bits, sign aside) back by one.
    away = b.fcmp_ordered(">", b.call(_fabs(b), [widened]), b.call(_fabs(b), [value]))
    toward_zero = b.select(away, b.sub(bits, ll.Constant(I32, 1)), bits)
    inexact = b.fcmp_ordered("!=", widened, value)
    odd = b.select(inexact, b.or_(toward_zero, ll.Constant(I32, 1)), toward_zero)
    return b.bitcast(odd, F32)


def _fabs(b: ll.IRBuilder) -> ll.Function:
    module = b.module
    existing = module.globals.get("llvm.fabs.f64")
    if isinstance(existing, ll.Function):
        return existing
    return ll.Function(module, ll.FunctionType(F64, (F64,)), "llvm.fabs.f64")
