"""Merging neighbouring instructions that continue each other into one taller instruction.

Intrinsics describe 16-row tiles, but the machine's instructions take any number of rows: a
GEMM over 64 rows preloads its weights once instead of four times, and a DMA of 64 rows is
one request instead of four. Two instructions merge only when they are adjacent in program
order (so no other instruction's ordering changes), do the same thing on continuing rows,
and the merged rows stay inside one bank.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from simulator.config import MachineConfig
from simulator.isa import Gemm, Instruction, Load, Operand, Store, Vec

MAX_ROWS = (1 << 16) - 1


def coalesce(program: Sequence[Instruction], config: MachineConfig) -> list[Instruction]:
    """``program`` with runs of continuing instructions merged."""
    banks = {"inp": config.inp.bank_rows, "wgt": config.wgt.bank_rows,
             "acc": config.acc.bank_rows}
    out: list[Instruction] = []
    for insn in program:
        merged = _merge(out[-1], insn, banks) if out else None
        if merged is not None:
            out[-1] = merged
        else:
            out.append(insn)
    return out


def _one_bank(start: int, rows: int, bank_rows: int) -> bool:
    return start // bank_rows == (start + rows - 1) // bank_rows


def _merge(a: Instruction, b: Instruction, banks: dict[str, int]) -> Instruction | None:
    if type(a) is not type(b) or a.deps != b.deps:
        return None
    rows = a.rows + b.rows if hasattr(a, "rows") else 0
    if rows > MAX_ROWS:
        return None
    if isinstance(a, Gemm):
        if (b.wgt, b.k, b.reset, b.inp, b.acc) == (a.wgt, a.k, a.reset, a.inp + a.rows,
                                                   a.acc + a.rows) \
                and _one_bank(a.inp, rows, banks["inp"]) and _one_bank(a.acc, rows, banks["acc"]):
            return dataclasses.replace(a, rows=rows)
        return None
    if isinstance(a, Load):
        mem = a.mem.name.lower()
        if (b.mem, b.cols, b.stride, b.sram, b.dram) == (
                a.mem, a.cols, a.stride, a.sram + a.rows, a.dram + a.rows * a.stride) \
                and _one_bank(a.sram, rows, banks[mem]):
            return dataclasses.replace(a, rows=rows)
        return None
    if isinstance(a, Store):
        if (b.cols, b.stride, b.narrow, b.sram, b.dram) == (
                a.cols, a.stride, a.narrow, a.sram + a.rows, a.dram + a.rows * a.stride) \
                and _one_bank(a.sram, rows, banks["acc"]):
            return dataclasses.replace(a, rows=rows)
        return None
    if isinstance(a, Vec):
        src_next = a.src + a.rows if a.mode is Operand.TILE else a.src
        if (b.op, b.mode, b.imm, b.imm2, b.dst, b.src) == (
                a.op, a.mode, a.imm, a.imm2, a.dst + a.rows, src_next) \
                and _one_bank(a.dst, rows, banks["acc"]):
            return dataclasses.replace(a, rows=rows)
        return None
    return None


