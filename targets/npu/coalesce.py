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
    rows = 0  # the rows the last instruction of ``out`` has grown to, not yet rebuilt
    for insn in program:
        if out and _continues(out[-1], rows, insn, banks):
            rows += insn.rows
            continue
        if out and rows != getattr(out[-1], "rows", rows):
            out[-1] = dataclasses.replace(out[-1], rows=rows)
        out.append(insn)
        rows = getattr(insn, "rows", 0)
    if out and rows != getattr(out[-1], "rows", rows):
        out[-1] = dataclasses.replace(out[-1], rows=rows)
    return out


def _one_bank(start: int, rows: int, bank_rows: int) -> bool:
    return start // bank_rows == (start + rows - 1) // bank_rows


def _continues(a: Instruction, rows: int, b: Instruction, banks: dict[str, int]) -> bool:
    """True when ``b`` continues ``a`` grown to ``rows`` rows."""
    if type(a) is not type(b) or a.deps != b.deps or not hasattr(a, "rows"):
        return False
    total = rows + b.rows
    if total > MAX_ROWS:
        return False
    if isinstance(a, Gemm):
        return ((b.wgt, b.k, b.reset, b.inp, b.acc) == (a.wgt, a.k, a.reset, a.inp + rows,
                                                        a.acc + rows)
                and _one_bank(a.inp, total, banks["inp"])
                and _one_bank(a.acc, total, banks["acc"]))
    if isinstance(a, Load):
        return ((b.mem, b.cols, b.stride, b.sram, b.dram) == (
            a.mem, a.cols, a.stride, a.sram + rows, a.dram + rows * a.stride)
            and _one_bank(a.sram, total, banks[a.mem.name.lower()]))
    if isinstance(a, Store):
        return ((b.cols, b.stride, b.narrow, b.sram, b.dram) == (
            a.cols, a.stride, a.narrow, a.sram + rows, a.dram + rows * a.stride)
            and _one_bank(a.sram, total, banks["acc"]))
    if isinstance(a, Vec):
        src_next = a.src + rows if a.mode is Operand.TILE else a.src
        return ((b.op, b.mode, b.imm, b.imm2, b.dst, b.src) == (
            a.op, a.mode, a.imm, a.imm2, a.dst + rows, src_next)
            and _one_bank(a.dst, total, banks["acc"]))
    return False
