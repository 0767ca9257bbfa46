"""Loop-structure primitives: split, fuse, reorder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ir import BlockRealize, BufferStore, Node, For, ForKind, IntrinsicCall, PrimFunc, Stmt, Var
from ir import Expr, IntImm, Mutator, and_, post_order_visit, substitute
from ir.arith import Interval, simplify
from tensorize.schedule import tree
from tensorize.schedule.check import arg_check, check, distinct_loops, fail, get_loop
from tensorize.schedule.handles import LoopRV
from tensorize.schedule.tree import Located

__all__ = ["fuse", "reorder", "split"]


def _loop_ranges(path: tuple[Node, ...], extra: Sequence[For] = ()) -> dict[Var, Interval]:
    ranges = {node.var: Interval(0, node.extent - 1) for node in path if isinstance(node, For)}
    ranges.update({loop.var: Interval(0, loop.extent - 1) for loop in extra})
    return ranges


def _simplify_realizes(stmt: Stmt, ranges: dict[Var, Interval]) -> Stmt:
    """Simplify the bindings and predicates of the blocks directly under ``stmt``."""
    inner_ranges = dict(ranges)
    inner_ranges.update({node.var: Interval(0, node.extent - 1)
                         for node, _ in tree.walk_under(stmt) if isinstance(node, For)})
    for realize in tree.child_block_realizes(stmt):
        bindings = tuple(simplify(b, inner_ranges) for b in realize.bindings)
        predicate = simplify(realize.predicate, inner_ranges)
        if all(n is o for n, o in zip(bindings, realize.bindings)) and \
                predicate is realize.predicate:
            continue
        new = BlockRealize(bindings, realize.block, predicate, realize.loc)
        stmt = _replace_in(stmt, realize, new)
    return stmt


def _replace_in(stmt: Stmt, old: Stmt, new: Stmt) -> Stmt:
    if stmt is old:
        return new

    class _Replace(Mutator):
        def visit(self, node: Any) -> Any:
            if node is old:
                return new
            return super().visit(node)

    return _Replace().visit(stmt)


def _only_blocks_below(stmt: Stmt) -> bool:
    """True when every store or intrinsic call under ``stmt`` sits inside a block."""
    for node, path in tree.walk_under(stmt):
        if isinstance(node, (BufferStore, IntrinsicCall)):
            if not any(isinstance(p, BlockRealize) for p in path + (node,)):
                return False
    return True


def _guard_blocks(stmt: Stmt, cond: Expr) -> Stmt:
    """Add ``cond`` to the predicate of every block directly under ``stmt`` (or of ``stmt``
    itself when it is a block)."""
    realizes = [stmt] if isinstance(stmt, BlockRealize) else tree.child_block_realizes(stmt)
    for realize in realizes:
        predicate = cond if _is_true(realize.predicate) else and_(realize.predicate, cond)
        stmt = _replace_in(stmt, realize,
                           BlockRealize(realize.bindings, realize.block, predicate, realize.loc))
    return stmt


def _is_true(expr: Expr) -> bool:
    return isinstance(expr, IntImm) and expr.dtype.is_bool and expr.value == 1


def _mixed_blocks(loop: For) -> list[str]:
    """Blocks under ``loop`` that bind its variable into a spatial and a reduce iterator."""
    found = []
    for realize in tree.child_block_realizes(loop):
        kinds = set()
        for iv, binding in zip(realize.block.iter_vars, realize.bindings):
            uses: list[bool] = []
            post_order_visit(binding, lambda n: uses.append(n is loop.var))
            if any(uses):
                kinds.add(iv.kind)
        if len(kinds) > 1:
            found.append(realize.block.name)
    return found


def split(func: PrimFunc, loop: LoopRV, factors: Sequence[int | None]
          ) -> tuple[PrimFunc, list[LoopRV]]:
    """Split a loop into nested loops whose extents are ``factors`` (outermost first).

    One factor may be ``None``: it is inferred as ``ceil(extent / product of the others)``.
    When the product exceeds the extent, every block under the loop gets the predicate
    ``original index < extent``, so no iteration runs twice or out of range.

    Preconditions: the loop is serial; for a non-dividing split, every statement under the
    loop sits inside a block (the guard is a block predicate).

    Returns the new function and handles to the new loops, outermost first.

    >>> from ir import script as T
    >>> from tensorize.schedule import Schedule
    >>> @T.prim_func
    ... def scale(A: T.Buffer((10,), "int32"), B: T.Buffer((10,), "int32")):
    ...     for i in range(10):
    ...         with T.block("B"):
    ...             vi = T.axis.spatial(10, i)
    ...             B[vi] = A[vi] * 2
    >>> sch = Schedule(scale)
    >>> outer, inner = sch.split(sch.get_loops(sch.get_block("B"))[0], [None, 4])
    >>> print(sch.get(outer).extent, sch.get(inner).extent)
    3 4
    """
    found = get_loop(func, loop, "split")
    node: For = found.node
    arg_check(isinstance(factors, (list, tuple)) and len(factors) >= 2, "split", "factors",
              "a list of at least two factors", factors)
    arg_check(all(f is None or (isinstance(f, int) and not isinstance(f, bool) and f > 0)
                  for f in factors), "split", "factors", "positive ints or one None", factors)
    arg_check(sum(f is None for f in factors) <= 1, "split", "factors", "at most one None",
              factors)
    check(node.kind is ForKind.SERIAL, "split",
          f"loop {node.var.name} is {node.kind.value}; split requires a serial loop "
          "(split before changing its kind)", node)
    known = 1
    for f in factors:
        if f is not None:
            known *= f
    sizes = [(-(-node.extent // known)) if f is None else f for f in factors]
    total = 1
    for size in sizes:
        total *= size
    check(total >= node.extent, "split",
          f"factors {sizes} cover {total} iterations, fewer than loop {node.var.name}'s "
          f"extent {node.extent}", node)

    new_vars = [Var(f"{node.var.name}_{n}", node.var.dtype) for n in range(len(sizes))]
    index = new_vars[0]
    for var, size in zip(new_vars[1:], sizes[1:]):
        index = index * size + var
    body = substitute(node.body, {node.var: index})
    if total > node.extent:
        check(_only_blocks_below(node.body), "split",
              f"loop {node.var.name}: factors {sizes} do not divide extent {node.extent}, and "
              "a statement outside a block cannot be guarded", node)
        body = _guard_blocks(body, index < node.extent)
    stmt: Stmt = body
    for var, size in reversed(list(zip(new_vars, sizes))):
        stmt = For(var, size, stmt, ForKind.SERIAL, None, node.loc)
    ranges = _loop_ranges(found.path)
    stmt = _simplify_realizes(stmt, ranges)
    return tree.replace_stmt(func, node, stmt), [LoopRV(v) for v in new_vars]


def _perfect_chain(outer: Located, inner_var: Var, primitive: str) -> list[For]:
    """The loops from ``outer`` down to the loop over ``inner_var``, each the sole body of
    the previous one."""
    chain = [outer.node]
    while chain[-1].var is not inner_var:
        body = chain[-1].body
        if not isinstance(body, For):
            fail(primitive, f"loop {chain[-1].var.name} does not directly contain loop "
                            f"{inner_var.name}: there is a {_kind(body)} in between", body)
        chain.append(body)
    return chain


def _kind(stmt: Stmt) -> str:
    if isinstance(stmt, BlockRealize):
        return f"block {stmt.block.name!r}"
    return type(stmt).__name__


def fuse(func: PrimFunc, *loops: LoopRV) -> tuple[PrimFunc, LoopRV]:
    """Fuse perfectly nested loops (outermost first) into one loop over their product.

    Preconditions: at least two loops; each is the only statement in the body of the one
    before; all are serial.

    Returns the new function and the handle of the fused loop.

    >>> from ir import script as T
    >>> from tensorize.schedule import Schedule
    >>> @T.prim_func
    ... def copy(A: T.Buffer((4, 8), "int8"), B: T.Buffer((4, 8), "int8")):
    ...     for i, j in T.grid(4, 8):
    ...         with T.block("B"):
    ...             vi, vj = T.axis.remap("SS", [i, j])
    ...             B[vi, vj] = A[vi, vj]
    >>> sch = Schedule(copy)
    >>> fused = sch.fuse(*sch.get_loops(sch.get_block("B")))
    >>> sch.get(fused).extent
    32
    """
    check(len(loops) >= 2, "fuse", f"fuse requires at least two loops, got {len(loops)}")
    distinct_loops(loops, "fuse")
    outer = get_loop(func, loops[0], "fuse")
    for loop in loops[1:]:
        get_loop(func, loop, "fuse")
    chain = _perfect_chain(outer, loops[-1].var, "fuse")
    check(len(chain) == len(loops) and all(c.var is l.var for c, l in zip(chain, loops)),
          "fuse", "loops must be given outermost first and be adjacent: "
          f"{', '.join(l.var.name for l in loops)} vs the nest "
          f"{', '.join(c.var.name for c in chain)}")
    for node in chain:
        check(node.kind is ForKind.SERIAL, "fuse",
              f"loop {node.var.name} is {node.kind.value}; fuse requires serial loops", node)
    total = 1
    for node in chain:
        total *= node.extent
    fused = Var("_".join(n.var.name for n in chain) + "_fused", chain[0].var.dtype)
    mapping = {}
    inner_product = 1
    for node in reversed(chain):
        part = fused if inner_product == 1 else fused // inner_product
        mapping[node.var] = part if node is chain[0] else part % node.extent
        inner_product *= node.extent
    body = substitute(chain[-1].body, mapping)
    stmt: Stmt = For(fused, total, body, ForKind.SERIAL, None, chain[0].loc)
    stmt = _simplify_realizes(stmt, _loop_ranges(outer.path))
    return tree.replace_stmt(func, chain[0], stmt), LoopRV(fused)


def reorder(func: PrimFunc, *loops: LoopRV) -> tuple[PrimFunc, None]:
    """Reorder loops of one perfect nest: the given loops take the positions they occupy
    now, in the order given; loops of the nest not named stay where they are.

    Preconditions: the loops are distinct and lie on one chain of perfectly nested loops
    (no block, sequence or branch between them).
    """
    check(len(loops) >= 1, "reorder", "reorder requires at least one loop")
    distinct_loops(loops, "reorder")
    located = [get_loop(func, loop, "reorder") for loop in loops]
    depth = sorted(located, key=lambda loc: len(loc.path))
    outermost, innermost = depth[0], depth[-1]
    for loc in located:
        check(loc is outermost or any(p is outermost.node for p in loc.path), "reorder",
              f"loop {loc.node.var.name} is not nested in loop {outermost.node.var.name}: "
              "the loops are on different branches", loc.node)
    chain = _perfect_chain(outermost, innermost.node.var, "reorder")
    for loc in located:
        mixed = _mixed_blocks(loc.node)
        if mixed:
            fail("reorder", f"loop {loc.node.var.name} drives both spatial and reduce iterators "
                            f"of block {mixed[0]!r}; moving it would reorder the reduction "
                            "against its init", loc.node)
    named = {id(loop.var) for loop in loops}
    slots = [i for i, node in enumerate(chain) if id(node.var) in named]
    by_var = {id(loc.node.var): loc.node for loc in located}
    order = list(chain)
    for slot, loop in zip(slots, loops):
        order[slot] = by_var[id(loop.var)]
    stmt: Stmt = chain[-1].body
    for node in reversed(order):
        stmt = For(node.var, node.extent, stmt, node.kind, node.thread, node.loc)
    return tree.replace_stmt(func, chain[0], stmt), None
