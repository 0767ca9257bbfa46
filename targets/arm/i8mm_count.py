"""Instructions an i8mm or bf16 kernel executes, counted under unicorn, which executes
neither.

qemu-user runs SMMLA, UMMLA, USMMLA, USDOT, BFDOT and BFMMLA exactly but counts nothing; unicorn
counts every instruction but raises on those. Counting a kernel with each of them replaced by
SDOT on the same registers (the vector form for the vector forms, the by-element form, same
lane, for BFDOT by element) gives its true count: one instruction for one, and no branch of
these kernels depends on the values they compute. The values computed are then wrong, so
exactness is checked separately, under qemu-user (``targets.cpu.run``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

import numpy as np

from targets.arm.unicorn import emulate
from targets.cpu import CpuKernel
from targets.cpu.machine import compile as compile_kernel
from targets.cpu.run import aligned_zeros

__all__ = ["COUNTED_AS_SDOT", "count_i8mm"]

# The features whose instructions are counted as SDOT.
COUNTED_AS_SDOT = frozenset({"i8mm", "bf16"})
# (fixed bits with the registers cleared, their mask, the SDOT of the same register fields):
# SMMLA, UMMLA, USMMLA, USDOT, BFDOT (vector, 128-bit) and BFMMLA as SDOT (vector); BFDOT (by
# element, 128-bit: L, M, Rm and H keep their places) as SDOT (by element).
_VECTOR_MASK, _SDOT_VECTOR = 0xFFE0FC00, 0x4E809400
_SUBSTITUTES = tuple((fixed, _VECTOR_MASK, _SDOT_VECTOR)
                     for fixed in (0x4E80A400, 0x6E80A400, 0x4E80AC00, 0x4E809C00, 0x6E40FC00,
                                   0x6E40EC00)) + ((0x4F40F000, 0xFFC0F400, 0x4F80E000),)


def count_i8mm(kernel: CpuKernel, inputs: Mapping[str, np.ndarray]) -> int:
    """Instructions ``kernel`` executes on ``inputs`` (by buffer name; the others start at
    zero), its i8mm and bf16 instructions counted as SDOT on the same registers."""
    obj = bytearray(compile_kernel(kernel, "obj"))
    offset, size = _text(bytes(obj))
    for at in range(offset, offset + size, 4):
        word, = struct.unpack_from("<I", obj, at)
        for fixed, mask, sdot in _SUBSTITUTES:
            if word & mask == fixed:
                struct.pack_into("<I", obj, at, sdot | word & ~mask & 0xFFFFFFFF)
    arrays = []
    for buffer in kernel.buffers:
        array = aligned_zeros(buffer.shape, buffer.dtype.numpy, kernel.cpu.alignment)
        if buffer.name in inputs:
            array[...] = inputs[buffer.name]
        arrays.append(array)
    return emulate(bytes(obj), kernel.symbol, arrays, kernel.cpu.alignment).instructions


def _text(obj: bytes) -> tuple[int, int]:
    """(offset, size) of the ELF object's .text section."""
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 0x3A)
    names = struct.unpack_from("<IIQQQQ", obj, shoff + shstrndx * shentsize)[4]
    for index in range(shnum):
        name, _, _, _, offset, size = struct.unpack_from("<IIQQQQ", obj, shoff + index * shentsize)
        if obj[names + name:obj.index(b"\0", names + name)] == b".text":
            return offset, size
    raise ValueError("the kernel object has no .text section")
