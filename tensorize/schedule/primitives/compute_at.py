"""compute_at and reverse_compute_at: move a block into the loop nest of its consumer or producer.

``compute_at`` moves a producer under a loop of its consumer and recomputes, in each iteration,
only the region the consumers under that loop read there. ``reverse_compute_at`` moves a
consumer under a loop of its producer and computes, in each iteration, exactly what the
producers under that loop have finished.

The moved block keeps its iterators; it gets new loops ``ax0, ax1, ...`` over the region,
its bindings become ``start + ax`` and a predicate guards them where the region may leave the
iterator's domain. Regions come from the blocks' declared reads and writes, seen through their
bindings and relaxed (:func:`ir.regions.relax_region`) over the loops inside the target loop.

This module also holds the analysis the other data-staging primitives share (``cache_read``,
``cache_write``, ``decompose_reduction``): block sites, dependences between the blocks of a
scope, regions in loop variables, exact coverage, building a loop nest over a region, and
splicing statements into a function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce

import numpy as np

from ir import (TRUE, BinOp, Block, BlockRealize, Buffer, BufferRegion, Cast, Expr, For, IntImm,
                IntrinsicCall, IterKind, IterVar, Mutator, Node, Not, PrimFunc, Range,
                Select, SeqStmt, Stmt, Var, and_, post_order_visit, seq, substitute)
from ir.arith import Interval, const_int, linearize, prove, simplify
from ir.regions import infer_block_regions, region_union, relax_region
from tensorize.schedule import tree
from tensorize.schedule.check import check, fail, get_block, get_loop
from tensorize.schedule.handles import BlockRV, LoopRV
from tensorize.schedule.tree import Located

__all__ = ["compute_at", "reverse_compute_at"]

# The most loop iterations one exactness check enumerates (per group of dependent loops).
ENUMERATION_LIMIT = 1 << 22


# -- where a block sits ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Site:
    """A block in a function: its realize, its ancestors (outermost first), the realize of the
    block it sits in (its scope) and the loops between the two (outermost first)."""

    realize: BlockRealize
    path: tuple[Node, ...]
    scope: BlockRealize
    loops: tuple[For, ...]

    @property
    def block(self) -> Block:
        """The block itself."""
        return self.realize.block

    @property
    def name(self) -> str:
        """The block's name (its handle)."""
        return self.realize.block.name

    @property
    def chain(self) -> tuple[Node, ...]:
        """The ancestors and the realize itself."""
        return self.path + (self.realize,)

    def is_under(self, stmt: Stmt) -> bool:
        """True when ``stmt`` is an ancestor of the block."""
        return any(node is stmt for node in self.path)

    def reads(self) -> set[Buffer]:
        """The buffers the block declares it reads."""
        return {region.buffer for region in self.block.reads}

    def writes(self) -> set[Buffer]:
        """The buffers the block declares it writes."""
        return {region.buffer for region in self.block.writes}


def site_of(realize: BlockRealize, path: tuple[Node, ...]) -> Site:
    """The site of a realize found with its ancestors."""
    return Site(realize, path, tree.enclosing_block(path), tuple(tree.enclosing_loops(path)))


def locate(func: PrimFunc, block: BlockRV, primitive: str) -> Site:
    """The site of the block a handle names; refuses a gone block and the root."""
    found = get_block(func, block, primitive)
    check(bool(found.path), primitive, f"block {block.name!r} is the function body itself")
    return site_of(found.node, found.path)


def sibling_sites(func: PrimFunc, scope: BlockRealize) -> list[Site]:
    """The blocks directly inside ``scope`` (not inside a nested block), in program order."""
    return [site_of(stmt, path) for stmt, path in tree.walk_stmts(func)
            if isinstance(stmt, BlockRealize) and path and tree.enclosing_block(path) is scope]


def loop_chain(loop: Located) -> tuple[Node, ...]:
    """A located loop's ancestors and the loop itself."""
    return loop.path + (loop.node,)


def loops_to(loop: Located) -> list[For]:
    """The loops from the enclosing block down to and including ``loop``, outermost first."""
    return tree.enclosing_loops(loop.path) + [loop.node]


def scope_ranges(site: Site) -> dict[Var, Interval]:
    """The ranges of the scope block's iterators, which the block's bindings may use."""
    return {iv.var: Interval(0, iv.extent - 1) for iv in site.scope.block.iter_vars}


def loop_ranges(loops: Iterable[For]) -> dict[Var, Interval]:
    """Each loop variable over ``[0, extent - 1]``."""
    return {loop.var: Interval(0, loop.extent - 1) for loop in loops}


