"""blockize: make the loop nest under a loop one block, around the block it holds.

The loops from a given loop down to the one block they contain become the body of a new
*outer* block, ``<name>_o``. The outer block iterates over the outer parts of the inner
block's iterators: each inner binding must split as ``outer * stride + inner``, with
``inner`` a function of the loops inside (taking values in ``[0, stride)``) and ``outer`` a
function of the loops outside. Iterators whose outer parts are equal share one outer
iterator, which is reduce when any of them is. The outer block is the unit ``tensorize``
replaces by one intrinsic call.

The inner block keeps its iterators, extents, body and name, so it stays isolated; only its
bindings change, to ``v_o * stride + inner``. A binding with no outer part (its loops are all
inside, or the loops outside have extent 1) gets no outer iterator. Predicate terms that use
only loops outside go to the outer block; the others stay on the inner block, written in the
outer iterators. The outer block is named ``<name>_o``, numbered when that name is taken.

The init of a reduction runs where all of a block's reduce iterators are 0. The rule:

- The init moves to the outer block (run over the inner spatial loops, the inner reduce
  iterators taken as 0) when the outer block has a reduce iterator and, inside one outer
  iteration, the first inner iteration that touches an output element is the only one that
  would have run the init for it. That holds when: every outer reduce iterator comes from
  inner reduce iterators only; each loop inside (of extent above 1) drives exactly one
  iterator, with a positive coefficient; the inner parts of the spatial iterators are
  one-to-one (distinct loops, mixed-radix coefficients); and the inner predicate uses no
  loop of a reduce iterator. Then the element's iterations inside the tile are one spatial
  point times the full box of reduce loops, whose first point (all 0) is where the original
  init ran; zeroing the tile at the start of the outer iteration instead is the same.
- Otherwise the inner block keeps its init and the outer block gets none. That is always
  sound (the inner block computes exactly what it did), but it leaves the init where an
  accumulating intrinsic cannot absorb it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ir import (TRUE, BinOp, Block, BlockRealize, BufferRegion, BufferStore, Expr, For,
                IfThenElse, IntImm, IntrinsicCall, IterKind, IterVar, PrimFunc, Range, SeqStmt,
                Stmt, Var, and_, const, post_order_visit, substitute)
from ir.arith import Interval, LinearForm, bound_form, linearize, simplify, to_expr
from ir.regions import infer_block_regions
from tensorize.schedule import tree
from tensorize.schedule.check import check, fail, get_loop
from tensorize.schedule.handles import BlockRV, LoopRV

__all__ = ["blockize"]

_PRIMITIVE = "blockize"


@dataclass(frozen=True, slots=True)
class _Part:
    """One inner iterator's binding split as ``outer * stride + inner``."""

    iter_var: IterVar
    outer: LinearForm | None  # over the loops outside; None when the binding has no outer part
    stride: int
    inner: LinearForm  # over the loops inside, taking values in [0, stride)


@dataclass(frozen=True, slots=True)
class _OuterIter:
    """An iterator of the outer block: its binding over the loops outside, and the inner
    iterators whose outer part it is."""

    iter_var: IterVar
    form: LinearForm
    parts: tuple[_Part, ...]


