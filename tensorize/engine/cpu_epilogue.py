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

Where the target's description says ``epilogue: tile`` (x86), that pass then moves into the
GEMM's tile loop (``reverse_compute_at``) and the GEMM's result buffer shrinks to one tile
(``compact_buffer``): each accumulator tile is finished right after its store, and the
int32 result never goes to memory as a whole (4.8 MB for MobileNet-v2's 12544 x 16 x 96
expansion). Measured on x86, whole networks compiled, 20 calls each taking turns: ResNet-50
31.1 ms against 34.2 ms, MobileNet-v2 7.5 against 8.6. Moved but not shrunk, the result
still crossed the caches and the network did not change (34.3 against 34.0 ms). On arm the
emulator counts instructions, not cache traffic, and the per-tile loops execute more of
them (the BERT layer 100.2 million against 76.3, ResNet-50 456 against 435), so arm keeps
the pass.
"""

from __future__ import annotations

from ir import BufferLoad, BufferStore, IterKind, ScheduleError
from tensorize.schedule import Schedule, tree


def inline_epilogues(sch: Schedule) -> list[str]:
    """Inline every elementwise, untensorized block whose result only one other such block
    reads, into that block, and fold each in-place update of the GEMM's result (an operand
    shift's compensation) into the block reading it next; where the target's epilogue is
    ``tile``, move the pass left into the GEMM's tile loop (module docs). The names of the
    blocks folded, inlined or moved; a block the primitives refuse stays as it is."""
    inlined = _inline(sch)
    if _epilogue_placement(sch) == "tile":
        inlined += _into_tile_loops(sch)
    return inlined


def _inline(sch: Schedule) -> list[str]:
    """The inlining and folding of :func:`inline_epilogues`."""
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


def _epilogue_placement(sch: Schedule) -> str:
    """The ``epilogue`` of the CPU target whose intrinsics the function calls (``pass``
    where the schedule has no registry or calls none)."""
    if sch.registry is None:
        return "pass"
    for name in tree.block_names(sch.func):
        called = dict(sch.get(sch.get_block(name)).block.annotations).get("tensorized")
        if called is not None:
            return sch.registry.cpu(sch.registry.get(called).target).epilogue
    return "pass"


def _into_tile_loops(sch: Schedule) -> list[str]:
    """Each plain elementwise block (not a copy) that reads what a tensorized store out of
    a register tile writes, moved into the innermost loop around that tile's every block
    (its zeroing, its products and its store), and the stored result shrunk to what one
    iteration of that loop holds, where the primitives allow; the names of those moved. A
    plain copy (a padded result's valid part copied out) stays one pass."""
    moved = []
    for name in tree.block_names(sch.func):
        block = sch.get(sch.get_block(name)).block
        if not _plain_elementwise(sch, name) or isinstance(block.body.value, BufferLoad):
            continue
        reads = {r.buffer for r in block.reads}
        stores = [b for b in tree.block_names(sch.func) if _stores_tile(sch, b, reads)]
        if len(stores) != 1:
            continue
        loop = _tile_loop(sch, stores[0])
        if loop is None or not _applied(
                sch, lambda: sch.reverse_compute_at(sch.get_block(name), loop)):
            continue
        moved.append(name)
        for buffer in reads:
            if buffer not in sch.func.params:
                _applied(sch, lambda: sch.compact_buffer(buffer.name))
    return moved


def _stores_tile(sch: Schedule, name: str, buffers: set) -> bool:
    """Whether block ``name`` is a tensorized copy of a register tile into one of
    ``buffers``."""
    block = sch.get(sch.get_block(name)).block
    return ("tensorized" in dict(block.annotations)
            and any(w.buffer in buffers for w in block.writes)
            and any(r.buffer.scope != "global" for r in block.reads))


def _tile_loop(sch: Schedule, store: str):
    """The innermost loop around the store ``store`` and every block writing the register
    tile it reads; None when they share no loop."""
    block = sch.get(sch.get_block(store)).block
    tile = {r.buffer for r in block.reads if r.buffer.scope != "global"}
    writers = [b for b in tree.block_names(sch.func) if b != store and any(
        w.buffer in tile for w in sch.get(sch.get_block(b)).block.writes)]
    common = sch.get_loops(sch.get_block(store))
    for writer in writers:
        loops = sch.get_loops(sch.get_block(writer))
        shared = 0
        while (shared < min(len(common), len(loops))
               and sch.get(common[shared]) is sch.get(loops[shared])):
            shared += 1
        common = common[:shared]
    return common[-1] if common and writers else None


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
