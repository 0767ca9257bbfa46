"""What each unit computes: exact integer arithmetic, one numpy operation per tile.

Accumulation is int32 with two's-complement wraparound; a float array's (``gemm_float``) is
float32 in the order of k, one rounding per add. Requantisation and narrowing round and
saturate as documented on each function; docs/simulator.md repeats the rules.
"""

from __future__ import annotations

import numpy as np

from simulator.isa import Operand, VecOp

INT8_MIN, INT8_MAX = -128, 127
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
# float32 holds every integer up to 2**24 exactly, so an int8 x int8 dot product of up to
# 2**24 / 128**2 = 1024 terms (and every partial sum) is exact; longer ones use float64.
FLOAT32_EXACT_TERMS = 1024


def dram_rows(dram: np.ndarray, addr: int, rows: int, row_bytes: int,
              stride: int) -> np.ndarray:
    """A (rows, row_bytes) uint8 view of DRAM: row r starts at byte addr + r * stride."""
    if rows == 1 or stride == row_bytes:
        return dram[addr:addr + rows * row_bytes].reshape(rows, row_bytes)
    if stride > row_bytes and addr + rows * stride <= dram.size:
        # The common strided tile, as a slice of a reshape (much cheaper than as_strided).
        return dram[addr:addr + rows * stride].reshape(rows, stride)[:, :row_bytes]
    return np.lib.stride_tricks.as_strided(
        dram[addr:], shape=(rows, row_bytes), strides=(stride, 1))


def dram_extent(addr: int, rows: int, row_bytes: int, stride: int) -> int:
    """One past the last DRAM byte a strided access touches."""
    return addr + (rows - 1) * stride + row_bytes


def matmul_exact(inp: np.ndarray, wgt: np.ndarray) -> np.ndarray:
    """inp (rows x k) @ wgt (k x C), both of int8 values (as int8, or as floats holding them),
    as exact int32, through BLAS floats."""
    kind = np.float32 if inp.shape[1] <= FLOAT32_EXACT_TERMS else np.float64
    return (inp.astype(kind, copy=False) @ wgt.astype(kind, copy=False)).astype(np.int32)


def gemm(acc: np.ndarray, inp: np.ndarray, wgt: np.ndarray, reset: bool) -> None:
    """acc (+)= inp @ wgt in place, int32 with wraparound."""
    product = matmul_exact(inp, wgt)
    if reset:
        acc[...] = product
    else:
        np.add(acc, product, out=acc)


class TileProduct:
    """:func:`gemm` for a run's many small tiles, whose operands are float32 arrays holding
    int8 values (as the simulator's scratchpads keep them): the product and its int32 form
    land in scratch arrays kept per tile shape, not in two new arrays per call (the 4096^3
    GEMM's simulation makes a million products). The same integers: a product of up to
    FLOAT32_EXACT_TERMS terms is exact in float32 and within int32, so it converts exactly,
    and the addition wraps in int32; longer reductions go through :func:`gemm`.
    """

    def __init__(self) -> None:
        self.scratch: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def __call__(self, acc: np.ndarray, inp: np.ndarray, wgt: np.ndarray, reset: bool) -> None:
        """acc (+)= inp @ wgt in place, int32 with wraparound."""
        if inp.shape[1] > FLOAT32_EXACT_TERMS:
            gemm(acc, inp, wgt, reset)
            return
        shape = acc.shape
        buffers = self.scratch.get(shape)
        if buffers is None:
            buffers = self.scratch[shape] = (np.empty(shape, np.float32),
                                             np.empty(shape, np.int32))
        product, whole = buffers
        np.matmul(inp, wgt, out=product)
        if reset:
            np.copyto(acc, product, casting="unsafe")
        else:
            np.copyto(whole, product, casting="unsafe")
            np.add(acc, whole, out=acc)


def gemm_float(acc: np.ndarray, inp: np.ndarray, wgt: np.ndarray, reset: bool) -> None:
    """acc (+)= inp @ wgt in place on a float array: bfloat16 operands (held as float32),
    a float32 accumulator.

    Each PE adds its products in ascending order of k, one at a time, each addition one
    fused multiply-add rounded to nearest even in float32 (the product is exact), denormals
    kept; ``reset`` starts the sum from +0. A product of two 8-bit significands is exact in
    float64, and a sum of it and a float32 (24 bits) rounds from float64 to float32 as one
    rounding would (53 >= 2 * 24 + 2), so float64 then float32 gives the hardware's bits.
    """
    total = np.zeros(acc.shape, np.float32) if reset else acc.astype(np.float32, copy=True)
    # An overflow is IEEE arithmetic (an infinity), not a fault: silence numpy's warning.
    with np.errstate(over="ignore", invalid="ignore"):
        wide_inp = inp.astype(np.float64)
        wide_wgt = wgt.astype(np.float64)
        for k in range(inp.shape[1]):
            products = wide_inp[:, k:k + 1] * wide_wgt[k]
            total = (total.astype(np.float64) + products).astype(np.float32)
    acc[...] = total