def loops_below(site: Site, stmt: Stmt) -> list[For]:
    """The block's loops from ``stmt`` (an ancestor or the realize) down, ``stmt`` included
    when it is a loop."""
    chain = site.chain
    depth = next(n for n, node in enumerate(chain) if node is stmt)
    return [node for node in chain[depth:] if isinstance(node, For)]


def vars_of(node: Node) -> list[Var]:
    """The variables ``node`` uses, each once, in order of first use."""
    found: dict[int, Var] = {}
    post_order_visit(node, lambda n: found.setdefault(id(n), n) if isinstance(n, Var) else None)
    return list(found.values())


def same_scope(site: Site, loop: Located, primitive: str) -> None:
    """Refuse a loop outside the block's scope, or around the block itself."""
    var = loop.node.var.name
    check(tree.enclosing_block(loop.path) is site.scope, primitive,
          f"loop {var} is not in the scope of block {site.name!r} (the block "
          f"{tree.enclosing_block(loop.path).block.name!r} holds it); the loop and the block "
          "must sit directly in one block", loop.node)
    check(not site.is_under(loop.node), primitive,
          f"loop {var} is around block {site.name!r} itself; {primitive} moves a block under a "
          f"loop of {'its consumer' if primitive == 'compute_at' else 'its producer'}",
          loop.node)


def fork(first: tuple[Node, ...], second: tuple[Node, ...], primitive: str
         ) -> tuple[SeqStmt, int, int]:
    """The statement sequence where two chains of ancestors part, and the positions of their
    branches in it."""
    depth = 0
    while depth < min(len(first), len(second)) and first[depth] is second[depth]:
        depth += 1
    parent = first[depth - 1]
    if not isinstance(parent, SeqStmt):
        fail(primitive, "the block and the loop lie on the two branches of an if")
    return parent, _position(parent, first[depth]), _position(parent, second[depth])


def _position(sequence: SeqStmt, child: Node) -> int:
    return next(n for n, stmt in enumerate(sequence.stmts) if stmt is child)


def position_in(sequence: SeqStmt, site: Site) -> int | None:
    """Which statement of ``sequence`` holds the block, or None when none does."""
    chain = site.chain
    for depth, node in enumerate(chain[:-1]):
        if node is sequence:
            return _position(sequence, chain[depth + 1])
    return None


def body_stmts(loop: For) -> tuple[Stmt, ...]:
    """The statements of a loop body, in order."""
    return loop.body.stmts if isinstance(loop.body, SeqStmt) else (loop.body,)


def child_index(loop: For, site: Site) -> int:
    """Which statement of ``loop``'s body holds the block (the block is under ``loop``)."""
    stmts = body_stmts(loop)
    return next(n for n, stmt in enumerate(stmts) if stmt is site.realize or site.is_under(stmt))


# -- regions in loop variables -----------------------------------------------------------------

def region_in_loops(realize: BlockRealize, region: BufferRegion) -> BufferRegion:
    """A block's region (in its iterators) seen from outside, in the loop variables it is
    bound to."""
    mapping = {iv.var: b for iv, b in zip(realize.block.iter_vars, realize.bindings)}
    return BufferRegion(region.buffer, tuple(
        Range(simplify(substitute(r.start, mapping)), r.extent) for r in region.ranges))


def regions_of(site: Site, buffer: Buffer, writes: bool) -> list[BufferRegion]:
    """The block's declared regions of ``buffer`` (reads or writes), in loop variables."""
    declared = site.block.writes if writes else site.block.reads
    return [region_in_loops(site.realize, r) for r in declared if r.buffer is buffer]


def relax(region: BufferRegion, loops: Iterable[For]) -> BufferRegion:
    """The region covered while ``loops`` run over their ranges."""
    ranges = loop_ranges(loops)
    return relax_region(region, ranges) if ranges else region


def union(regions: Sequence[BufferRegion]) -> BufferRegion:
    """The smallest region covering all of ``regions`` (of one buffer)."""
    return reduce(region_union, regions)


def box_of(region: BufferRegion) -> list[tuple[Expr, int]]:
    """(start, constant extent) per dimension; a dimension without a constant extent is the
    whole dimension."""
    box = []
    for rng, dim in zip(region.ranges, region.buffer.shape):
        extent = const_int(rng.extent)
        box.append((rng.start, extent) if extent is not None else (IntImm(0), dim))
    return box


