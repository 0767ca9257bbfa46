"""compact_buffer: shrink an intermediate buffer to the tile one loop iteration uses.

After ``cache_read``/``cache_write`` and ``compute_at``, a staging buffer still has the shape
of the whole tensor although each iteration of the loop the stage sits under uses one tile of
it. On a scratchpad that matters: the tile must fit. ``compact_buffer`` finds the innermost
loop around every access of the buffer, the region one iteration of it touches (inner loops
relaxed), and, for each dimension where that region is a window of constant extent T starting
at a multiple of T, indexes the buffer modulo T instead. Indices stay functions of each
block's own iterators, so blocks remain isolated.
"""

from __future__ import annotations

from dataclasses import dataclass

from ir import (BinOp, Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, Expr,
                For, IfThenElse, IntImm, IntrinsicCall, Mutator, PrimFunc, Range, SeqStmt, Stmt,
                Var, substitute)
from ir.arith import Interval, linearize, simplify
from ir.regions import region_union, relax_region
from ir.visitor import child_fields
from tensorize.schedule.check import arg_check, check, fail

__all__ = ["compact_buffer"]


@dataclass(frozen=True, slots=True)
class _Access:
    region: BufferRegion  # in terms of loop variables
    loops: tuple[For, ...]
    is_write: bool
    is_read: bool


def compact_buffer(func: PrimFunc, buffer: str) -> tuple[PrimFunc, None]:
    """Shrink the intermediate ``buffer`` (by name) to the tile one iteration of the innermost
    loop around all its accesses uses, indexing each shrunk dimension modulo its new extent.

    Preconditions: the buffer is one of the function's intermediates; in every iteration of
    that loop, the buffer is written before it is read, and the writes cover every element
    read (no data passes from one iteration to the next). Dimensions whose window does not
    start at a multiple of its extent keep their size. Returns the new function.
    """
    arg_check(isinstance(buffer, str), "compact_buffer", "buffer", "a buffer name", buffer)
    target = next((b for b in func.allocs if b.name == buffer), None)
    if target is None:
        names = ", ".join(b.name for b in func.allocs) or "none"
        fail("compact_buffer", f"{buffer!r} is not an intermediate buffer of {func.name} "
                               f"(intermediates: {names})")
    accesses: list[_Access] = []
    _collect(func.body.block.body, target, (), {}, accesses, None)
    check(bool(accesses), "compact_buffer", f"buffer {buffer} is never accessed")
    depth = _common_depth([a.loops for a in accesses])
    inner = {loop.var: Interval(0, loop.extent - 1)
             for a in accesses for loop in a.loops[depth:]}
    regions = [relax_region(a.region, inner) for a in accesses]
    union = regions[0]
    for region in regions[1:]:
        union = region_union(union, region)
    written = [r for r, a in zip(regions, accesses) if a.is_write]
    lca = accesses[0].loops[depth - 1].var.name if depth else "the function"
    check(accesses[0].is_write and not accesses[0].is_read, "compact_buffer", f"buffer {buffer} is read before it is written in an iteration of "
                            f"{lca}; its data passes between iterations")
    covered = written[0] if written else None
    for region in written[1:]:
        covered = region_union(covered, region)
    check(covered is not None and covered == union, "compact_buffer",
          f"the writes of buffer {buffer} in one iteration of {lca} do not cover what is read "
          "there; its data passes between iterations")
    windows = []
    for rng, extent in zip(union.ranges, target.shape):
        size = simplify(rng.extent)
        start = linearize(rng.start)
        if (isinstance(size, IntImm) and size.value < extent
                and all(c % size.value == 0 for _, c in start.terms)
                and start.const % size.value == 0):
            windows.append(size.value)
        else:
            windows.append(None)
    if all(w is None for w in windows):
        return func, None
    shape = tuple(w or n for w, n in zip(windows, target.shape))
    compact = target.with_(shape=shape, strides=None)
    body = _Rewrite(target, compact, tuple(windows)).visit(func.body)
    return PrimFunc(func.name, func.params, body, func.loc), None


def _with_allocs(block: Block, allocs: tuple[Buffer, ...]) -> Block:
    return Block(block.name, block.iter_vars, block.reads, block.writes, block.body, block.init,
                 allocs, block.annotations, block.loc)


def _common_depth(stacks: list[tuple[For, ...]]) -> int:
    depth = 0
    while all(len(s) > depth for s in stacks) and all(
            s[depth] is stacks[0][depth] for s in stacks):
        depth += 1
    return depth


