"""Where every buffer of an NPU program lives: scratchpad rows on chip, bytes in DRAM.

On-chip buffers (scopes ``npu.inp``, ``npu.wgt``, ``npu.acc``) are stored row-major, one
memory row per ``row_elems`` consecutive elements: a whole row (R int8 for inp, C int8 for
wgt, C int32 for acc) when the buffer's last dimension is a multiple of it, else one buffer
row per memory row, the rest of the memory row unused (the tiles of an intrinsic with
k < R or n < C). Each buffer gets two copies when both fit, so that the emitter can alternate
between them (double buffering).

One instruction's rows must lie in one bank, and an instruction walks at most one *slab* of
a buffer: the rows of one index of its dimensions before the last two (a staged tile's
call-wide column block, ``tm`` rows of an input or accumulator tile, ``kb`` of a weight
tile), or the whole buffer when it has two dimensions or fewer. So a copy of at most a
bank's rows never crosses a bank, and a larger copy starts on a bank boundary and spans the
next banks when its slab divides the bank, so that no slab crosses one (:func:`place`).
A larger copy whose slab does not divide the bank (the 208-row blocks of a 196-pixel
layer's tile in 1,024-row banks) lays its slabs out a *stride* apart, the least divisor of
the bank that holds a slab (:func:`slab_stride`: 256 rows for 208), from a row whose slab
ends inside its stride: each slab then lies in one stride-aligned cell of a bank, and a
slab's row address stays affine in the slab's index.
DRAM buffers are laid out one after another, 64-byte aligned.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from intrinsics.runnable import SCOPE_MEMORY, row_layout
from ir.buffer import Buffer
from ir.errors import ExecutionError
from simulator.config import MachineConfig, MemoryConfig, row_width
from simulator.isa import Mem

DRAM_ALIGN = 64


@dataclass(frozen=True, slots=True)
class OnChip:
    """An on-chip buffer: ``copies`` copies of ``rows`` rows, copy c at ``bases[c]``, each
    memory row holding ``row_elems`` consecutive elements of the buffer; its slabs of
    ``slab`` rows lie ``stride`` rows apart (the slab itself but where :func:`slab_stride`
    spreads them)."""

    buffer: Buffer
    mem: Mem
    row_elems: int
    rows: int
    bases: tuple[int, ...]
    slab: int
    stride: int

    def row_of(self, flat: int, copy: int) -> int:
        """The memory row holding flat element ``flat`` of copy ``copy``."""
        row = flat // self.row_elems
        return self.bases[copy] + row // self.slab * self.stride + row % self.slab


@dataclass(frozen=True, slots=True)
class InDram:
    """A buffer in DRAM at byte ``base``, ``nbytes`` long."""

    buffer: Buffer
    base: int
    nbytes: int


def element_bytes(buffer: Buffer) -> int:
    """Bytes per element of ``buffer``."""
    return max(buffer.dtype.bits // 8, 1)


def row_elems(mem: Mem, config: MachineConfig) -> int:
    """Elements per row of an on-chip memory."""
    return row_width(config.array, mem.name.lower())


def _memory(mem: Mem, config: MachineConfig) -> MemoryConfig:
    return {Mem.INP: config.inp, Mem.WGT: config.wgt, Mem.ACC: config.acc}[mem]


def plan_on_chip(buffers: Iterable[Buffer], config: MachineConfig,
                 single: Collection[Buffer] = ()) -> dict[Buffer, OnChip]:
    """Rows for every on-chip buffer; two copies of each (but those in ``single``) where the
    memory has room for all, else one copy of each.

    Raises ExecutionError naming the buffer when a memory cannot hold its buffers.
    """
    by_mem: dict[Mem, list[Buffer]] = {}
    for buffer in buffers:
        by_mem.setdefault(SCOPE_MEMORY[buffer.scope], []).append(buffer)
    plan: dict[Buffer, OnChip] = {}
    for mem, group in by_mem.items():
        width = row_elems(mem, config)
        sizes, slabs, per_row = [], [], []
        for buffer in group:
            layout = row_layout(buffer.shape, width)
            if layout is None:
                raise ExecutionError(
                    f"buffer {buffer.name} in {buffer.scope} requires its last dimension to be "
                    f"a multiple of the {width}-element memory row or at most one row, got "
                    f"shape {buffer.shape}")
            per_row.append(layout[0])
            sizes.append(layout[1])
            slabs.append(slab_rows(buffer.shape, layout[1]))
        memory = _memory(mem, config)
        placed = place_copies(sizes, slabs, [b not in single for b in group], memory)
        if placed is None:
            need = ", ".join(f"{b.name} {s} rows" for b, s in zip(group, sizes))
            raise ExecutionError(
                f"the NPU's {mem.name.lower()} memory ({memory.rows} rows in {memory.banks} "
                f"banks) cannot hold {need}; tile smaller")
        for buffer, elems, size, slab, bases in zip(group, per_row, sizes, slabs, placed):
            stride = slab_stride(size, slab, memory.bank_rows)
            plan[buffer] = OnChip(buffer, mem, elems, size, bases, slab, stride)
    return plan


def slab_rows(shape: tuple[int, ...], rows: int) -> int:
    """Memory rows of one slab (module docs) of a buffer of ``shape`` taking ``rows`` memory
    rows: one index of its dimensions before the last two, the whole buffer when it has two
    dimensions or fewer."""
    return rows // math.prod(shape[:-2])


def slab_stride(size: int, slab: int, bank: int) -> int:
    """Rows from the start of one slab of a copy to the next (module docs): the slab's own
    rows, but for a copy of ``size`` rows larger than a ``bank`` whose ``slab`` does not
    divide it, the least divisor of the bank at least a slab long."""
    if size <= bank or bank % slab == 0 or slab > bank:
        return slab
    return next(d for d in range(slab, bank + 1) if bank % d == 0)


def place(sizes: Sequence[int], slabs: Sequence[int], copies: Sequence[int],
          memory: MemoryConfig) -> list[tuple[int, ...]] | None:
    """Base rows of ``copies[i]`` copies of buffer i (``sizes[i]`` rows in slabs of
    ``slabs[i]`` rows), first fit: a copy of at most a bank never across a bank, a larger
    one from a bank boundary when its slab divides the bank, else with its slabs a
    :func:`slab_stride` apart, each inside its stride (module docs). None when they do not
    fit."""
    bank = memory.bank_rows
    cursor = 0
    result = []
    for size, slab, count in zip(sizes, slabs, copies):
        if slab > bank:
            return None
        stride = slab_stride(size, slab, bank)
        span = (size // slab - 1) * stride + slab
        bases = []
        for _ in range(count):
            if stride != slab:
                if cursor % stride + slab > stride:
                    cursor = -(-cursor // stride) * stride  # the next cell's first row
            elif size > bank or cursor // bank != (cursor + size - 1) // bank:
                cursor = -(-cursor // bank) * bank  # the next bank's first row, or this one
            bases.append(cursor)
            cursor += span
        result.append(tuple(bases))
    return result if cursor <= memory.rows else None


def place_copies(sizes: Sequence[int], slabs: Sequence[int], doubled: Sequence[bool],
                 memory: MemoryConfig) -> list[tuple[int, ...]] | None:
    """The planner's rule for one memory's buffers (:func:`place`'s arguments): two copies
    of each buffer i where ``doubled[i]``, one of the others, where they all fit; else one
    copy of each; None when not even that fits."""
    placed = place(sizes, slabs, [2 if d else 1 for d in doubled], memory)
    return placed if placed is not None else place(sizes, slabs, [1] * len(sizes), memory)


def plan_dram(buffers: Iterable[Buffer]) -> tuple[dict[Buffer, InDram], int]:
    """Byte addresses for DRAM buffers, in order, and the image size."""
    plan: dict[Buffer, InDram] = {}
    cursor = 0
    for buffer in buffers:
        nbytes = buffer.size * element_bytes(buffer)
        plan[buffer] = InDram(buffer, cursor, nbytes)
        cursor += (nbytes + DRAM_ALIGN - 1) // DRAM_ALIGN * DRAM_ALIGN
    return plan, max(cursor, DRAM_ALIGN)
