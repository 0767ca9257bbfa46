"""Well-formedness of a PrimFunc: the rules every front end and transform must respect.

- every variable is used inside the loop or block that binds it, and each Var object is bound
  once (by one loop or one iterator);
- a block is isolated: its body, init and regions use only its own iterators (and loops
  inside it), never a loop variable or iterator from outside;
- every buffer used is a parameter or allocated by an enclosing block;
- a block's bindings are affine in the outer loop variables and, where no predicate guards
  them, stay inside the iterators' extents;
- a reduce iterator never indexes a store (the output of a reduction is spatial).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ir.arith import Interval, bound, is_affine
from ir.buffer import Buffer
from ir.errors import KernelError
from ir.expr import BufferLoad, Expr, IntImm, Var
from ir.function import PrimFunc
from ir.node import LocT, Node
from ir.stmt import (
    Block,
    BlockRealize,
    BufferRegion,
    BufferStore,
    For,
    IfThenElse,
    IntrinsicCall,
    IterKind,
    SeqStmt,
    Stmt,
)
from ir.visitor import child_fields


def verify(func: PrimFunc) -> None:
    """Raise KernelError, located at the offending node, unless ``func`` is well formed."""
    _Verifier(func).run()


@dataclass
class _Scope:
    """Variables bound so far, innermost last; ``boundary`` is where the current block starts."""

    bound: list[tuple[Var, str]] = field(default_factory=list)
    boundary: int = 0


class _Verifier:
    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.scope = _Scope()
        self.seen_vars: set[int] = set()
        self.buffers: list[Buffer] = list(func.params)
        self.seen_buffers: set[int] = {id(b) for b in func.params}
        self.ranges: dict[Var, Any] = {}
        self.blocks: list[Block] = []

    def run(self) -> None:
        self.stmt(self.func.body, self.func.loc)

    def fail(self, message: str, loc: LocT) -> KernelError:
        return KernelError(message, loc if loc is not None else self.func.loc)

    # -- statements ------------------------------------------------------------------------

    def stmt(self, stmt: Stmt, loc: LocT) -> None:
        loc = _use_loc(stmt, loc)
        if isinstance(stmt, BufferStore):
            self.store(stmt, loc)
        elif isinstance(stmt, For):
            self.bind(stmt.var, "loop variable", loc)
            self.ranges[stmt.var] = Interval(0, stmt.extent - 1)
            self.stmt(stmt.body, loc)
            self.scope.bound.pop()
        elif isinstance(stmt, SeqStmt):
            for item in stmt.stmts:
                self.stmt(item, loc)
        elif isinstance(stmt, IfThenElse):
            self.expr(stmt.cond, loc)
            self.stmt(stmt.then_case, loc)
            if stmt.else_case is not None:
                self.stmt(stmt.else_case, loc)
        elif isinstance(stmt, IntrinsicCall):
            for arg in stmt.args:
                self.region(arg, loc) if isinstance(arg, BufferRegion) else self.expr(arg, loc)
        elif isinstance(stmt, BlockRealize):
            self.realize(stmt, loc)
        else:
            raise self.fail(f"function {self.func.name}: unexpected statement "
                            f"{type(stmt).__name__} (a block must be placed by a BlockRealize)",
                            loc)

    def store(self, stmt: BufferStore, loc: LocT) -> None:
        self.use_buffer(stmt.buffer, loc)
        for index in stmt.indices:
            self.expr(index, loc)
        self.expr(stmt.value, loc)
        if not self.blocks:
            return
        block = self.blocks[-1]
        reduce_vars = {iv.var for iv in block.iter_vars if iv.kind is IterKind.REDUCE}
        for index in stmt.indices:
            used = [v for v in _vars(index) if v in reduce_vars]
            if used:
                raise self.fail(f"block {block.name!r}: the store to {stmt.buffer.name} "
                                f"requires spatial iterators in its indices, got reduce iterator "
                                f"{used[0].name}; an output cannot be indexed by a reduction "
                                "(declare the iterator spatial if it is not one)",
                                _use_loc(index, loc))

    def realize(self, realize: BlockRealize, loc: LocT) -> None:
        block = realize.block
        for binding, iter_var in zip(realize.bindings, block.iter_vars):
            where = _use_loc(binding, iter_var.loc or loc)
            self.expr(binding, where)
            self.check_binding(block, iter_var.var.name, iter_var.extent, binding,
                               realize.predicate, where)
        self.expr(realize.predicate, loc)
        outer_scope, outer_buffers = self.scope, len(self.buffers)
        self.scope = _Scope(list(outer_scope.bound), len(outer_scope.bound))
        for iter_var in block.iter_vars:
            self.bind(iter_var.var, f"iterator of block {block.name!r}", iter_var.loc or loc)
            self.ranges[iter_var.var] = Interval(0, iter_var.extent - 1)
        for buffer in block.alloc_buffers:
            if id(buffer) in self.seen_buffers:
                raise self.fail(f"block {block.name!r}: buffer {buffer.name} requires one "
                                "declaration, got a second one", buffer.loc or block.loc or loc)
            self.seen_buffers.add(id(buffer))
            self.buffers.append(buffer)
        self.blocks.append(block)
        block_loc = block.loc or loc
        # The body first: its statements carry locations, and declared regions are most often
        # inferred from it, so a bad index is reported where it is written.
        if block.init is not None:
            self.stmt(block.init, block_loc)
        self.stmt(block.body, block_loc)
        for region in (*block.reads, *block.writes):
            self.region(region, block_loc)
        self.blocks.pop()
        del self.buffers[outer_buffers:]
        self.scope = outer_scope

    def check_binding(self, block: Block, name: str, extent: int, binding: Expr,
                      predicate: Expr, loc: LocT) -> None:
        if not is_affine(binding):
            raise self.fail(f"block {block.name!r}: the binding of iterator {name} requires an "
                            f"affine expression of loop variables (such as 4 * i + j), got "
                            f"{binding}", loc)
        if not (isinstance(predicate, IntImm) and predicate.value == 1):
            return  # a predicate may guard bindings that overrun the extent (uneven splits)
        if any(v not in self.ranges for v in _vars(binding)):
            return
        span = bound(binding, self.ranges)
        if span.lo is not None and span.hi is not None and (span.lo < 0 or span.hi >= extent):
            raise self.fail(f"block {block.name!r}: iterator {name} requires its binding to "
                            f"stay in [0, {extent - 1}], got {binding} ranging over "
                            f"[{span.lo}, {span.hi}]; fix the extent or guard it with T.where",
                            loc)

    # -- names -----------------------------------------------------------------------------

    def bind(self, var: Var, role: str, loc: LocT) -> None:
        if id(var) in self.seen_vars:
            raise self.fail(f"function {self.func.name}: variable {var.name} requires one "
                            f"binding, got a second one as {role}; give each loop and "
                            "iterator its own Var", loc)
        self.seen_vars.add(id(var))
        self.scope.bound.append((var, role))

    def use_var(self, var: Var, loc: LocT) -> None:
        bound = self.scope.bound
        for position in range(len(bound) - 1, -1, -1):
            if bound[position][0] is not var:
                continue
            if position >= self.scope.boundary:
                return
            block = self.blocks[-1].name if self.blocks else "root"
            raise self.fail(f"block {block!r} requires only its own iterators, got "
                            f"{var.name}, a {bound[position][1]} from outside the block; "
                            f"bind it to an iterator (T.axis.spatial(extent, {var.name})) "
                            "and use that", loc)
        raise self.fail(f"function {self.func.name}: variable {var.name} is used outside the "
                        "loop or block that defines it", loc)

    def use_buffer(self, buffer: Buffer, loc: LocT) -> None:
        if any(buffer is known for known in self.buffers):
            return
        raise self.fail(f"function {self.func.name}: buffer {buffer.name} requires a "
                        "declaration, but it is neither a parameter nor allocated by an "
                        "enclosing block; add a parameter or use T.alloc_buffer", loc)

    def region(self, region: BufferRegion, loc: LocT) -> None:
        loc = region.loc or loc
        self.use_buffer(region.buffer, loc)
        for rng in region.ranges:
            self.expr(rng.start, rng.loc or loc)
            self.expr(rng.extent, rng.loc or loc)

    def expr(self, expr: Node, loc: LocT) -> None:
        if isinstance(expr, Var):
            self.use_var(expr, loc)
            return
        loc = _use_loc(expr, loc)
        if isinstance(expr, BufferLoad):
            self.use_buffer(expr.buffer, loc)
        for name in child_fields(type(expr)):
            child = getattr(expr, name)
            for item in child if isinstance(child, tuple) else (child,):
                if isinstance(item, Node) and not isinstance(item, Buffer):
                    self.expr(item, loc)


def _use_loc(node: Node, loc: LocT) -> LocT:
    """Where ``node`` is used: its own span, except for a Var, whose span is its definition."""
    if isinstance(node, Var):
        return loc
    return getattr(node, "loc", None) or loc


def _vars(expr: Node) -> list[Var]:
    """The variables an expression uses, in order."""
    if isinstance(expr, Var):
        return [expr]
    found: list[Var] = []
    for name in child_fields(type(expr)):
        child = getattr(expr, name)
        for item in child if isinstance(child, tuple) else (child,):
            if isinstance(item, Node) and not isinstance(item, Buffer):
                found.extend(_vars(item))
    return found