def blockize(func: PrimFunc, loop: LoopRV) -> tuple[PrimFunc, BlockRV]:
    """Turn ``loop`` and the loops under it into a new block ``<inner>_o`` around the one
    block they contain.

    Preconditions: under ``loop`` there are only loops, perfectly nested, around exactly one
    block; every binding of that block splits into a part over the loops outside ``loop``
    times a stride plus a part over the loops inside that stays below the stride; predicate
    terms that use loops inside use, from outside, only loops some outer iterator equals.
    The init moves to the outer block when that is sound (see the module documentation);
    otherwise it stays on the inner block.

    Returns the new function and the handle of the outer block.

    >>> from ir import script as T
    >>> from tensorize.schedule import Schedule
    >>> @T.prim_func
    ... def double(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32")):
    ...     for i in range(8):
    ...         with T.block("B"):
    ...             vi = T.axis.spatial(8, i)
    ...             B[vi] = A[vi] * 2
    >>> sch = Schedule(double)
    >>> outer, inner = sch.split(sch.get_loops(sch.get_block("B"))[0], [None, 4])
    >>> tile = sch.blockize(inner)
    >>> [(iv.var.name, iv.extent) for iv in sch.get(tile).block.iter_vars]
    [('vi_o', 2)]
    >>> print(sch.get(sch.get_block("B")).bindings[0])
    vi_o * 4 + i_1
    """
    found = get_loop(func, loop, _PRIMITIVE)
    top: For = found.node
    inner_loops, realize = _loop_nest(top)
    block = realize.block
    inside = _ranges(inner_loops)
    outside = _ranges(tree.enclosing_loops(found.path))
    parts = [_split_binding(iv, binding, block.name, top, inside, outside)
             for iv, binding in zip(block.iter_vars, realize.bindings)]
    outer_terms, inner_terms = _split_predicate(realize.predicate, inside)
    outer_iters = _outer_iterators(parts, outside, guarded=bool(outer_terms))
    inner_terms = _lift_terms(inner_terms, block.name, top, inside, outside, outer_iters)
    bindings = _inner_bindings(parts, outer_iters, realize.bindings)
    outer_pred = _conjunction(outer_terms)
    inner_pred = _conjunction(inner_terms)

    init = None
    inner_block = block
    if block.init is not None and _init_liftable(parts, outer_iters, inner_loops, inner_terms):
        init = _outer_init(block, parts, bindings, inner_loops, inner_terms)
        inner_block = _without_init(block)

    stmt: Stmt = BlockRealize(bindings, inner_block, inner_pred, realize.loc)
    for node in reversed(inner_loops):
        stmt = For(node.var, node.extent, stmt, node.kind, node.thread, node.loc)
    name = _unique_name(func, f"{block.name}_o")
    outer_block = Block(name, tuple(o.iter_var for o in outer_iters), (), (), stmt, init,
                        loc=block.loc)
    reads, writes = infer_block_regions(outer_block)
    outer_block = Block(name, outer_block.iter_vars, tuple(_clamp(r) for r in reads),
                        tuple(_clamp(w) for w in writes), stmt, init, loc=block.loc)
    outer_bindings = tuple(to_expr(o.form, o.iter_var.var.dtype) for o in outer_iters)
    outer = BlockRealize(outer_bindings, outer_block, outer_pred, realize.loc)
    return tree.replace_stmt(func, top, outer), BlockRV(name)


def _loop_nest(top: For) -> tuple[list[For], BlockRealize]:
    """The loops from ``top`` down, each the only statement of the one before, and the block
    at the bottom."""
    loops = [top]
    body = top.body
    while isinstance(body, For):
        loops.append(body)
        body = body.body
    if isinstance(body, BlockRealize):
        return loops, body
    blocks = tree.child_block_realizes(top)
    if len(blocks) > 1:
        names = ", ".join(repr(b.block.name) for b in blocks)
        fail(_PRIMITIVE, f"loop {top.var.name} requires exactly one block under it, got "
                         f"{len(blocks)} ({names})", top)
    fail(_PRIMITIVE, f"loop {top.var.name} requires only loops around one block under it, got "
                     f"{_describe(body)} in loop {loops[-1].var.name}", body)


def _describe(stmt: Stmt) -> str:
    if isinstance(stmt, SeqStmt):
        return "a sequence of statements"
    if isinstance(stmt, IfThenElse):
        return "a branch (if)"
    if isinstance(stmt, BufferStore):
        return f"a store to {stmt.buffer.name} outside any block"
    if isinstance(stmt, IntrinsicCall):
        return f"a call of {stmt.intrinsic} outside any block"
    return f"a {type(stmt).__name__}"


def _ranges(loops: list[For]) -> dict[Var, Interval]:
    return {node.var: Interval(0, node.extent - 1) for node in loops}


def _vars_in(expr: Expr) -> list[Var]:
    found: list[Var] = []
    post_order_visit(expr, lambda node: found.append(node) if isinstance(node, Var) else None)
    return found


