"""Merging neighbouring instructions that continue each other into one taller instruction.

Intrinsics describe 16-row tiles, but the machine's instructions take any number of rows: a
GEMM over 64 rows preloads its weights once instead of four times, and a DMA of 64 rows is
one request instead of four. Two instructions merge only when they are adjacent in program
order (so no other instruction's ordering changes), do the same thing on continuing rows,
and the merged rows stay inside one bank. Anything else in the stream (the emitter's loop
marks) is kept in place, and nothing merges across it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TypeVar

from simulator.config import MachineConfig
from simulator.isa import Gemm, Instruction, Load, Operand, QAdd, Requant, Store, Vec

MAX_ROWS = (1 << 16) - 1
_MERGEABLE = (Gemm, Load, Store, Vec, Requant, QAdd)
_Mergeable = Gemm | Load | Store | Vec | Requant | QAdd
T = TypeVar("T")


def bank_rows(config: MachineConfig) -> dict[str, int]:
    """Rows per bank of each on-chip memory."""
    return {"inp": config.inp.bank_rows, "wgt": config.wgt.bank_rows,
            "acc": config.acc.bank_rows}


def coalesce(program: Sequence[Instruction | T], config: MachineConfig
             ) -> list[Instruction | T]:
    """``program`` with runs of continuing instructions merged."""
    banks = bank_rows(config)
    out: list[Instruction | T] = []
    rows = 0  # the rows the last instruction of ``out`` has grown to, not yet rebuilt
    for insn in program:
        last = out[-1] if out else None
        if isinstance(last, _MERGEABLE) and isinstance(insn, _MERGEABLE) \
                and continues(last, rows, insn, banks):
            rows += insn.rows
            continue
        _rebuild(out, rows)
        out.append(insn)
        rows = insn.rows if isinstance(insn, _MERGEABLE) else 0
    _rebuild(out, rows)
    return out


def _rebuild(out: list, rows: int) -> None:
    """Give the last instruction of ``out`` the rows it has grown to."""
    if out and isinstance(out[-1], _MERGEABLE) and out[-1].rows != rows:
        out[-1] = dataclasses.replace(out[-1], rows=rows)


def _one_bank(start: int, rows: int, bank: int) -> bool:
    return start // bank == (start + rows - 1) // bank


def continues(a: _Mergeable, rows: int, b: Instruction,
              banks: dict[str, int]) -> bool:
    """True when ``b`` continues ``a`` grown to ``rows`` rows, within one bank."""
    if type(a) is not type(b) or a.deps != b.deps:
        return False
    if isinstance(a, Gemm):
        follows = (b.wgt, b.k, b.reset, b.inp, b.acc) == (a.wgt, a.k, a.reset, a.inp + rows,
                                                          a.acc + rows)
    elif isinstance(a, Load):
        follows = (b.mem, b.widen, b.cols, b.stride, b.sram, b.dram) == (
            a.mem, a.widen, a.cols, a.stride, a.sram + rows, a.dram + rows * a.stride)
    elif isinstance(a, Store):
        follows = (b.cols, b.stride, b.narrow, b.sram, b.dram) == (
            a.cols, a.stride, a.narrow, a.sram + rows, a.dram + rows * a.stride)
    elif isinstance(a, Requant):
        # The scale row (or immediate) is the same for every row of the tile.
        follows = (b.per_channel, b.scale, b.src, b.zp, b.lo, b.hi, b.dst) == (
            a.per_channel, a.scale, a.src, a.zp, a.lo, a.hi, a.dst + rows)
    elif isinstance(a, QAdd):
        # The parameter rows are the same for every row of the tile; the second tile's
        # rows continue with the first's.
        follows = (b.par, b.lo, b.hi, b.dst, b.src) == (a.par, a.lo, a.hi, a.dst + rows,
                                                          a.src + rows)
    else:
        src_next = a.src + rows if a.mode is Operand.TILE else a.src
        follows = (b.op, b.mode, b.imm, b.imm2, b.dst, b.src) == (
            a.op, a.mode, a.imm, a.imm2, a.dst + rows, src_next)
    return follows and _fits(a, rows + b.rows, banks)  # type: ignore[union-attr]


def _fits(a: _Mergeable, total: int, banks: dict[str, int]) -> bool:
    """True when ``a`` grown to ``total`` rows stays within the instruction's row limit and
    one bank of each memory whose rows it walks."""
    if total > MAX_ROWS:
        return False
    if isinstance(a, Gemm):
        return _one_bank(a.inp, total, banks["inp"]) and _one_bank(a.acc, total, banks["acc"])
    if isinstance(a, Load):
        return _one_bank(a.sram, total, banks[a.mem.name.lower()])
    if isinstance(a, Store):
        return _one_bank(a.sram, total, banks["acc"])
    if isinstance(a, QAdd):
        return _one_bank(a.dst, total, banks["acc"]) and _one_bank(a.src, total, banks["acc"])
    return _one_bank(a.dst, total, banks["acc"])


def merged(insn: Instruction, next_insn: Instruction, count: int, banks: dict[str, int]
           ) -> Instruction | None:
    """The one instruction ``count`` instructions make, each continuing the one before as
    ``next_insn`` continues ``insn``; None when they do not merge."""
    if not isinstance(insn, _MERGEABLE) or not continues(insn, insn.rows, next_insn, banks) \
            or not _fits(insn, insn.rows * count, banks):
        return None
    return dataclasses.replace(insn, rows=insn.rows * count)