def _collect(stmt: Stmt, buffer: Buffer, loops: tuple[For, ...], subst: dict[Var, Expr],
             out: list[_Access], block: Block | None) -> None:
    """Record every access of ``buffer`` under ``stmt`` in program order, in loop variables."""

    # Starts are simplified under the loops' ranges, so that equal regions look equal (a
    # loop of extent 1 is its single value wherever it appears).
    ranges = {loop.var: Interval(0, loop.extent - 1) for loop in loops}

    def point(indices: tuple[Expr, ...]) -> BufferRegion:
        return BufferRegion(buffer, tuple(Range(simplify(substitute(i, subst), ranges),
                                                IntImm(1)) for i in indices))

    def loads(node: object) -> None:
        if isinstance(node, BufferLoad):
            for index in node.indices:
                loads(index)
            if node.buffer is buffer:
                out.append(_Access(point(node.indices), loops, False, True))
        elif isinstance(node, tuple):
            for item in node:
                loads(item)
        elif isinstance(node, Expr) and not isinstance(node, Var):
            for name in child_fields(type(node)):
                loads(getattr(node, name))

    if isinstance(stmt, BufferStore):
        loads(stmt.value)
        loads(stmt.indices)
        if stmt.buffer is buffer:
            out.append(_Access(point(stmt.indices), loops, True, False))
    elif isinstance(stmt, For):
        _collect(stmt.body, buffer, loops + (stmt,), subst, out, block)
    elif isinstance(stmt, SeqStmt):
        for child in stmt.stmts:
            _collect(child, buffer, loops, subst, out, block)
    elif isinstance(stmt, IfThenElse):
        loads(stmt.cond)
        _collect(stmt.then_case, buffer, loops, subst, out, block)
        if stmt.else_case is not None:
            _collect(stmt.else_case, buffer, loops, subst, out, block)
    elif isinstance(stmt, BlockRealize):
        inner = dict(subst)
        inner.update({iv.var: simplify(substitute(b, subst))
                      for iv, b in zip(stmt.block.iter_vars, stmt.bindings)})
        loads(stmt.predicate)
        if stmt.block.init is not None:
            _collect(stmt.block.init, buffer, loops, inner, out, stmt.block)
        _collect(stmt.block.body, buffer, loops, inner, out, stmt.block)
    elif isinstance(stmt, IntrinsicCall):
        for arg in stmt.args:
            if isinstance(arg, BufferRegion) and arg.buffer is buffer:
                region = BufferRegion(buffer, tuple(
                    Range(simplify(substitute(r.start, subst), ranges), r.extent)
                    for r in arg.ranges))
                writes = block is None or any(w.buffer is buffer for w in block.writes)
                reads = block is None or any(r.buffer is buffer for r in block.reads)
                out.append(_Access(region, loops, writes, reads))
            elif not isinstance(arg, BufferRegion):
                loads(arg)


class _Rewrite(Mutator):
    """Every access of the old buffer becomes one of the compact buffer, modulo the windows."""

    def __init__(self, old: Buffer, new: Buffer, windows: tuple[int | None, ...]) -> None:
        self.old, self.new, self.windows = old, new, windows

    def index(self, expr: Expr, window: int | None) -> Expr:
        if window is None:
            return expr
        return simplify(BinOp("floormod", expr, IntImm(window, expr.dtype)))

    def visit_BufferLoad(self, load: BufferLoad) -> Expr:
        indices = tuple(self.visit(i) for i in load.indices)
        if load.buffer is not self.old:
            return load if indices == load.indices else BufferLoad(load.buffer, indices, load.loc)
        return BufferLoad(self.new, tuple(self.index(i, w) for i, w in zip(indices, self.windows)),
                          load.loc)

    def visit_BufferStore(self, store: BufferStore) -> Stmt:
        value = self.visit(store.value)
        indices = tuple(self.visit(i) for i in store.indices)
        if store.buffer is not self.old:
            if value is store.value and indices == store.indices:
                return store
            return BufferStore(store.buffer, value, indices, store.loc)
        return BufferStore(self.new, value,
                           tuple(self.index(i, w) for i, w in zip(indices, self.windows)),
                           store.loc)

    def visit_BufferRegion(self, region: BufferRegion) -> BufferRegion:
        if region.buffer is not self.old:
            return region
        return BufferRegion(self.new, tuple(
            Range(self.index(r.start, w), r.extent) for r, w in zip(region.ranges, self.windows)),
            region.loc)

    def visit_Block(self, block: Block) -> Block:
        rebuilt = self.generic_visit(block)
        if any(b is self.old for b in rebuilt.alloc_buffers):
            allocs = tuple(self.new if b is self.old else b for b in rebuilt.alloc_buffers)
            return _with_allocs(rebuilt, allocs)
        return rebuilt
