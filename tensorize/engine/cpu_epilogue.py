"""A CPU kernel's epilogue in one pass: each elementwise block that only feeds another (a
bias add feeding a requantisation feeding the narrowing to int8) is inlined into its reader,
and an in-place update of the GEMM's result (the compensation of an operand shift: ``C -=
128 * colsum(B)``) is folded into the block reading it next, so the GEMM's result is read
once and no intermediate tensor is written.

The GEMM schedule (``cpu_schedule``) leaves the blocks after the GEMM as they are, one loop
nest and one full-size intermediate each; LLVM vectorises each loop but cannot merge them.
Measured on a 3136 x 64 x 256 requantising GEMM on x86 (``kernels.matmul_requantised``, one
thread): 0.57 ms as three passes, 0.42 ms as one. Only blocks outside every tensorized
block's reach are touched: a packing stage feeds a tensorized load, a reduction is no
elementwise block, and a copy out of a register tile reads no memory, so none of them is
inlined.
"""

from __future__ import annotations

from ir import BufferStore, IterKind, ScheduleError
from tensorize.schedule import Schedule, tree


def inline_epilogues(sch: Schedule) -> list[str]:
    """Inline every elementwise, untensorized block whose result only one other such block
    reads, into that block, and fold each in-place update of the GEMM's result (an operand
    shift's compensation) into the block reading it next (module docs); the names of the
    blocks folded or inlined. A block the primitives refuse stays as it is."""
    inlined = []
    for name in tree.block_names(sch.func):
        if not _plain_elementwise(sch, name):
            continue
        block = sch.get(sch.get_block(name)).block
        written = block.writes[0].buffer
        if written in sch.func.params:
            continue
        if any(r.buffer is written for r in block.reads):
            if _applied(sch, lambda: sch.inline_update(sch.get_block(name))):
                inlined.append(name)
            continue
        readers = [b for b in tree.block_names(sch.func) if b != name and any(
            r.buffer is written for r in sch.get(sch.get_block(b)).block.reads)]
        if len(readers) != 1 or not _plain_elementwise(sch, readers[0]):
            continue
        if _applied(sch, lambda: sch.compute_inline(sch.get_block(name))):
            inlined.append(name)
    return inlined


def _applied(sch: Schedule, primitive) -> bool:
    """Whether ``primitive`` applied; where it refused, ``sch`` as it was."""
    before = sch.snapshot()
    try:
        primitive()
    except ScheduleError:
        sch.restore(before)
        return False
    return True


def _plain_elementwise(sch: Schedule, name: str) -> bool:
    """One store, no reduction, not tensorized, every buffer in memory: a copy out of a
    register tile is the emitter's to place (its indices must be known when emitted)."""
    block = sch.get(sch.get_block(name)).block
    return (isinstance(block.body, BufferStore) and block.init is None
            and not any(iv.kind is IterKind.REDUCE for iv in block.iter_vars)
            and "tensorized" not in dict(block.annotations)
            and all(r.buffer.scope == "global" for r in (*block.reads, *block.writes)))
