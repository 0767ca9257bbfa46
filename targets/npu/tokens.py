"""Dependency tokens: ordering the three queues exactly where the data requires it.

Each instruction's reads and writes (rows of inp/wgt/acc, bytes of DRAM) come from its
fields. An instruction depends on the latest earlier instruction of another queue that
writes what it reads or writes, or reads what it writes. Tokens pass only between
neighbouring queues (load <-> compute <-> store) and pair up in order (the n-th pop takes
the n-th push), so for each channel the emitter marks the dependency's source to push and
the dependent to pop, skipping dependencies an earlier pop already covers (queues retire in
order). A dependency between the load and store queues goes through a compute-queue NOP.

Every wait is on an instruction earlier in program order, so the program cannot deadlock
on its tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from simulator.isa import (
    Deps,
    Finish,
    Gemm,
    Instruction,
    Load,
    Mem,
    Nop,
    Operand,
    Queue,
    Requant,
    Store,
    Vec,
    VecOp,
)

DRAM_CHUNK = 64  # DRAM hazards are tracked per 64-byte chunk (conservative, and small)

Access = tuple[str, int, int]  # (memory, first row or chunk, end)
T = TypeVar("T")
_INSTRUCTIONS = (Load, Store, Gemm, Vec, Requant, Nop, Finish)


def accesses(insn: Instruction) -> tuple[list[Access], list[Access]]:
    """(reads, writes) of an instruction, as row ranges of inp/wgt/acc and DRAM chunks."""
    if isinstance(insn, Load):
        mem = insn.mem.name.lower()
        width = 4 if insn.mem is Mem.ACC else 1
        return ([_dram(insn.dram, (insn.rows - 1) * insn.stride + insn.cols * width)],
                [(mem, insn.sram, insn.sram + insn.rows)])
    if isinstance(insn, Store):
        width = 1 if insn.narrow else 4
        return ([("acc", insn.sram, insn.sram + insn.rows)],
                [_dram(insn.dram, (insn.rows - 1) * insn.stride + insn.cols * width)])
    if isinstance(insn, Gemm):
        acc = ("acc", insn.acc, insn.acc + insn.rows)
        return ([("inp", insn.inp, insn.inp + insn.rows), ("wgt", insn.wgt, insn.wgt + insn.k),
                 acc], [acc])
    if isinstance(insn, Vec):
        dst = ("acc", insn.dst, insn.dst + insn.rows)
        reads = [] if insn.op is VecOp.FILL else [dst]
        if insn.mode is Operand.TILE:
            reads.append(("acc", insn.src, insn.src + insn.rows))
        elif insn.mode is Operand.ROW:
            reads.append(("acc", insn.src, insn.src + 1))
        return reads, [dst]
    if isinstance(insn, Requant):
        dst = ("acc", insn.dst, insn.dst + insn.rows)
        scales = [("acc", insn.src, insn.src + 1)] if insn.per_channel else []
        return [dst, *scales], [dst]
    return [], []


def _dram(start: int, nbytes: int) -> Access:
    return ("dram", start // DRAM_CHUNK, (start + nbytes - 1) // DRAM_CHUNK + 1)


class _LastAccess:
    """Per memory and queue, the index of the last instruction that read / wrote each unit."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.write = {m: np.full((3, n), -1, np.int64) for m, n in sizes.items()}
        self.read = {m: np.full((3, n), -1, np.int64) for m, n in sizes.items()}

    def conflict(self, reads: list[Access], writes: list[Access], queue: int) -> list[int]:
        """For each queue, the latest conflicting instruction (-1: none)."""
        latest = [-1, -1, -1]
        for other in range(3):
            if other == queue:
                continue
            for mem, lo, hi in reads:
                latest[other] = max(latest[other], int(self.write[mem][other, lo:hi].max()))
            for mem, lo, hi in writes:
                latest[other] = max(latest[other], int(self.write[mem][other, lo:hi].max()),
                                    int(self.read[mem][other, lo:hi].max()))
        return latest

    def record(self, reads: list[Access], writes: list[Access], queue: int, index: int) -> None:
        for mem, lo, hi in reads:
            self.read[mem][queue, lo:hi] = index
        for mem, lo, hi in writes:
            self.write[mem][queue, lo:hi] = index


def insert_tokens(program: Sequence[Instruction | T], sizes: dict[str, int]
                  ) -> list[Instruction | T]:
    """``program`` with dependency flags set (and NOPs added where the load and store queues
    must wait for each other), ending with FINISH. ``sizes`` gives the rows of inp/wgt/acc
    and the DRAM bytes. Items that are not instructions (the emitter's loop marks) stay in
    place and take part in no hazard."""
    sizes = dict(sizes)
    sizes["dram"] = sizes["dram"] // DRAM_CHUNK + 1
    out: list[Instruction] = []
    flags: list[dict[str, bool]] = []
    last = _LastAccess(sizes)
    covered = {}  # (from queue, to queue) -> highest source index a pop has covered

    def depend(src: int, dst: int) -> None:
        src_q, dst_q = int(out[src].queue), int(out[dst].queue)
        if covered.get((src_q, dst_q), -1) >= src:
            return
        flags[src]["push_next" if dst_q > src_q else "push_prev"] = True
        flags[dst]["pop_prev" if src_q < dst_q else "pop_next"] = True
        covered[(src_q, dst_q)] = src

    for insn in program:
        if not isinstance(insn, _INSTRUCTIONS):
            out.append(insn)
            flags.append({})
            continue
        reads, writes = accesses(insn)
        queue = int(insn.queue)
        latest = last.conflict(reads, writes, queue)
        far = [q for q in range(3) if latest[q] >= 0 and abs(q - queue) == 2]
        if far and covered.get((far[0], queue), -1) < latest[far[0]]:
            # load <-> store: a compute NOP takes the token and passes it on.
            out.append(Nop(Queue.COMPUTE))
            flags.append({})
            depend(latest[far[0]], len(out) - 1)
            covered[(far[0], queue)] = latest[far[0]]
            latest[int(Queue.COMPUTE)] = len(out) - 1
        out.append(insn)
        flags.append({})
        index = len(out) - 1
        for other in range(3):
            if latest[other] >= 0 and abs(other - queue) == 1:
                depend(latest[other], index)
        last.record(reads, writes, queue, index)
    out.append(Finish())
    flags.append({})
    return [insn if not f else dataclasses.replace(insn, deps=Deps(**{**_flags(insn), **f}))
            for insn, f in zip(out, flags)]


def _flags(insn: Instruction) -> dict[str, bool]:
    deps = insn.deps
    return {"pop_prev": deps.pop_prev, "pop_next": deps.pop_next,
            "push_prev": deps.push_prev, "push_next": deps.push_next}