def offset_of(index: Expr, iterators: Sequence[IterVar]) -> tuple[IterVar, int] | None | str:
    """Read ``index`` as ``iterator + constant``: the pair, None for a constant, or "other"."""
    form = linearize(index)
    if not form.terms:
        return None
    if len(form.terms) == 1 and form.terms[0][1] == 1:
        for iv in iterators:
            if form.terms[0][0] is iv.var:
                return iv, form.const
    return "other"


# -- exact coverage ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Box:
    """One dimension of a target set: ``[start, start + extent)`` within ``[0, limit)``."""

    start: Expr
    extent: int
    limit: int


# What the coverage check groups: ("coord", dimension, vars), ("cond", conjunct, vars) or
# ("outer", variable, [variable]).
_Item = tuple[str, "int | Var", list[Var]]


def conjuncts(predicate: Expr) -> list[Expr]:
    """The terms of a conjunction, without literal Trues."""
    if isinstance(predicate, BinOp) and predicate.op == "and":
        return conjuncts(predicate.a) + conjuncts(predicate.b)
    if isinstance(predicate, IntImm) and predicate.value == 1:
        return []
    return [predicate]


def conjunction(terms: Sequence[Expr]) -> Expr:
    """``a and b and ...``; True when there are none."""
    return reduce(and_, terms) if terms else TRUE


def fills_exactly(coords: Sequence[Expr], predicate: Expr, domain: Mapping[Var, int],
                  boxes: Sequence[Box], outer: Sequence[Var] = ()) -> bool | None:
    """Whether ``{(o, coords(x)) : x in domain, predicate(x)}`` equals ``{(o, c) : c[d] in
    boxes[d](o)}``, ``o`` ranging over the ``outer`` variables (part of the domain, which maps
    each variable to its extent) and box starts depending on ``o`` only.

    The check is exact: loops that share an expression are grouped, and each group's
    iterations are enumerated. None when an expression cannot be evaluated (a load) or a
    group exceeds :data:`ENUMERATION_LIMIT` iterations.
    """
    items: list[_Item] = []
    for d, (coord, box) in enumerate(zip(coords, boxes)):
        items.append(("coord", d, vars_of(coord) + vars_of(box.start)))
    for n, term in enumerate(conjuncts(predicate)):
        items.append(("cond", n, vars_of(term)))
    items.extend(("outer", var, [var]) for var in outer)
    if any(var not in domain for _, _, used in items for var in used):
        return None
    parent: dict[Var, Var] = {}

    def root(var: Var) -> Var:
        while parent.get(var, var) is not var:
            var = parent[var]
        return var

    for _, _, used in items:
        for var in used[1:]:
            parent[root(var)] = root(used[0])
    groups: dict[int, list[_Item]] = {}
    for item in items:
        key = id(root(item[2][0])) if item[2] else id(item)
        groups.setdefault(key, []).append(item)
    terms = conjuncts(predicate)
    try:
        return all(_group_fills(group, coords, terms, domain, boxes, set(outer))
                   for group in groups.values())
    except _Unevaluable:
        return None


def _group_fills(group: list[_Item], coords: Sequence[Expr], terms: list[Expr],
                 domain: Mapping[Var, int], boxes: Sequence[Box], outer: set[Var]) -> bool:
    """The check for one group of dependent variables: enumerate their grid, keep the points
    the group's conditions allow, and compare the distinct points with the target's count."""
    variables = list({id(v): v for _, _, used in group for v in used}.values())
    size = int(np.prod([domain[v] for v in variables])) if variables else 1
    if size > ENUMERATION_LIMIT:
        raise _Unevaluable
    shape = tuple(domain[v] for v in variables)
    env = {v: np.arange(domain[v]).reshape([-1 if k == n else 1 for k in range(len(shape))])
           for n, v in enumerate(variables)}

    def full(expr: Expr) -> np.ndarray:
        return np.broadcast_to(np.asarray(_evaluate(expr, env)), shape)

    mask = np.ones(shape, dtype=bool)
    for kind, key, _ in group:
        if kind == "cond":
            mask &= full(terms[key]).astype(bool)
    columns, radices = [], []
    for kind, key, _ in group:
        if kind == "coord":
            box = boxes[key]
            value, start = full(coords[key])[mask], full(box.start)[mask]
            low, high = np.maximum(start, 0), np.minimum(start + box.extent, box.limit)
            if np.any(value < low) or np.any(value >= high):
                return False
            columns.append(value)
            radices.append(box.limit)
        elif kind == "outer":
            columns.append(np.broadcast_to(env[key], shape)[mask])
            radices.append(domain[key])
    found = _distinct(columns, radices) if columns else int(mask.any())
    return found == _expected(group, boxes, domain, outer)