def _split_binding(iv: IterVar, binding: Expr, block: str, top: For,
                   inside: dict[Var, Interval], outside: dict[Var, Interval]) -> _Part:
    """Split ``binding`` as ``outer * stride + inner``, the smallest stride that works."""
    form = linearize(binding)
    inner_terms, outer_terms = [], []
    for atom, coeff in form.terms:
        used = _vars_in(atom)
        inner_vars = [v for v in used if v in inside]
        outer_vars = [v for v in used if v not in inside]
        if inner_vars and outer_vars:
            fail(_PRIMITIVE, f"block {block!r} requires each binding to split into a part over "
                             f"the loops outside loop {top.var.name} and a part over those "
                             f"inside, got {iv.var.name} = {binding}, whose term {atom} mixes "
                             f"loop {inner_vars[0].name} (inside) with loop "
                             f"{outer_vars[0].name} (outside)", binding)
        (inner_terms if inner_vars else outer_terms).append((atom, coeff))
    inner = LinearForm(tuple(inner_terms), 0)
    span = bound_form(inner, inside)
    check(span.is_bounded, _PRIMITIVE, f"block {block!r}: the part of binding {iv.var.name} = "
                                       f"{binding} inside loop {top.var.name} is unbounded")
    width = span.hi - span.lo + 1
    inner = LinearForm(inner.terms, -span.lo)
    rest = LinearForm(tuple(outer_terms), form.const + span.lo)
    fixed = bound_form(rest, outside)
    if fixed.is_point and fixed.lo is not None:  # loops of extent 1 outside add a constant
        rest = LinearForm.of_const(fixed.lo)
    if rest.is_const and rest.const == 0:
        return _Part(iv, None, width, inner)
    step = math.gcd(rest.const, *(c for _, c in rest.terms))
    stride = next((d for d in range(width, step + 1) if step % d == 0), None)
    if stride is None:
        fail(_PRIMITIVE, f"block {block!r} requires each binding to be outer * extent + inner "
                         f"with the inner part below the extent, got {iv.var.name} = {binding}, "
                         f"whose part inside loop {top.var.name} takes {width} values while "
                         f"the part outside moves in steps of {step}", binding)
    outer = LinearForm(tuple((a, c // stride) for a, c in rest.terms), rest.const // stride)
    low = bound_form(outer, outside).lo
    check(low is not None and low >= 0, _PRIMITIVE,
          f"block {block!r}: binding {iv.var.name} = {binding} requires a part outside loop "
          f"{top.var.name} that is never negative, got {to_expr(outer)}", binding)
    return _Part(iv, outer, stride, inner)


def _same_form(a: LinearForm, b: LinearForm) -> bool:
    diff = a - b
    return diff.is_const and diff.const == 0


def _outer_iterators(parts: list[_Part], outside: dict[Var, Interval], guarded: bool
                     ) -> list[_OuterIter]:
    """One outer iterator per distinct outer part, in order of first use.

    An iterator's extent covers every value its binding takes, so that an unguarded outer
    block stays in range. Under a predicate (``guarded``), values past the inner iterator's
    extent run no work, and the extent stops at the last value that does.
    """
    groups: list[tuple[LinearForm, list[_Part]]] = []
    for part in parts:
        if part.outer is None:
            continue
        group = next((g for form, g in groups if _same_form(form, part.outer)), None)
        if group is None:
            groups.append((part.outer, [part]))
        else:
            group.append(part)
    result = []
    for form, group in groups:
        first = group[0]
        high = bound_form(form, outside).hi
        needed = [-(-p.iter_var.extent // p.stride) for p in group]
        extent = max(needed) if high is None else high + 1
        if guarded:
            extent = min(extent, max(needed))
        kind = IterKind.REDUCE if any(p.iter_var.kind is IterKind.REDUCE for p in group) \
            else IterKind.SPATIAL
        var = Var(f"{first.iter_var.var.name}_o", first.iter_var.var.dtype)
        result.append(_OuterIter(IterVar(var, extent, kind, first.iter_var.loc), form,
                                 tuple(group)))
    return result


def _outer_of(part: _Part, outer_iters: list[_OuterIter]) -> _OuterIter | None:
    return next((o for o in outer_iters if any(p is part for p in o.parts)), None)


def _inner_bindings(parts: list[_Part], outer_iters: list[_OuterIter],
                    old: tuple[Expr, ...]) -> tuple[Expr, ...]:
    """Each inner binding as ``v_o * stride + inner``."""
    result = []
    for part, binding in zip(parts, old):
        outer = _outer_of(part, outer_iters)
        form = part.inner
        if outer is not None:
            form = LinearForm(((outer.iter_var.var, part.stride),), 0) + form
        result.append(to_expr(form, binding.dtype))
    return tuple(result)


def _conjuncts(pred: Expr) -> list[Expr]:
    if pred == TRUE:
        return []
    if isinstance(pred, BinOp) and pred.op == "and":
        return _conjuncts(pred.a) + _conjuncts(pred.b)
    return [pred]


def _conjunction(terms: list[Expr]) -> Expr:
    if not terms:
        return TRUE
    result = terms[0]
    for term in terms[1:]:
        result = and_(result, term)
    return result


def _split_predicate(pred: Expr, inside: dict[Var, Interval]) -> tuple[list[Expr], list[Expr]]:
    """The predicate's terms over loops outside only (for the outer block), and the rest."""
    outer_terms, inner_terms = [], []
    for term in _conjuncts(pred):
        uses_inside = any(v in inside for v in _vars_in(term))
        (inner_terms if uses_inside else outer_terms).append(term)
    return outer_terms, inner_terms


def _lift_terms(terms: list[Expr], block: str, top: For, inside: dict[Var, Interval],
                outside: dict[Var, Interval], outer_iters: list[_OuterIter]) -> list[Expr]:
    """The inner block's predicate terms with each loop outside replaced by the outer
    iterator equal to it (or by its value, for a loop of extent 1); a loop outside that no
    outer iterator equals cannot be reached."""
    equal_to: dict[Var, Expr] = {var: const(span.lo, var.dtype)
                                 for var, span in outside.items()
                                 if span.is_point and span.lo is not None}
    for outer in outer_iters:
        terms_of = outer.form.terms
        if outer.form.const == 0 and len(terms_of) == 1 and terms_of[0][1] == 1 \
                and isinstance(terms_of[0][0], Var):
            equal_to.setdefault(terms_of[0][0], outer.iter_var.var)
    lifted_terms = []
    for term in terms:
        lifted = simplify(substitute(term, equal_to))
        stranded = [v for v in _vars_in(lifted) if v not in inside
                    and not any(v is o.iter_var.var for o in outer_iters)]
        if stranded:
            fail(_PRIMITIVE, f"block {block!r} requires its predicate terms that use loops "
                             f"inside loop {top.var.name} to use, from outside, only loops "
                             f"an outer iterator equals, got {term} using loop "
                             f"{stranded[0].name}", term)
        lifted_terms.append(lifted)
    return lifted_terms


def _init_liftable(parts: list[_Part], outer_iters: list[_OuterIter], loops: list[For],
                   inner_pred: list[Expr]) -> bool:
    """True when the outer block can run the init instead of the inner block (the
    conditions of the module documentation)."""
    if not any(o.iter_var.kind is IterKind.REDUCE for o in outer_iters):
        return False
    for outer in outer_iters:
        if outer.iter_var.kind is IterKind.REDUCE and \
                any(p.iter_var.kind is not IterKind.REDUCE for p in outer.parts):
            return False
    used: dict[Var, IterKind] = {}
    for part in parts:
        for atom, coeff in part.inner.terms:
            if not isinstance(atom, Var) or coeff <= 0 or atom in used:
                return False
            used[atom] = part.iter_var.kind
        if part.iter_var.kind is IterKind.SPATIAL and not _one_to_one(part.inner, loops):
            return False
    if any(node.var not in used and node.extent > 1 for node in loops):
        return False  # a loop no iterator follows would run the init's position again
    reduce_loops = {v for v, kind in used.items() if kind is IterKind.REDUCE}
    return not any(v in reduce_loops for term in inner_pred for v in _vars_in(term))


def _one_to_one(form: LinearForm, loops: list[For]) -> bool:
    """True when the positive-coefficient form of distinct loop variables is mixed radix:
    each coefficient exceeds the largest value the smaller terms reach together."""
    extents: dict[Expr, int] = {node.var: node.extent for node in loops}
    reach = 0
    for atom, coeff in sorted(form.terms, key=lambda term: term[1]):
        if coeff <= reach:
            return False
        reach += coeff * (extents[atom] - 1)
    return True


def _outer_init(block: Block, parts: list[_Part], bindings: tuple[Expr, ...],
                loops: list[For], inner_pred: list[Expr]) -> Stmt:
    """The inner init run over fresh copies of the inner spatial loops, reduce iterators 0."""
    spatial = {atom for part in parts if part.iter_var.kind is IterKind.SPATIAL
               for atom, _ in part.inner.terms}
    init_loops = [node for node in loops if node.var in spatial]
    fresh = {node.var: Var(node.var.name, node.var.dtype) for node in init_loops}
    values: dict[Var, Expr] = {}
    for part, binding in zip(parts, bindings):
        var = part.iter_var.var
        values[var] = substitute(binding, fresh) if part.iter_var.kind is IterKind.SPATIAL \
            else const(0, var.dtype)
    stmt: Stmt = substitute(block.init, values)
    if inner_pred:
        stmt = IfThenElse(substitute(_conjunction(inner_pred), fresh), stmt)
    for node in reversed(init_loops):
        stmt = For(fresh[node.var], node.extent, stmt, node.kind, node.thread, node.loc)
    return stmt


def _clamp(region: BufferRegion) -> BufferRegion:
    """``region`` cut to the buffer's bounds where its start is a constant (loops that a
    predicate guards relax past them)."""
    ranges = []
    for rng, dim in zip(region.ranges, region.buffer.shape):
        if isinstance(rng.start, IntImm) and isinstance(rng.extent, IntImm):
            start = max(rng.start.value, 0)
            end = min(rng.start.value + rng.extent.value, dim)
            rng = Range(IntImm(start, rng.start.dtype), IntImm(end - start, rng.extent.dtype))
        ranges.append(rng)
    return BufferRegion(region.buffer, tuple(ranges))


def _without_init(block: Block) -> Block:
    bare = Block(block.name, block.iter_vars, (), (), block.body, None, block.alloc_buffers,
                 block.annotations, block.loc)
    reads, writes = infer_block_regions(bare)
    return Block(block.name, block.iter_vars, tuple(reads), tuple(writes), block.body, None,
                 block.alloc_buffers, block.annotations, block.loc)


def _unique_name(func: PrimFunc, wanted: str) -> str:
    taken = set(tree.block_names(func))
    name, n = wanted, 1
    while name in taken:
        name, n = f"{wanted}{n}", n + 1
    return name