def requantise(x: np.ndarray, mult: int, shift: int) -> np.ndarray:
    """round(x * mult / 2**shift), ties away from zero, saturated to int32.

    The product is exact in int64 (|x * mult| <= 2**62); rounding adds 2**(shift-1) to the
    magnitude before the arithmetic shift, which makes -2.5 -> -3 and 2.5 -> 3.
    """
    product = x.astype(np.int64) * mult
    if shift:
        magnitude = (np.abs(product) + (1 << (shift - 1))) >> shift
        product = np.where(product < 0, -magnitude, magnitude)
    return np.clip(product, INT32_MIN, INT32_MAX).astype(np.int32)


# REQUANT clamps the scaled value to +-2**22 before rounding: float32 holds every integer
# there, so rounding is exact, and MLAS's own rounding (adding 1.5 * 2**23) is valid there too.
REQUANT_CLAMP = np.float32(1 << 22)


def requantise_float(x: np.ndarray, scale: np.ndarray | np.float32, zp: int, lo: int,
                     hi: int) -> np.ndarray:
    """``clip(round_half_even(clamp(f32(x) * scale, -2**22, 2**22)) + zp, lo, hi)`` as int32.

    ``scale`` is float32: one value, or one per column (broadcast over the rows). The
    conversion of x and the product each round once to nearest even in float32, as
    onnxruntime's ``MlasRequantizeOutput`` does; for bounds within 2**22 of the zero point
    the result equals its clamp-round-add order exactly.
    """
    value = x.astype(np.float32) * np.asarray(scale, np.float32)
    value = np.clip(value, -REQUANT_CLAMP, REQUANT_CLAMP)
    rounded = np.rint(value).astype(np.int32)
    return np.clip(rounded + np.int32(zp), lo, hi).astype(np.int32)


def fma_f32(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``x * y + z`` of float32 arrays rounded once to float32, as a fused multiply-add: the
    product is exact in float64 (two 24-bit significands), the sum rounds to float64 and
    then to float32. The two roundings agree with one except where the float64 sum lies
    exactly halfway between two float32 values, which takes an exact sum of more than 53
    significant bits (the host's QLinearAdd, ``ir.onnx.host_ops``, rounds the same way)."""
    exact = x.astype(np.float64) * y.astype(np.float64) + z.astype(np.float64)
    return exact.astype(np.float32)


def quantised_add(a: np.ndarray, b: np.ndarray, ratio_a: np.ndarray, ratio_b: np.ndarray,
                  offset: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``clip(round_half_even(fma(f32(a), ratio_a, fma(f32(b), ratio_b, offset))), lo, hi)``
    as int32 (QADD): the float32 ratios and offset one per column, broadcast over the rows.
    Clipping before the conversion keeps every value, however large the ratios, in range."""
    inner = fma_f32(b.astype(np.float32), ratio_b, offset)
    value = fma_f32(a.astype(np.float32), ratio_a, inner)
    return np.clip(np.rint(value), lo, hi).astype(np.int32)


def float_bits(value: float) -> int:
    """The IEEE-754 bits of ``value`` rounded to float32 (an unsigned 32-bit integer)."""
    return int(np.float32(value).view(np.uint32))


def bits_float(bits: int) -> np.float32:
    """The float32 whose IEEE-754 bits are ``bits``."""
    return np.uint32(bits).view(np.float32)


def narrow(x: np.ndarray) -> np.ndarray:
    """int32 -> int8, saturating to [-128, 127]."""
    return np.clip(x, INT8_MIN, INT8_MAX).astype(np.int8)


def vector(op: VecOp, dst: np.ndarray, other: np.ndarray | int, imm2: int) -> None:
    """Apply a vector operation to the acc rows ``dst`` in place.

    ``other`` is the second operand (a tile, a row to broadcast, or the immediate ``imm``);
    ``imm2`` is mulshift's shift and clip's upper bound.
    """
    if op is VecOp.ADD:
        np.add(dst, np.int32(other) if isinstance(other, int) else other, out=dst)
    elif op is VecOp.MIN:
        np.minimum(dst, other, out=dst)
    elif op is VecOp.MAX:
        np.maximum(dst, other, out=dst)
    elif op is VecOp.MULSHIFT:
        dst[...] = requantise(dst, int(other), imm2)
    elif op is VecOp.CLIP:
        np.clip(dst, other, imm2, out=dst)
    elif op is VecOp.FILL:
        dst[...] = other
    else:
        np.maximum(dst, 0, out=dst)


def second_operand(mode: Operand, acc: np.ndarray, src: int, rows: int,
                   imm: int) -> np.ndarray | int:
    """The second operand of a vector op: an acc tile, one acc row, or the immediate."""
    if mode is Operand.TILE:
        return acc[src:src + rows]
    if mode is Operand.ROW:
        return acc[src]
    return imm