def _distinct(columns: list[np.ndarray], radices: list[int]) -> int:
    """How many distinct rows the columns hold (each column's values lie in [0, radix))."""
    if float(np.prod([float(r) for r in radices])) < 2.0 ** 62:
        code = np.zeros(columns[0].shape, dtype=np.int64)
        for column, radix in zip(columns, radices):
            code = code * radix + column
        return int(np.unique(code).size)
    return int(np.unique(np.stack(columns), axis=1).shape[1])


def _expected(group: list[_Item], boxes: Sequence[Box], domain: Mapping[Var, int],
              outer: set[Var]) -> int:
    """How many points the target set holds for the group's dimensions and outer variables."""
    grid_vars = [key for kind, key, _ in group if kind == "outer"]
    shape = tuple(domain[v] for v in grid_vars)
    env = {v: np.arange(domain[v]).reshape([-1 if k == n else 1 for k in range(len(shape))])
           for n, v in enumerate(grid_vars)}
    count = np.ones(shape, dtype=np.int64)
    for kind, key, _ in group:
        if kind != "coord":
            continue
        box = boxes[key]
        if any(v not in outer for v in vars_of(box.start)):
            raise _Unevaluable
        start = np.broadcast_to(np.asarray(_evaluate(box.start, env)), shape)
        width = np.minimum(start + box.extent, box.limit) - np.maximum(start, 0)
        count = count * np.maximum(width, 0)
    return int(count.sum())


class _Unevaluable(Exception):
    """An expression the coverage check cannot evaluate over a grid."""


_NUMPY_OPS: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "floordiv": np.floor_divide,
    "floormod": np.mod, "min": np.minimum, "max": np.maximum, "eq": np.equal,
    "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "and": np.logical_and, "or": np.logical_or,
}


def _evaluate(expr: Expr, env: Mapping[Var, np.ndarray]) -> np.ndarray | int:
    """An integer or bool expression's value at every point of a grid of its variables."""
    if isinstance(expr, Var):
        return env[expr]
    if isinstance(expr, IntImm):
        return expr.value
    if isinstance(expr, BinOp) and expr.op in _NUMPY_OPS:
        return _NUMPY_OPS[expr.op](_evaluate(expr.a, env), _evaluate(expr.b, env))
    if isinstance(expr, Not):
        return np.logical_not(_evaluate(expr.a, env))
    if isinstance(expr, Select):
        return np.where(_evaluate(expr.cond, env), _evaluate(expr.true_value, env),
                        _evaluate(expr.false_value, env))
    if isinstance(expr, Cast) and expr.dtype.is_int:
        return _evaluate(expr.value, env)
    raise _Unevaluable


def domain_of(site: Site) -> dict[Var, int]:
    """Every variable a block's bindings may use, with its extent."""
    domain = {iv.var: iv.extent for iv in site.scope.block.iter_vars}
    domain.update({loop.var: loop.extent for loop in site.loops})
    return domain


def covers_domain(realize: BlockRealize, domain: Mapping[Var, int]) -> bool | None:
    """Whether the bindings reach every point of the block's iteration domain (and no other)."""
    boxes = [Box(IntImm(0), iv.extent, iv.extent) for iv in realize.block.iter_vars]
    return fills_exactly(realize.bindings, realize.predicate, domain, boxes)


def check_complete(site: Site, primitive: str) -> None:
    """Refuse a block whose loops do not run every point of its iteration domain, and a
    reduction without an init (recomputing part of it would accumulate twice)."""
    covered = covers_domain(site.realize, domain_of(site))
    check(covered is not None, primitive,
          f"cannot check that block {site.name!r} runs its whole iteration domain: its bindings "
          f"or predicate are not integer expressions of at most {ENUMERATION_LIMIT} loop "
          "iterations", site.realize)
    check(bool(covered), primitive,
          f"block {site.name!r} is not complete: its loops do not run every point of its "
          "iteration domain", site.realize)
    reduces = any(iv.kind is IterKind.REDUCE for iv in site.block.iter_vars)
    check(not reduces or site.block.init is not None, primitive,
          f"block {site.name!r} accumulates without an init; {primitive} may run part of it "
          "twice, adding twice (move it before decompose_reduction)", site.realize)


