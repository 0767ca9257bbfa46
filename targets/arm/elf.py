"""A loader for the ELF64 relocatable objects LLVM emits for AArch64: lays out the allocated
sections and applies their relocations, so the code can run at a chosen address.

Only the relocations a static, small-code-model kernel uses are applied (page-relative
addresses of constants, low 12 bits, branches and absolute words); any other type is refused
with CpuRunError, never ignored. ``.eh_frame`` (unwind tables) is not loaded, and its
relocations are skipped with it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from targets.cpu.errors import CpuRunError

__all__ = ["Image", "buffer_addresses", "load_object"]

_SHT_SYMTAB, _SHT_RELA, _SHT_NOBITS = 2, 4, 8
_SHF_ALLOC = 2
_SKIPPED = (".eh_frame",)
# R_AARCH64_* numbers (ELF for the Arm 64-bit Architecture, table "Static relocations").
_ABS64 = 257
_ADR_PREL_PG_HI21, _ADD_ABS_LO12_NC = 275, 277
_JUMP26, _CALL26 = 282, 283
# LDST{8,16,32,64,128}_ABS_LO12_NC: the low 12 bits scaled by the access size.
_LDST_SHIFT = {278: 0, 284: 1, 285: 2, 286: 3, 299: 4}


@dataclass(frozen=True)
class Image:
    """Loaded code: ``data`` to place at ``base``, and symbol addresses by name."""

    base: int
    data: bytes
    symbols: dict[str, int]


@dataclass(frozen=True)
class _Section:
    name: str
    kind: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    align: int


def buffer_addresses(arrays: list, alignment: int, at: int) -> list[int]:
    """Where a runner places a kernel's buffers: the address of each array, laid out from
    ``at`` each at a multiple of ``alignment``, and, last, of the status word."""
    found = []
    for array in arrays:
        found.append(at)
        at += -(-max(array.nbytes, 1) // alignment) * alignment
    found.append(at)
    return found


def load_object(obj: bytes, base: int) -> Image:
    """Lay out ``obj``'s allocated sections from ``base`` and relocate them."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        raise CpuRunError("the arm loader requires a little-endian ELF64 object")
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 0x3A)
    sections = []
    for index in range(shnum):
        (_, kind, flags, _, offset, size, link, info, align,
         _) = struct.unpack_from("<IIQQQQIIQQ", obj, shoff + index * shentsize)
        sections.append(_Section("", kind, flags, offset, size, link, info, align))
    names = sections[shstrndx]
    sections = [_Section(_cstring(obj, names.offset + _name_offset(obj, shoff, shentsize, i)),
                         s.kind, s.flags, s.offset, s.size, s.link, s.info, s.align)
                for i, s in enumerate(sections)]
    placed: dict[int, int] = {}
    image = bytearray()
    for index, section in enumerate(sections):
        if not section.flags & _SHF_ALLOC or section.name in _SKIPPED:
            continue
        align = max(section.align, 16)
        image.extend(b"\0" * (-len(image) % align))
        placed[index] = base + len(image)
        if section.kind == _SHT_NOBITS:
            image.extend(b"\0" * section.size)
        else:
            image.extend(obj[section.offset:section.offset + section.size])
    symbols, addresses = _symbols(obj, sections, placed)
    for section in sections:
        if section.kind != _SHT_RELA or section.info not in placed:
            continue
        target = placed[section.info]
        for at in range(section.offset, section.offset + section.size, 24):
            offset, info, addend = struct.unpack_from("<QQq", obj, at)
            symbol = addresses[info >> 32]
            if symbol is None:
                raise CpuRunError(f"the kernel object calls or reads an external symbol "
                                  f"(relocation at {section.name}+{offset:#x}); the arm "
                                  "runner has no library to link")
            _relocate(image, target - base + offset, target + offset, info & 0xFFFFFFFF,
                      symbol + addend)
    return Image(base, bytes(image), symbols)


def _name_offset(obj: bytes, shoff: int, shentsize: int, index: int) -> int:
    return struct.unpack_from("<I", obj, shoff + index * shentsize)[0]


def _cstring(obj: bytes, at: int) -> str:
    return obj[at:obj.index(b"\0", at)].decode()


def _symbols(obj: bytes, sections: list[_Section], placed: dict[int, int]
             ) -> tuple[dict[str, int], list[int | None]]:
    """Named function and object symbols, and every symbol's address (None: undefined or
    in a section not loaded) by index."""
    table = next(s for s in sections if s.kind == _SHT_SYMTAB)
    strings = sections[table.link]
    named: dict[str, int] = {}
    addresses: list[int | None] = []
    for at in range(table.offset, table.offset + table.size, 24):
        name, _, _, shndx, value, _ = struct.unpack_from("<IBBHQQ", obj, at)
        address = placed[shndx] + value if shndx in placed else None
        addresses.append(address)
        if address is not None and name:
            named[_cstring(obj, strings.offset + name)] = address
    return named, addresses


def _relocate(image: bytearray, at: int, place: int, kind: int, value: int) -> None:
    """Apply relocation ``kind`` at ``image[at]`` (address ``place``) for value S + A."""
    if kind == _ABS64:
        struct.pack_into("<Q", image, at, value & (2**64 - 1))
        return
    word, = struct.unpack_from("<I", image, at)
    if kind == _ADR_PREL_PG_HI21:
        pages = ((value & ~0xFFF) - (place & ~0xFFF)) >> 12
        word = (word & 0x9F00001F) | ((pages & 3) << 29) | (((pages >> 2) & 0x7FFFF) << 5)
    elif kind == _ADD_ABS_LO12_NC:
        word = (word & 0xFFC003FF) | ((value & 0xFFF) << 10)
    elif kind in _LDST_SHIFT:
        word = (word & 0xFFC003FF) | (((value & 0xFFF) >> _LDST_SHIFT[kind]) << 10)
    elif kind in (_JUMP26, _CALL26):
        word = (word & 0xFC000000) | (((value - place) >> 2) & 0x3FFFFFF)
    else:
        raise CpuRunError(f"the arm loader does not apply relocation type {kind} (at image "
                          f"offset {at:#x}); it knows ABS64, ADR_PREL_PG_HI21, "
                          "ADD_ABS_LO12_NC, LDST*_ABS_LO12_NC, JUMP26 and CALL26")
    struct.pack_into("<I", image, at, word)
