"""Buffer regions: what a block reads and writes, inferred from its body.

Regions are expressed in the block's own iterators. Loops inside the block and the iterators
of nested blocks are relaxed over their ranges: ``A[vi, k]`` under ``for k in range(16)``
reads ``A[vi, 0:16]``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ir.arith import Interval, bound_form, linearize, simplify, to_expr
from ir.buffer import Buffer
from ir.expr import BufferLoad, Expr, IntImm, Var
from ir.node import Node
from ir.stmt import (Block, BlockRealize, BufferRegion, BufferStore, For, IntrinsicCall, Range,
                     Stmt)
from ir.visitor import child_fields, substitute


def infer_block_regions(block: Block) -> tuple[list[BufferRegion], list[BufferRegion]]:
    """The regions ``block``'s body (and init) reads and writes, in order of first access.

    Buffers the block allocates itself are left out. An opaque intrinsic call counts each
    region argument as both read and written.
    """
    collector = _Collector(local=set(block.alloc_buffers))
    if block.init is not None:
        collector.stmt(block.init, {}, {})
    collector.stmt(block.body, {}, {})
    return collector.result(collector.reads), collector.result(collector.writes)


def relax_region(region: BufferRegion, ranges: Mapping[Var, Interval]) -> BufferRegion:
    """The region covered when each variable in ``ranges`` takes every value of its range."""
    return BufferRegion(region.buffer, tuple(
        _relax_range(r, ranges, extent) for r, extent in zip(region.ranges, region.buffer.shape)))


def region_union(a: BufferRegion, b: BufferRegion) -> BufferRegion:
    """The smallest region covering both (of one buffer)."""
    return BufferRegion(a.buffer, tuple(
        _union_range(x, y, n) for x, y, n in zip(a.ranges, b.ranges, a.buffer.shape)))


def _relax_range(rng: Range, ranges: Mapping[Var, Interval], dim: int) -> Range:
    start, extent = linearize(rng.start), _const(rng.extent)
    relaxed = [(v, c) for v, c in start.terms if _mentions(v, ranges)]
    if not relaxed:
        return rng
    if extent is None or any(not isinstance(v, Var) for v, _ in relaxed):
        span = bound_form(start, ranges)
        if span.is_bounded and extent is not None and not _free_vars(start, ranges):
            return Range(IntImm(span.lo), IntImm(span.hi - span.lo + extent))
        return Range(IntImm(0), IntImm(dim))
    kept = type(start)(tuple((v, c) for v, c in start.terms if not _mentions(v, ranges)),
                       start.const)
    low, width = 0, 0
    for var, coeff in relaxed:
        span = ranges[var]
        if not span.is_bounded:
            return Range(IntImm(0), IntImm(dim))
        low += min(coeff * span.lo, coeff * span.hi)
        width += abs(coeff) * (span.hi - span.lo)
    dt = rng.start.dtype
    return Range(to_expr(kept + type(start)((), low), dt), IntImm(width + extent, dt))


def _union_range(x: Range, y: Range, dim: int) -> Range:
    if x == y:
        return x
    ex, ey = _const(x.extent), _const(y.extent)
    gap = linearize(y.start) - linearize(x.start)
    if ex is not None and ey is not None and gap.is_const:
        lo = min(0, gap.const)
        hi = max(ex, gap.const + ey)
        start = x.start if lo == 0 else y.start
        return Range(start, IntImm(hi - lo, x.start.dtype))
    return Range(IntImm(0), IntImm(dim))


def _const(expr: Expr) -> int | None:
    expr = simplify(expr)
    return expr.value if isinstance(expr, IntImm) else None


def _mentions(atom: Expr, ranges: Mapping[Var, Interval]) -> bool:
    if isinstance(atom, Var):
        return atom in ranges
    found = []

    def visit(node: object) -> None:
        if isinstance(node, Var):
            found.append(node in ranges)
        elif isinstance(node, tuple):
            for item in node:
                visit(item)
        elif isinstance(node, Node) and not isinstance(node, Buffer):
            for name in child_fields(type(node)):
                visit(getattr(node, name))

    visit(atom)
    return any(found)


def _free_vars(form, ranges: Mapping[Var, Interval]) -> bool:
    """True when some atom of ``form`` mentions a variable that is not being relaxed."""
    for atom, _ in form.terms:
        stack = [atom]
        while stack:
            node = stack.pop()
            if isinstance(node, Var):
                if node not in ranges:
                    return True
            elif isinstance(node, tuple):
                stack.extend(node)
            elif isinstance(node, Node) and not isinstance(node, Buffer):
                stack.extend(getattr(node, name) for name in child_fields(type(node)))
    return False


class _Collector:
    """Walks a block body, recording accessed regions per buffer in first-access order."""

    def __init__(self, local: set[Buffer]) -> None:
        self.local = local
        self.reads: dict[Buffer, BufferRegion] = {}
        self.writes: dict[Buffer, BufferRegion] = {}

    def result(self, table: dict[Buffer, BufferRegion]) -> list[BufferRegion]:
        return list(table.values())

    def add(self, table: dict[Buffer, BufferRegion], region: BufferRegion,
            relax: dict[Var, Interval]) -> None:
        if region.buffer in self.local:
            return
        region = relax_region(region, relax) if relax else region
        previous = table.get(region.buffer)
        table[region.buffer] = region if previous is None else region_union(previous, region)

    def point(self, buffer: Buffer, indices: tuple[Expr, ...], subst: dict[Var, Expr]
              ) -> BufferRegion:
        return BufferRegion(buffer, tuple(
            Range(simplify(substitute(i, subst)) if subst else i, IntImm(1, i.dtype))
            for i in indices))

    def expr(self, node: object, subst: dict[Var, Expr], relax: dict[Var, Interval]) -> None:
        # An explicit stack, in pre-order: an expression may be thousands of operators deep.
        stack = [node]
        while stack:
            item = stack.pop()
            if isinstance(item, BufferLoad):
                self.add(self.reads, self.point(item.buffer, item.indices, subst), relax)
                stack.extend(reversed(item.indices))
            elif isinstance(item, tuple):
                stack.extend(reversed(item))
            elif isinstance(item, Node) and not isinstance(item, (Buffer, Var)):
                stack.extend(getattr(item, name) for name in reversed(child_fields(type(item))))

    def stmt(self, stmt: Stmt, subst: dict[Var, Expr], relax: dict[Var, Interval]) -> None:
        if isinstance(stmt, BufferStore):
            self.expr(stmt.value, subst, relax)
            self.expr(stmt.indices, subst, relax)
            self.add(self.writes, self.point(stmt.buffer, stmt.indices, subst), relax)
        elif isinstance(stmt, For):
            self.stmt(stmt.body, subst, {**relax, stmt.var: Interval(0, stmt.extent - 1)})
        elif isinstance(stmt, BlockRealize):
            self.nested_block(stmt, subst, relax)
        elif isinstance(stmt, IntrinsicCall):
            for arg in stmt.args:
                if isinstance(arg, BufferRegion):
                    region = substitute(arg, subst) if subst else arg
                    self.add(self.reads, region, relax)
                    self.add(self.writes, region, relax)
                else:
                    self.expr(arg, subst, relax)
        else:
            for name in child_fields(type(stmt)):
                child = getattr(stmt, name)
                for item in child if isinstance(child, tuple) else (child,):
                    if isinstance(item, Stmt):
                        self.stmt(item, subst, relax)
                    elif isinstance(item, Expr):
                        self.expr(item, subst, relax)

    def nested_block(self, realize: BlockRealize, subst: dict[Var, Expr],
                     relax: dict[Var, Interval]) -> None:
        """A nested block contributes its declared regions, seen through its bindings."""
        block = realize.block
        inner = {iv.var: (substitute(b, subst) if subst else b)
                 for iv, b in zip(block.iter_vars, realize.bindings)}
        local = set(block.alloc_buffers)
        for table, regions in ((self.reads, block.reads), (self.writes, block.writes)):
            for region in regions:
                if region.buffer in local:
                    continue
                mapped = BufferRegion(region.buffer, tuple(
                    Range(simplify(substitute(r.start, inner)), r.extent) for r in region.ranges))
                self.add(table, mapped, relax)