def writes_exactly(site: Site, region: BufferRegion, inner: Sequence[For], box: list[Box]
                   ) -> bool | None:
    """Whether, in each iteration of the loops outside ``inner``, the block writes every
    element of ``box`` (its write ``region`` relaxed over ``inner``) and nothing else."""
    domain = domain_of(site)
    coords: list[Expr] = []
    for rng in region.ranges:
        width = const_int(rng.extent)
        if width is None:
            return None
        if width == 1:
            coords.append(rng.start)
            continue
        lane = Var("lane")
        domain[lane] = width
        coords.append(rng.start + lane)
    inner_vars = {loop.var for loop in inner}
    outer = [var for var in domain_of(site) if var not in inner_vars]
    return fills_exactly(coords, site.realize.predicate, domain, box, outer)


def clipped_box(region: BufferRegion) -> list[Box]:
    """The region's dimensions as boxes within the buffer's shape."""
    return [Box(start, extent, dim)
            for (start, extent), dim in zip(box_of(region), region.buffer.shape)]


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


# -- the primitives ----------------------------------------------------------------------------

def _single_output(site: Site, primitive: str) -> Buffer:
    outputs = list(dict.fromkeys(r.buffer for r in site.block.writes))
    check(len(outputs) == 1, primitive,
          f"block {site.name!r} writes {len(outputs)} buffers "
          f"({', '.join(b.name for b in outputs)}); {primitive} moves a block with one output",
          site.realize)
    return outputs[0]


def _iterator_windows(site: Site, region: BufferRegion, box: list[tuple[Expr, int]],
                      primitive: str, role: str) -> dict[int, tuple[Expr, int]]:
    """For each iterator indexing ``region`` (as ``iterator + c``, width ``w``), the window
    ``(start, extent)`` of values for which that access stays within ``box``
    (``role`` "cover": touches it; "inside": lies in it). Keyed by iterator position."""
    windows: dict[int, tuple[Expr, int]] = {}
    iterators = site.block.iter_vars
    for rng, (start, extent) in zip(region.ranges, box):
        found = offset_of(rng.start, iterators)
        width = const_int(rng.extent)
        if found is None:
            continue
        check(found != "other" and width is not None, primitive,
              f"block {site.name!r} accesses {region.buffer.name} at index {rng.start}; "
              f"{primitive} requires each dimension indexed by one iterator plus a constant",
              site.realize)
        iv, offset = found  # type: ignore[misc]
        position = iterators.index(iv)
        if role == "cover":
            window = (simplify(start - offset - (width - 1)), extent + width - 1)
        else:
            window = (simplify(start - offset), extent - width + 1)
        check(window[1] > 0, primitive,
              f"block {site.name!r} reads {region.buffer.name}[{rng.start}:+{width}], wider "
              f"than the {extent} elements produced per iteration", site.realize)
        if position in windows:
            window = _intersect(windows[position], window, site, iv, primitive)
        windows[position] = window
    return windows


def _intersect(a: tuple[Expr, int], b: tuple[Expr, int], site: Site, iv: IterVar,
               primitive: str) -> tuple[Expr, int]:
    gap = linearize(b[0]) - linearize(a[0])
    check(gap.is_const, primitive,
          f"iterator {iv.var.name} of block {site.name!r} is constrained by two windows "
          f"starting at {a[0]} and {b[0]}, which cannot be compared", site.realize)
    low = max(0, gap.const)
    high = min(a[1], gap.const + b[1])
    check(high > low, primitive,
          f"iterator {iv.var.name} of block {site.name!r} has no value in both windows "
          f"starting at {a[0]} and {b[0]}", site.realize)
    return simplify(a[0] + low), high - low


