"""AArch64 object code run in-process under unicorn (an AArch64 emulator: QEMU's CPU core as
a library), on any host: the CPU code generator's ``unicorn`` engine.

The object is loaded (:mod:`.elf`), the buffers, a stack and a stop address are mapped, and
the function runs from its symbol with X0.. pointing at the buffers and LR at the stop
address. Each executed basic block adds its length in instructions (4 bytes each) and its
dot-product (and FMLAL) instructions by mnemonic, decoded once per block, so a run reports
exactly what the core executed at the cost of one callback per block.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass

import numpy as np

from targets.arm.elf import buffer_addresses, load_object
from targets.cpu.errors import CpuRunError

__all__ = ["Emulated", "emulate"]

_CODE, _DATA, _STACK, _STOP = 0x10_0000, 0x1000_0000, 0x7F00_0000, 0x0F00_0000
_STACK_SIZE, _PAGE = 1 << 20, 1 << 12
# SDOT/UDOT (vector) and SDOT/UDOT (by element): fixed bits of the encodings, Q free; the U
# bit (29) tells UDOT from SDOT.
_DOT_PATTERNS = ((0x9FE0FC00, 0x0E809400), (0x9FC0F400, 0x0F80E000))
_U_BIT = 1 << 29
# FMLAL (by element, FEAT_FHM): its fixed bits, Q free (U 0 and opcode 0000: not FMLAL2).
_FMLAL = (0xBFC0F400, 0x0F800000)


@dataclass(frozen=True)
class Emulated:
    """What a run left: every buffer's contents (in the order given), the bounds-check
    status (three int64s), the instructions executed and the SDOT/UDOT among them, and
    ``blocks``: how often each basic block ran, by ``(offset from the function's symbol,
    size in bytes)`` (where the instructions went: packing, k loop, stores)."""

    arrays: list[np.ndarray]
    status: bytes
    instructions: int
    counted: dict[str, int]
    blocks: dict[tuple[int, int], int]


def emulate(obj: bytes, symbol: str, arrays: list[np.ndarray], alignment: int) -> Emulated:
    """Run function ``symbol`` of ELF object ``obj`` on ``arrays`` (each placed at a multiple
    of ``alignment`` bytes) and a status word; CpuRunError on a fault."""
    from unicorn import UC_ARCH_ARM64, UC_HOOK_BLOCK, UC_MODE_ARM, Uc, UcError
    from unicorn import arm64_const as regs

    image = load_object(obj, _CODE)
    uc = Uc(UC_ARCH_ARM64, UC_MODE_ARM)
    uc.ctl_set_cpu_model(regs.UC_CPU_ARM64_MAX)
    uc.reg_write(regs.UC_ARM64_REG_CPACR_EL1, 3 << 20)  # FP/SIMD on at EL0 and EL1
    uc.mem_map(_CODE, _round(len(image.data)))
    uc.mem_write(_CODE, image.data)
    uc.mem_map(_STOP, _PAGE)
    uc.mem_map(_STACK, _STACK_SIZE)
    *addresses, status = buffer_addresses(arrays, alignment, _DATA)
    uc.mem_map(_DATA, _round(status + 24 - _DATA))
    for address, array in zip(addresses, arrays):
        uc.mem_write(address, np.ascontiguousarray(array).tobytes())
    args = [*addresses, status]
    for index, value in enumerate(args[:8]):
        uc.reg_write(getattr(regs, f"UC_ARM64_REG_X{index}"), value)
    # AAPCS64: arguments past the eighth go on the stack, 8 bytes each, from SP upwards.
    stacked = args[8:]
    sp = _STACK + _STACK_SIZE - 16 - -(-len(stacked) * 8 // 16) * 16
    uc.mem_write(sp, struct.pack(f"<{len(stacked)}Q", *stacked))
    uc.reg_write(regs.UC_ARM64_REG_SP, sp)
    uc.reg_write(regs.UC_ARM64_REG_LR, _STOP)
    blocks: Counter[tuple[int, int]] = Counter()
    uc.hook_add(UC_HOOK_BLOCK, lambda _uc, address, size, _data:
                blocks.update(((address, size),)))
    try:
        uc.emu_start(image.symbols[symbol], _STOP)
    except UcError as err:
        raise CpuRunError(f"{symbol} stopped under the emulator at "
                          f"{uc.reg_read(regs.UC_ARM64_REG_PC):#x}: {err}") from None
    instructions = sum(size // 4 * n for (_, size), n in blocks.items())
    counted: Counter[str] = Counter()
    for (address, size), n in blocks.items():
        for mnemonic, found in _dots(bytes(uc.mem_read(address, size))).items():
            counted[mnemonic] += found * n
    results = []
    for address, array in zip(addresses, arrays):
        raw = bytes(uc.mem_read(address, array.nbytes))
        results.append(np.frombuffer(raw, array.dtype).reshape(array.shape).copy())
    entry = image.symbols[symbol]
    return Emulated(results, bytes(uc.mem_read(status, 24)), instructions, dict(counted),
                    {(address - entry, size): n for (address, size), n in blocks.items()})


def _dots(code: bytes) -> Counter[str]:
    words = struct.unpack(f"<{len(code) // 4}I", code[:len(code) // 4 * 4])
    found = Counter("udot" if w & _U_BIT else "sdot" for w in words
                    for mask, bits in _DOT_PATTERNS if w & mask == bits)
    found.update("fmlal" for w in words if w & _FMLAL[0] == _FMLAL[1])
    return found


def _round(size: int) -> int:
    return -(-size // _PAGE) * _PAGE
