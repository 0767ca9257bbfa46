"""Reading ``cuobjdump -sass`` text: instructions, the k loop, and whether the tensor pipe
drains at its barriers.

A multistage k loop keeps the tensor cores busy across ``__syncthreads()`` only when the
first MMA after each ``BAR.SYNC`` reads fragments loaded *before* the barrier; when it reads
a register that an ``LDSM`` (``ldmatrix``) issued after the barrier writes, it waits for
that shared-memory load, and every warp's MMAs stop at every step (a *drain*).
:func:`barrier_drains` decides that from the register dataflow of the SASS alone, so it
is checked on hand-written snippets as well as on what ptxas made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["BarrierDrains", "Instruction", "barrier_drains", "instructions", "k_loop",
           "MMA_OPCODES"]

MMA_OPCODES = ("HMMA", "IMMA", "QMMA", "HGMMA", "IGMMA", "QGMMA", "DMMA", "BMMA")

# /*0960*/   @!P0 IMMA.16816.S8.S8 R24, R12.reuse.ROW, R10.COL, RZ ;
_INSTRUCTION = re.compile(r"/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_BRANCH_TARGET = re.compile(r"0x([0-9a-f]+)")
_REGISTER = re.compile(r"\bR(\d+)\b")
# HMMA.16816.F32: m16 n8 k16; IMMA.16832.S8.S8: m16 n8 k32; HMMA.1688.F32.TF32: m16 n8 k8.
_SHAPE = re.compile(r"\.(16)(8)(\d+)\b")
# An MMA operand we cannot size (another opcode or shape) is taken as 4 registers wide:
# wide enough for any m16n8 fragment, so a dependence is never missed.
_WIDEST = 4


@dataclass(frozen=True, slots=True)
class Instruction:
    """One SASS instruction: its ``address``, ``opcode`` with modifiers (``HMMA.16816.F32``)
    and ``operands`` text."""

    address: int
    opcode: str
    operands: str

    @property
    def is_mma(self) -> bool:
        """Whether it is a tensor-core instruction."""
        return self.opcode.startswith(MMA_OPCODES)


@dataclass(frozen=True, slots=True)
class BarrierDrains:
    """One function's barriers in its k loop (``barriers``: how many ``BAR.SYNC``), and the
    addresses of those after which the first MMA reads a register an ``LDSM`` issued after
    the barrier writes (``drained``)."""

    kernel: str
    barriers: int
    drained: tuple[int, ...]

    @property
    def drains(self) -> bool:
        """Whether the tensor pipe drains at any barrier of the k loop."""
        return bool(self.drained)

    def describe(self) -> str:
        """One phrase: "no drain at its 4 barriers", or "drains at 4 of 4 barriers"."""
        if not self.barriers:
            return "no barrier in its k loop"
        if not self.drained:
            return f"no drain at its {self.barriers} barrier(s)"
        return (f"drains at {len(self.drained)} of {self.barriers} barrier(s) (its first MMA "
                "waits for an LDSM issued after BAR.SYNC)")


def instructions(body: str) -> list[Instruction]:
    """The instructions of one function's ``cuobjdump -sass`` text, in address order."""
    return [Instruction(int(m[1], 16), m[2], m[3]) for m in _INSTRUCTION.finditer(body)]


def k_loop(code: list[Instruction]) -> tuple[int, int] | None:
    """(first, last address) of the innermost loop holding an MMA (a backward ``BRA``
    around it), or None when no loop holds one (nvcc unrolled the k loop). Code after the
    last ``EXIT`` is out of line (an mbarrier poll's retry, branching back into the loop it
    left): its branches close no loop."""
    out_of_line = max((i.address for i in code if i.opcode == "EXIT"), default=1 << 62)
    holding = []
    for branch in code:
        target = _BRANCH_TARGET.search(branch.operands)
        if branch.opcode != "BRA" or target is None:
            continue
        start = int(target[1], 16)
        if start < branch.address < out_of_line and any(
                i.is_mma and start <= i.address <= branch.address for i in code):
            holding.append((branch.address - start, start, branch.address))
    return min(holding)[1:] if holding else None


def barrier_drains(kernel: str, body: str) -> BarrierDrains:
    """Whether the first MMA after each ``BAR.SYNC`` of the k loop of function ``kernel``
    (its ``cuobjdump -sass`` text ``body``; the whole function when nvcc unrolled the loop)
    reads a register written by an ``LDSM`` between the barrier and it. The walk from a
    barrier follows program order, round the loop's back edge, and stops at the next
    barrier: a stretch with no MMA does not drain. Where nvcc unrolled the k loop whole,
    every barrier of the function counts, the one before the first step's fragment loads
    (which nothing can overlap) included."""
    code = instructions(body)
    bounds = k_loop(code)
    if bounds is not None:
        code = [i for i in code if bounds[0] <= i.address <= bounds[1]]
    barriers = [n for n, i in enumerate(code) if i.opcode.startswith("BAR.SYNC")]
    drained = []
    for n in barriers:
        after = code[n + 1:] + (code[:n] if bounds is not None else [])
        if _first_mma_waits(after):
            drained.append(code[n].address)
    return BarrierDrains(kernel, len(barriers), tuple(drained))


def _first_mma_waits(after: list[Instruction]) -> bool:
    loaded: set[int] = set()
    for instruction in after:
        if instruction.opcode.startswith("BAR.SYNC"):
            return False
        if instruction.opcode.startswith("LDSM"):
            loaded |= _written_by_ldsm(instruction)
        elif instruction.is_mma:
            return bool(loaded & _read_by_mma(instruction))
    return False


def _written_by_ldsm(instruction: Instruction) -> set[int]:
    """``LDSM.16.M88.4 R132, [...]`` writes R132..R135 (``.2``: two, no count: one)."""
    first = _REGISTER.search(instruction.operands.split(",")[0])
    if first is None:
        return set()
    last = instruction.opcode.rsplit(".", 1)[-1]
    count = int(last) if last in ("2", "4") else 1
    return set(range(int(first[1]), int(first[1]) + count))


def _read_by_mma(instruction: Instruction) -> set[int]:
    """The registers an MMA reads: its A, B and C operands, each as wide as the shape and
    input type make it (``HMMA.16816.F32 R80, R156, R140, R80``: A R156..R159, B R140..R141,
    C R80..R83)."""
    widths = _operand_widths(instruction.opcode)
    read: set[int] = set()
    for operand, width in zip(instruction.operands.split(",")[1:4], widths):
        register = _REGISTER.search(operand)
        if register is not None:
            read |= set(range(int(register[1]), int(register[1]) + width))
    return read


def _operand_widths(opcode: str) -> tuple[int, int, int]:
    """Registers per lane of A, B and C of an m16n8kK MMA: A is 16 x K inputs, B K x 8, C
    16 x 8 accumulators, over 32 lanes of 32-bit registers."""
    shape = _SHAPE.search(opcode)
    if shape is None or not opcode.startswith(("HMMA", "IMMA")):
        return (_WIDEST, _WIDEST, _WIDEST)
    k = int(shape[3])
    parts = opcode.split(".")
    if opcode.startswith("HMMA"):
        bits = 32 if "TF32" in parts else 16
    else:
        bits = 4 if {"S4", "U4"} & set(parts) else 8
    accumulator = 16 if opcode.startswith("HMMA") and "F16" in parts[2:3] else 32
    words = 32 * 32
    return (max(16 * k * bits // words, 1), max(k * 8 * bits // words, 1),
            16 * 8 * accumulator // words)