def compute_at(func: PrimFunc, block: BlockRV, loop: LoopRV) -> tuple[PrimFunc, None]:
    """Move a producer block under ``loop`` of its consumers, computing in each iteration only
    the region of its output that the consumers under ``loop`` read in that iteration.

    The block gets new loops over that region, inserted in ``loop``'s body before the first
    statement holding a consumer; iterators its output does not depend on (reduce iterators
    among them) keep their whole range.

    Preconditions, each refused with its reason:

    - ``loop`` sits directly in the block's scope and is not around the block;
    - the block is complete: one output, an intermediate buffer (not a parameter) that no
      other block writes; its loops run its whole iteration domain; a reduction has an init;
    - every block that reads the output is under ``loop`` (at least one is);
    - the block comes before ``loop`` in program order, and no block in between (including
      those in ``loop``'s nest) writes a buffer the block reads;
    - its output is indexed by one iterator plus a constant per dimension.

    Returns the new function.

    >>> from ir import script as T
    >>> from tensorize.schedule import Schedule
    >>> @T.prim_func
    ... def scale_add(A: T.Buffer((8,), "int32"), C: T.Buffer((8,), "int32")):
    ...     B = T.alloc_buffer((8,), "int32")
    ...     for i in range(8):
    ...         with T.block("B"):
    ...             vi = T.axis.spatial(8, i)
    ...             B[vi] = A[vi] * 2
    ...     for i in range(8):
    ...         with T.block("C"):
    ...             vi = T.axis.spatial(8, i)
    ...             C[vi] = B[vi] + 1
    >>> sch = Schedule(scale_add)
    >>> outer, inner = sch.split(sch.get_loops(sch.get_block("C"))[0], [2, 4])
    >>> sch.compute_at(sch.get_block("B"), outer)
    >>> print(sch.func)
    @T.prim_func
    def scale_add(A: T.Buffer((8,), "int32"), C: T.Buffer((8,), "int32")):
        B = T.alloc_buffer((8,), "int32")
        for i_0 in range(2):
            for ax0 in range(4):
                with T.block("B"):
                    vi = T.axis.spatial(8, i_0 * 4 + ax0)
                    T.reads(A[vi])
                    T.writes(B[vi])
                    B[vi] = A[vi] * 2
            for i_1 in range(4):
                with T.block("C"):
                    vi = T.axis.spatial(8, i_0 * 4 + i_1)
                    T.reads(B[vi])
                    T.writes(C[vi])
                    C[vi] = B[vi] + 1
    """
    name = "compute_at"
    site = locate(func, block, name)
    target = get_loop(func, loop, name)
    same_scope(site, target, name)
    var = target.node.var.name
    output = _single_output(site, name)
    check(output not in func.params, name,
          f"block {site.name!r} writes {output.name}, a parameter of {func.name}: an output "
          "must be computed whole, not only where a consumer reads it", site.realize)
    siblings = sibling_sites(func, site.scope)
    others = [s for s in siblings if s.realize is not site.realize]
    writers = [s.name for s in others if output in s.writes()]
    check(not writers, name,
          f"block {site.name!r} is not the only writer of {output.name} (also "
          f"{', '.join(writers)})", site.realize)
    check_complete(site, name)
    readers = [s for s in others if output in s.reads()]
    check(bool(readers), name, f"no block reads {output.name}, the output of block "
                               f"{site.name!r}", site.realize)
    outside = [s.name for s in readers if not s.is_under(target.node)]
    check(not outside, name,
          f"block(s) {', '.join(outside)} read {output.name} but are not under loop {var}; "
          f"they would see only the part computed for the consumers under {var}", target.node)
    sequence, at, to = fork(site.chain, loop_chain(target), name)
    check(at < to, name,
          f"block {site.name!r} runs after loop {var}; the consumers under {var} would run "
          "before it", target.node)
    for other in others:
        spot = position_in(sequence, other)
        if spot is None or not at <= spot <= to:
            continue
        clash = sorted(b.name for b in other.writes() & site.reads())
        check(not clash, name,
              f"block {other.name!r} writes {', '.join(clash)}, which block {site.name!r} "
              f"reads, between its place and loop {var}", other.realize)
    required = union([relax(region, loops_below(reader, target.node)[1:])
                      for reader in readers for region in regions_of(reader, output, False)])
    written = next(r for r in site.block.writes if r.buffer is output)
    windows = _iterator_windows(site, written, box_of(required), name, "cover")
    starts, extents = [], []
    for position, iv in enumerate(site.block.iter_vars):
        start, extent = windows.get(position, (IntImm(0), iv.extent))
        if extent >= iv.extent:
            start, extent = IntImm(0), iv.extent
        starts.append(start)
        extents.append(extent)
    ranges = {**scope_ranges(site), **loop_ranges(loops_to(target))}
    nest = build_nest(site.block, starts, extents, ranges)
    stmts = list(body_stmts(target.node))
    first = min(child_index(target.node, reader) for reader in readers)
    stmts.insert(first, nest)
    edits = {id(removal(site, name)): (), id(target.node): (with_body(target.node, stmts),)}
    return splice_func(func, edits), None


