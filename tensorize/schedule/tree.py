"""Finding blocks and loops in a function, and replacing one subtree by another.

Schedule handles outlive the IR they were taken from (every primitive builds a new tree), so
handles name stable identities: a block by its name, a loop by its loop variable. These
helpers turn those identities back into nodes and their ancestors.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from ir import (BinOp, Block, BlockRealize, BufferStore, Call, Cast, For, IfThenElse, Mutator,
                Node, PrimFunc, Select, SeqStmt, Stmt, Var)


@dataclass(frozen=True, slots=True)
class Located:
    """A node and its ancestors, outermost first (the root BlockRealize is ``path[0]``)."""

    node: Any
    path: tuple[Node, ...]

    @property
    def parent(self) -> Node | None:
        return self.path[-1] if self.path else None


def _walk(stmt: Stmt, path: tuple[Node, ...]):
    """Yield (stmt, ancestors) for every statement under and including ``stmt``."""
    yield stmt, path
    inner = path + (stmt,)
    if isinstance(stmt, For):
        yield from _walk(stmt.body, inner)
    elif isinstance(stmt, SeqStmt):
        for child in stmt.stmts:
            yield from _walk(child, inner)
    elif isinstance(stmt, IfThenElse):
        yield from _walk(stmt.then_case, inner)
        if stmt.else_case is not None:
            yield from _walk(stmt.else_case, inner)
    elif isinstance(stmt, BlockRealize):
        block = stmt.block
        if block.init is not None:
            yield from _walk(block.init, inner)
        yield from _walk(block.body, inner)


def walk_under(stmt: Stmt):
    """Every statement under and including ``stmt`` with its ancestors below ``stmt``."""
    yield from _walk(stmt, ())


def walk_stmts(func: PrimFunc):
    """Every statement of ``func`` with its ancestors, in program order."""
    yield from _walk(func.body, ())


def find_block(func: PrimFunc, name: str) -> Located | None:
    """The BlockRealize of the block called ``name``, or None."""
    for stmt, path in walk_stmts(func):
        if isinstance(stmt, BlockRealize) and stmt.block.name == name:
            return Located(stmt, path)
    return None


def find_loop(func: PrimFunc, var: Var) -> Located | None:
    """The For loop over ``var``, or None."""
    for stmt, path in walk_stmts(func):
        if isinstance(stmt, For) and stmt.var is var:
            return Located(stmt, path)
    return None


def block_names(func: PrimFunc) -> list[str]:
    """Names of every block except the root, in program order."""
    return [stmt.block.name for stmt, path in walk_stmts(func)
            if isinstance(stmt, BlockRealize) and path]


def sole_writer(func: PrimFunc, buffer: str) -> Block | None:
    """The one block writing ``buffer`` when it is an intermediate of ``func`` (one of its
    allocations) with a single writer; else None."""
    if buffer not in {b.name for b in func.allocs}:
        return None
    writers = [stmt.block for stmt, path in walk_stmts(func)
               if isinstance(stmt, BlockRealize) and path
               and any(w.buffer.name == buffer for w in stmt.block.writes)]
    return writers[0] if len(writers) == 1 else None


def enclosing_loops(path: tuple[Node, ...]) -> list[For]:
    """The loops between a node and its nearest enclosing block, outermost first."""
    loops: list[For] = []
    for node in reversed(path):
        if isinstance(node, BlockRealize):
            break
        if isinstance(node, For):
            loops.append(node)
    return loops[::-1]


def enclosing_block(path: tuple[Node, ...]) -> BlockRealize:
    """The nearest BlockRealize among the ancestors."""
    for node in reversed(path):
        if isinstance(node, BlockRealize):
            return node
    raise LookupError("statement is outside every block")


def child_block_realizes(stmt: Stmt) -> list[BlockRealize]:
    """The blocks directly under ``stmt`` (not nested inside another block), in order."""
    found: list[BlockRealize] = []
    for node, path in walk_under(stmt):
        if isinstance(node, BlockRealize) and node is not stmt:
            if not any(isinstance(p, BlockRealize) and p is not stmt for p in path):
                found.append(node)
    return found


def replace_stmt(func: PrimFunc, old: Stmt, new: Stmt) -> PrimFunc:
    """``func`` with the statement object ``old`` (found by identity) replaced by ``new``."""

    class _Replace(Mutator):
        def visit(self, node: Any) -> Any:
            if node is old:
                return new
            if isinstance(node, (Stmt, Block, tuple)):
                return super().visit(node)
            return node

    body = _Replace().visit(func.body)
    if body is func.body:
        raise LookupError("statement to replace is not in the function")
    return PrimFunc(func.name, func.params, body, func.loc)


def operators(stmt: Stmt) -> Counter[str]:
    """The binary operators and function calls of a store's value, counted (not those of
    its indices): what a match "operator for operator" (a tile against an intrinsic's
    semantics) needs the same of both sides. Counter() for any other statement."""
    found: Counter[str] = Counter()
    if not isinstance(stmt, BufferStore):
        return found
    pending: list[Node] = [stmt.value]
    while pending:
        node = pending.pop()
        if isinstance(node, BinOp):
            found[node.op] += 1
            pending += [node.a, node.b]
        elif isinstance(node, Call):
            found[node.name] += 1
            pending += list(node.args)
        elif isinstance(node, Cast):
            pending.append(node.value)
        elif isinstance(node, Select):
            pending += [node.cond, node.true_value, node.false_value]
    return found
