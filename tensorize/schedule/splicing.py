"""Building loop nests over regions and splicing statements into a function: the editing
half of the data-staging primitives."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ir import (Block, BlockRealize, Buffer, Expr, For, IntrinsicCall, Mutator, PrimFunc, SeqStmt,
                Stmt, Var, seq)
from ir.arith import Interval, prove, simplify
from ir.regions import infer_block_regions
from tensorize.schedule import tree
from tensorize.schedule.check import check
from tensorize.schedule.coverage import conjunction
from tensorize.schedule.sites import Site


# -- building and placing statements -----------------------------------------------------------

def build_nest(block: Block, starts: Sequence[Expr], extents: Sequence[int],
               ranges: Mapping[Var, Interval]) -> Stmt:
    """Loops ``ax0, ax1, ...`` (one per iterator whose extent is not 1) around a realize of
    ``block`` binding iterator ``n`` to ``starts[n] + ax``, with a predicate wherever that may
    leave ``[0, extent)`` of the iterator under ``ranges`` (the variables outside)."""
    inner_ranges = dict(ranges)
    loops: list[tuple[Var, int]] = []
    bindings: list[Expr] = []
    for iv, start, extent in zip(block.iter_vars, starts, extents):
        binding = start
        if extent != 1:
            ax = Var(f"ax{len(loops)}", iv.var.dtype)
            loops.append((ax, extent))
            inner_ranges[ax] = Interval(0, extent - 1)
            binding = start + ax
        bindings.append(simplify(binding, inner_ranges))
    guards: list[Expr] = []
    for iv, binding in zip(block.iter_vars, bindings):
        for guard in (binding >= 0, binding < iv.extent):
            if not prove(guard, inner_ranges):
                guards.append(simplify(guard, inner_ranges))
    stmt: Stmt = BlockRealize(tuple(bindings), block, conjunction(guards))
    for var, extent in reversed(loops):
        stmt = For(var, extent, stmt)
    return stmt


def with_regions(block: Block) -> Block:
    """``block`` with its reads and writes inferred from its body (kept as declared when it
    calls an opaque intrinsic, whose regions cannot be inferred)."""
    parts = (block.body,) if block.init is None else (block.init, block.body)
    opaque = any(isinstance(node, IntrinsicCall) for part in parts
                 for node, _ in tree.walk_under(part))
    if opaque:
        return block
    reads, writes = infer_block_regions(block)
    return Block(block.name, block.iter_vars, tuple(reads), tuple(writes), block.body,
                 block.init, block.alloc_buffers, block.annotations, block.loc)


def with_body(loop: For, stmts: Sequence[Stmt]) -> For:
    """``loop`` around new body statements."""
    return For(loop.var, loop.extent, seq(*stmts), loop.kind, loop.thread, loop.loc)


class _Splice(Mutator):
    """Replaces statements (by identity) with sequences of statements; an empty sequence
    removes a statement from the sequence holding it."""

    def __init__(self, edits: Mapping[int, Sequence[Stmt]]) -> None:
        self.edits = edits

    def visit(self, node: object) -> object:
        if isinstance(node, Stmt) and id(node) in self.edits:
            return seq(*self.edits[id(node)])
        if isinstance(node, (Stmt, Block, tuple)):
            return super().visit(node)
        return node

    def visit_SeqStmt(self, node: SeqStmt) -> Stmt:
        stmts: list[Stmt] = []
        for child in node.stmts:
            if id(child) in self.edits:
                stmts.extend(self.edits[id(child)])
            else:
                stmts.append(self.visit(child))
        if len(stmts) == len(node.stmts) and all(a is b for a, b in zip(stmts, node.stmts)):
            return node
        return seq(*stmts)


def splice(stmt: Stmt, edits: Mapping[int, Sequence[Stmt]]) -> Stmt:
    """``stmt`` with each statement whose id is a key of ``edits`` replaced by its value."""
    return _Splice(edits).visit(stmt)


def splice_func(func: PrimFunc, edits: Mapping[int, Sequence[Stmt]],
                allocs: Sequence[Buffer] = ()) -> PrimFunc:
    """``func`` with the edits applied and ``allocs`` added to the root block's buffers."""
    body = splice(func.body, edits)
    root = body.block
    if allocs:
        root = Block(root.name, root.iter_vars, root.reads, root.writes, root.body, root.init,
                     root.alloc_buffers + tuple(allocs), root.annotations, root.loc)
        body = BlockRealize(body.bindings, root, body.predicate, body.loc)
    return PrimFunc(func.name, func.params, body, func.loc)


def removal(site: Site, primitive: str) -> Stmt:
    """The statement to drop to take the block out: its realize and the loops holding nothing
    else. It must sit in a statement sequence."""
    stmt: Stmt = site.realize
    depth = len(site.path) - 1
    while isinstance(site.path[depth], For) and site.path[depth].body is stmt:
        stmt = site.path[depth]
        depth -= 1
    check(isinstance(site.path[depth], SeqStmt), primitive,
          f"block {site.name!r} and its loops are the whole body of "
          f"{'block ' + repr(site.scope.block.name) if depth == 0 else 'a branch'}; "
          "there is nothing to move it next to", site.realize)
    return stmt


def unique_name(base: str, taken: Iterable[str]) -> str:
    """``base``, or ``base_1``, ``base_2`` ... whichever is not taken."""
    names = set(taken)
    if base not in names:
        return base
    n = 1
    while f"{base}_{n}" in names:
        n += 1
    return f"{base}_{n}"


def buffer_names(func: PrimFunc) -> list[str]:
    """The names of the parameters and of every allocated buffer."""
    names = [p.name for p in func.params]
    for stmt, _ in tree.walk_stmts(func):
        if isinstance(stmt, BlockRealize):
            names.extend(b.name for b in stmt.block.alloc_buffers)
    return names