def _check_no_partial_reduction(producer: Site, target: Located, consumer: Site,
                                primitive: str) -> None:
    """Refuse when a loop at or outside ``target`` advances a reduction of the producer: under
    it, the producer's output holds partial sums."""
    outside = {id(loop.var) for loop in loops_to(target)}
    for iv, binding in zip(producer.block.iter_vars, producer.realize.bindings):
        carried = [v.name for v in vars_of(binding) if id(v) in outside]
        if iv.kind is IterKind.REDUCE and carried:
            fail(primitive, f"loop {carried[0]} carries the reduction of block "
                            f"{producer.name!r} (iterator {iv.var.name}); under loop "
                            f"{target.node.var.name}, block {consumer.name!r} would read "
                            "partial results", target.node)


def reverse_compute_at(func: PrimFunc, block: BlockRV, loop: LoopRV) -> tuple[PrimFunc, None]:
    """Move a consumer block under ``loop`` of its producers, computing in each iteration
    exactly the part whose inputs the producers under ``loop`` have finished by then.

    The block gets new loops over that part, inserted in ``loop``'s body after the last
    statement holding a producer.

    Preconditions, each refused with its reason:

    - ``loop`` sits directly in the block's scope and is not around the block;
    - the block is complete (its loops run its whole domain; a reduction has an init);
    - some block under ``loop`` writes a buffer the block reads (a producer), and ``loop``
      comes before the block in program order;
    - no loop at or outside ``loop`` carries a producer's reduction (the block would read
      partial sums), and each producer writes, per iteration of ``loop``, exactly a box;
    - no block between ``loop`` and the block touches what the block writes, or writes what
      it reads (except the producers under ``loop``);
    - the block reads the produced buffers with one iterator plus a constant per dimension,
      only inside what is produced in the same iteration, and over all iterations still runs
      its whole domain.

    Returns the new function.

    >>> from ir import script as T
    >>> from tensorize.schedule import Schedule
    >>> @T.prim_func
    ... def scale_add(A: T.Buffer((8,), "int32"), C: T.Buffer((8,), "int32")):
    ...     B = T.alloc_buffer((8,), "int32")
    ...     for i in range(8):
    ...         with T.block("B"):
    ...             vi = T.axis.spatial(8, i)
    ...             B[vi] = A[vi] * 2
    ...     for i in range(8):
    ...         with T.block("C"):
    ...             vi = T.axis.spatial(8, i)
    ...             C[vi] = B[vi] + 1
    >>> sch = Schedule(scale_add)
    >>> (i,) = sch.get_loops(sch.get_block("B"))
    >>> sch.reverse_compute_at(sch.get_block("C"), i)
    >>> [b.name for b in sch.get_child_blocks(i)]
    ['B', 'C']
    """
    name = "reverse_compute_at"
    site = locate(func, block, name)
    target = get_loop(func, loop, name)
    same_scope(site, target, name)
    var = target.node.var.name
    check_complete(site, name)
    siblings = sibling_sites(func, site.scope)
    others = [s for s in siblings if s.realize is not site.realize]
    producers = [s for s in others if s.is_under(target.node) and s.writes() & site.reads()]
    check(bool(producers), name,
          f"no block under loop {var} writes what block {site.name!r} reads "
          f"({', '.join(sorted(b.name for b in site.reads())) or 'it reads nothing'})",
          target.node)
    sequence, at, to = fork(loop_chain(target), site.chain, name)
    check(at < to, name,
          f"block {site.name!r} runs before loop {var}; moving it under {var} would make it "
          "read what its producers write later", target.node)
    for other in others:
        spot = position_in(sequence, other)
        if spot is None or not at <= spot <= to:
            continue
        touched = sorted(b.name for b in (other.reads() | other.writes()) & site.writes())
        check(not touched, name,
              f"block {other.name!r} accesses {', '.join(touched)}, which block {site.name!r} "
              f"writes, between loop {var} and the block; moving the block would change what "
              "it sees", other.realize)
        if not other.is_under(target.node):
            clash = sorted(b.name for b in other.writes() & site.reads())
            check(not clash, name,
                  f"block {other.name!r} writes {', '.join(clash)}, which block {site.name!r} "
                  f"reads, between loop {var} and the block", other.realize)
    windows: dict[int, tuple[Expr, int]] = {}
    produced: dict[Buffer, BufferRegion] = {}
    for buffer in dict.fromkeys(b for p in producers for b in p.writes() & site.reads()):
        produced[buffer] = _produced_region(buffer, producers, target, site, name)
        for region in site.block.reads:
            if region.buffer is buffer:
                for position, window in _iterator_windows(site, region,
                                                          box_of(produced[buffer]), name,
                                                          "inside").items():
                    if position in windows:
                        window = _intersect(windows[position], window, site,
                                            site.block.iter_vars[position], name)
                    windows[position] = window
    ranges = {**scope_ranges(site), **loop_ranges(loops_to(target))}
    starts, extents = [], []
    for position, iv in enumerate(site.block.iter_vars):
        start, extent = windows.get(position, (IntImm(0), iv.extent))
        if extent >= iv.extent and prove(start <= 0, ranges) and \
                prove(start + extent >= iv.extent, ranges):
            start, extent = IntImm(0), iv.extent
        check(iv.kind is IterKind.SPATIAL or (extent == iv.extent and const_int(start) == 0),
              name, f"reduce iterator {iv.var.name} of block {site.name!r} would run over only "
                    f"part of its range under loop {var}", site.realize)
        starts.append(start)
        extents.append(extent)
    nest = build_nest(site.block, starts, extents, ranges)
    moved = next(node for node, _ in tree.walk_under(nest) if isinstance(node, BlockRealize))
    new_loops = [node for node, _ in tree.walk_under(nest) if isinstance(node, For)]
    _check_reads_inside(site, moved, produced, ranges, new_loops, var, name)
    domain = {iv.var: iv.extent for iv in site.scope.block.iter_vars}
    domain.update({loop.var: loop.extent for loop in (*loops_to(target), *new_loops)})
    covered = covers_domain(moved, domain)
    check(bool(covered), name,
          f"under loop {var}, block {site.name!r} would not run its whole domain: the "
          f"producers under {var} do not produce everything it reads", target.node)
    stmts = list(body_stmts(target.node))
    last = max(child_index(target.node, producer) for producer in producers)
    stmts.insert(last + 1, nest)
    edits = {id(removal(site, name)): (), id(target.node): (with_body(target.node, stmts),)}
    return splice_func(func, edits), None


def _produced_region(buffer: Buffer, producers: list[Site], target: Located, consumer: Site,
                     primitive: str) -> BufferRegion:
    """The region of ``buffer`` the producers under ``target`` finish in one of its
    iterations; each must write exactly that box."""
    var = target.node.var.name
    boxes: list[BufferRegion] = []
    for producer in producers:
        if buffer not in producer.writes():
            continue
        _check_no_partial_reduction(producer, target, consumer, primitive)
        inner = loops_below(producer, target.node)[1:]
        region = union(regions_of(producer, buffer, True))
        relaxed = relax(region, inner)
        exact = writes_exactly(producer, region, inner, clipped_box(relaxed))
        check(bool(exact), primitive,
              f"block {producer.name!r} does not write all of {buffer.name}"
              f"[{_show(relaxed)}] in each iteration of loop {var} (or the check cannot tell); "
              f"block {consumer.name!r} cannot tell what is finished", producer.realize)
        boxes.append(relaxed)
    for other in boxes[1:]:
        check(all(const_int(a.extent) == const_int(b.extent)
                  and linearize(a.start) == linearize(b.start)
                  for a, b in zip(boxes[0].ranges, other.ranges)), primitive,
              f"the blocks under loop {var} write different regions of {buffer.name} "
              f"([{_show(boxes[0])}] and [{_show(other)}])", target.node)
    return boxes[0]


def _check_reads_inside(site: Site, moved: BlockRealize, produced: dict[Buffer, BufferRegion],
                        ranges: Mapping[Var, Interval], new_loops: list[For], var: str,
                        primitive: str) -> None:
    inner_ranges = {**ranges, **loop_ranges(new_loops)}
    for region in site.block.reads:
        if region.buffer not in produced:
            continue
        read = relax(region_in_loops(moved, region), new_loops)
        for got, have in zip(read.ranges, produced[region.buffer].ranges):
            inside = prove(got.start >= have.start, inner_ranges) and \
                prove(got.start + got.extent <= have.start + have.extent, inner_ranges)
            check(inside, primitive,
                  f"block {site.name!r} reads {region.buffer.name}[{_show(read)}], beyond "
                  f"[{_show(produced[region.buffer])}] that the blocks under loop {var} "
                  "produce in that iteration", moved)


def _show(region: BufferRegion) -> str:
    """The ranges of a region as ``start:+extent`` (a point as its index)."""
    parts = []
    for rng in region.ranges:
        extent = const_int(rng.extent)
        parts.append(str(rng.start) if extent == 1 else f"{rng.start}:+{rng.extent}")
    return ", ".join(parts)
