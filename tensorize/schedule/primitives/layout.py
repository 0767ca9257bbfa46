"""Layout primitives: transform_layout, transform_block_layout, reindex.

They change how data and iterations are indexed, not what is computed. Together they turn a
convolution into a GEMM (im2col): ``reindex`` copies the input into a buffer indexed by the
conv block's own iterators, ``transform_block_layout`` fuses the block's ``(n, h, w)`` and
``(rh, rw, rc)`` iterators, and ``transform_layout`` fuses the copy's dimensions to match.

The helpers below the primitives (buffer lookup, the simple loop nest around a block, splicing
new blocks in) are shared with :mod:`.padding`.
"""

from __future__ import annotations

import dataclasses
import keyword
from collections.abc import Callable, Sequence
from typing import Any

from ir import (Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, Expr, For,
                ForKind, IntImm, IntrinsicCall, IterKind, IterVar, Mutator, Node, PrimFunc,
                Range, SeqStmt, Stmt, Var, post_order_visit, seq, substitute)
from ir.arith import Interval, bound, is_affine, simplify
from ir.regions import infer_block_regions
from tensorize.schedule import tree
from tensorize.schedule.check import arg_check, check, fail, get_block
from tensorize.schedule.handles import BlockRV
from tensorize.schedule.index_map import IndexMap, as_index_map, simplify_index
from tensorize.schedule.tree import Located

__all__ = ["reindex", "transform_block_layout", "transform_layout"]

BufferArg = str | tuple[str, int] | list[Any]


def transform_layout(func: PrimFunc, block: BlockRV, buffer: BufferArg,
                     index_map: IndexMap | Callable[..., Any] | str) -> tuple[PrimFunc, None]:
    """Store ``buffer`` in a new layout: element ``B[idx]`` moves to ``B'[index_map(idx)]``.

    ``buffer`` is a buffer ``block`` reads or writes, by name or as ``("read", i)`` /
    ``("write", i)`` (its i-th read or write region); ``index_map`` is an IndexMap, a lambda or
    lambda text with one parameter per dimension. The new buffer keeps the name, dtype and
    scope and takes the map's target shape (dense, no strides); every access in the function is
    rewritten, and the regions of every block that touches it are inferred again. When the
    buffer is a parameter, the function's parameter changes shape too: callers pass and read
    arrays in the new layout (``new[index_map(idx)] = old[idx]``).

    Preconditions: the map is a bijection of the buffer's shape (a map into a bigger box, which
    would pad, is refused); no intrinsic call accesses the buffer.

    >>> from ir import script as T
    >>> from tensorize.schedule import Schedule
    >>> @T.prim_func
    ... def f(A: T.Buffer((4, 8), "int32"), C: T.Buffer((4, 8), "int32")):
    ...     B = T.alloc_buffer((4, 8), "int32")
    ...     for i, j in T.grid(4, 8):
    ...         with T.block("B"):
    ...             vi, vj = T.axis.remap("SS", [i, j])
    ...             B[vi, vj] = A[vi, vj] + 1
    ...     for i, j in T.grid(4, 8):
    ...         with T.block("C"):
    ...             vi, vj = T.axis.remap("SS", [i, j])
    ...             C[vi, vj] = B[vi, vj] * 2
    >>> sch = Schedule(f)
    >>> sch.transform_layout(sch.get_block("B"), "B", lambda i, j: (j // 4, i, j % 4))
    >>> sch.func.allocs[0].shape
    (2, 4, 4)
    >>> print(sch.get(sch.get_block("C")).block.body)
    C[vi, vj] = B[vj // 4, vi, vj % 4] * 2
    """
    primitive = "transform_layout"
    realize: BlockRealize = get_block(func, block, primitive).node
    target, _ = resolve_buffer(realize.block, buffer, primitive)
    mapping = as_index_map(index_map, primitive)
    check(len(mapping.source) == target.ndim, primitive,
          f"index map {mapping} takes {len(mapping.source)} indices but buffer {target.name} "
          f"has {target.ndim} dimensions")
    reason = mapping.why_not_bijective(list(target.shape))
    check(reason is None, primitive,
          f"index map {mapping} is not a bijection of buffer {target.name}'s shape "
          f"{target.shape} (transform_layout does not pad): {reason}")
    for node, _ in tree.walk_stmts(func):
        if isinstance(node, IntrinsicCall) and any(
                isinstance(a, BufferRegion) and a.buffer is target for a in node.args):
            fail(primitive, f"buffer {target.name} is an operand of intrinsic call "
                            f"{node.intrinsic}; transform its layout before tensorizing")
    new = target.with_(shape=mapping.target_shape(list(target.shape)), strides=None)
    ranges = _index_ranges(func)

    def relayout(buf: Buffer, indices: tuple[Expr, ...]) -> tuple[Buffer, tuple[Expr, ...]] | None:
        return (new, mapping.apply(indices, ranges)) if buf is target else None

    body = _RegionUpdater(relayout, {target: new}).visit(func.body)
    params = tuple(new if p is target else p for p in func.params)
    return PrimFunc(func.name, params, body, func.loc), None


def transform_block_layout(func: PrimFunc, block: BlockRV,
                           index_map: IndexMap | Callable[..., Any] | str
                           ) -> tuple[PrimFunc, None]:
    """Give a block a new iteration space: its new iterators are ``index_map(old iterators)``.

    ``lambda n, h, w, co, rh, rw, rc: (n * H * W + h * W + w, co, rh * 3 * C + rw * C + rc)``
    turns a convolution's seven iterators into a GEMM's three. The block's loops are replaced
    by one loop per new iterator (serial, in the map's target order), and the body reads the
    old iterators back through the map's inverse.

    Preconditions: the block sits alone under one serial loop per iterator, each loop bound to
    exactly its iterator, in order, with no predicate; the map is a bijection of the iterator
    extents; no new iterator mixes spatial and reduce iterators.

    >>> from tests.tensorize.schedule.kernels import gemm_int8
    >>> from tensorize.schedule import Schedule
    >>> sch = Schedule(gemm_int8(8, 4, 2))
    >>> sch.transform_block_layout(sch.get_block("C"), lambda i, j, k: (i * 4 + j, k))
    >>> [iv.extent for iv in sch.get(sch.get_block("C")).block.iter_vars]
    [32, 2]
    """
    primitive = "transform_block_layout"
    found = get_block(func, block, primitive)
    realize: BlockRealize = found.node
    old = realize.block
    mapping = as_index_map(index_map, primitive)
    check(len(mapping.source) == len(old.iter_vars), primitive,
          f"index map {mapping} takes {len(mapping.source)} indices but block {old.name} has "
          f"{len(old.iter_vars)} iterators")
    loops = simple_loop_nest(found, primitive, in_order=True)
    extents = [iv.extent for iv in old.iter_vars]
    reason = mapping.why_not_bijective(extents)
    check(reason is None, primitive,
          f"index map {mapping} is not a bijection of block {old.name}'s iteration space "
          f"{tuple(extents)}: {reason}")
    new_extents = mapping.target_shape(extents)
    old_ranges = {iv.var: Interval(0, iv.extent - 1) for iv in old.iter_vars}
    kinds, names, loop_names, locs = [], [], [], []
    old_vars = [iv.var for iv in old.iter_vars]
    # Kinds follow the simplified targets (an extent-1 iterator drops out); names the written.
    for target, written in zip(mapping.apply(old_vars, old_ranges), mapping.apply(old_vars)):
        used = [iv for iv in old.iter_vars if _uses(target, iv.var)]
        used_kinds = {iv.kind for iv in used}
        check(len(used_kinds) <= 1, primitive,
              f"new iterator {target} of block {old.name} mixes spatial and reduce iterators "
              f"({', '.join(f'{iv.var.name}: {iv.kind.value}' for iv in used)})")
        kinds.append(used_kinds.pop() if used_kinds else IterKind.SPATIAL)
        # A map may make more iterators than it takes (a split): each takes the source
        # position of the first old iterator it uses.
        locs.append(used[0].loc if used else old.iter_vars[0].loc)
        named = [(iv, loop) for iv, loop in zip(old.iter_vars, loops) if _uses(written, iv.var)]
        names.append("_".join(iv.var.name for iv, _ in named) or "v")
        loop_names.append("_".join(loop.var.name for _, loop in named) or "i")
    new_vars = [Var(n) for n in _unique(names)]
    new_ranges = {v: Interval(0, n - 1) for v, n in zip(new_vars, new_extents)}
    values = mapping.inverse(extents).apply(new_vars, new_ranges)
    substitution = dict(zip([iv.var for iv in old.iter_vars], values))
    inner_ranges = {**new_ranges, **_inner_loop_ranges(old)}

    def resimplify(buf: Buffer, indices: tuple[Expr, ...]
                   ) -> tuple[Buffer, tuple[Expr, ...]] | None:
        return buf, tuple(simplify_index(i, inner_ranges) for i in indices)

    body = _AccessRewriter(resimplify).visit(substitute(old.body, substitution))
    init = None if old.init is None else \
        _AccessRewriter(resimplify).visit(substitute(old.init, substitution))
    iter_vars = tuple(IterVar(v, n, k, loc) for v, n, k, loc in
                      zip(new_vars, new_extents, kinds, locs, strict=True))
    new_block = dataclasses.replace(old, iter_vars=iter_vars, body=body, init=init)
    new_block = _with_regions(new_block, old, substitution, inner_ranges)
    loop_vars = [Var(n) for n in _unique(loop_names)]
    stmt: Stmt = BlockRealize(tuple(loop_vars), new_block, realize.predicate, realize.loc)
    for var, extent in reversed(list(zip(loop_vars, new_extents))):
        stmt = For(var, extent, stmt)
    return tree.replace_stmt(func, loops[0] if loops else realize, stmt), None


def reindex(func: PrimFunc, block: BlockRV, buffer: BufferArg) -> tuple[PrimFunc, BlockRV]:
    """Copy a buffer through an intermediate indexed by the block's own iterators.

    For a read, a new block ``<buffer>_reindex`` before the block's loops copies
    ``X[f(v)]`` into ``X_reindex[v]``, and the block reads ``X_reindex[v]``; for a write, the
    block writes ``X_reindex[v]`` and a copy block after its loops writes it back. ``v`` are the
    block's iterators that the access uses, in the block's order: a conv input read as
    ``P[n, h + rh, w + rw, rc]`` becomes ``P_reindex[n, h, w, rh, rw, rc]``.

    ``buffer`` is a name (a write when the block writes it, else a read) or
    ``("read", i)`` / ``("write", i)``.

    Preconditions: the block is the only block under its loops and holds no intrinsic call;
    it accesses the buffer with one index pattern, affine in its iterators, in bounds; a read
    buffer is not also written by the block; a written buffer is written one-to-one (each
    element by one iterator value), under no predicate, and read by the block only after its
    init wrote it.

    Returns the new function and the handle of the copy block.
    """
    primitive = "reindex"
    found = get_block(func, block, primitive)
    realize: BlockRealize = found.node
    blk = realize.block
    target, kind = resolve_buffer(blk, buffer, primitive)
    _check_reindexable(found, target, kind, primitive)
    pattern = _single_pattern(blk, target, primitive)
    used = [iv for iv in blk.iter_vars if any(_uses(i, iv.var) for i in pattern)]
    new = Buffer(unique_buffer_name(func, f"{target.name}_reindex"),
                 tuple(iv.extent for iv in used) or (1,), target.dtype, target.scope)
    new_index = tuple(iv.var for iv in used) or (IntImm(0),)

    def redirect(buf: Buffer, indices: tuple[Expr, ...]
                 ) -> tuple[Buffer, tuple[Expr, ...]] | None:
        return (new, new_index) if buf is target else None

    new_block = _RegionUpdater(redirect, {target: new}).visit(blk)
    name = unique_block_name(func, new.name)
    copy_vars = [Var(iv.var.name) for iv in used]
    source_index = tuple(substitute(pattern, dict(zip([iv.var for iv in used], copy_vars))))
    copy_index = tuple(copy_vars) or (IntImm(0),)
    if kind == "read":
        store = BufferStore(new, BufferLoad(target, source_index), copy_index)
    else:
        store = BufferStore(target, BufferLoad(new, copy_index), source_index)
    copy = copy_nest(name, [(v, iv.extent) for v, iv in zip(copy_vars, used)], store)
    anchor = anchor_of(found)
    rewritten = _replace_within(anchor, realize, dataclasses.replace(realize, block=new_block))
    stmts = (copy, rewritten) if kind == "read" else (rewritten, copy)
    return splice(func, found, anchor, seq(*stmts), (new,)), BlockRV(name)


# -- shared helpers ---------------------------------------------------------------------------


def resolve_buffer(block: Block, buffer: BufferArg, primitive: str) -> tuple[Buffer, str]:
    """The buffer an argument names in ``block``, and whether it is a "read" or a "write".

    A name is a write when the block writes it, else a read; ``("read", i)`` /
    ``("write", i)`` (a list after a trace replay) index the block's declared regions.
    """
    if isinstance(buffer, str):
        for kind, regions in (("write", block.writes), ("read", block.reads)):
            for region in regions:
                if region.buffer.name == buffer:
                    return region.buffer, kind
        reads = ", ".join(r.buffer.name for r in block.reads) or "nothing"
        writes = ", ".join(r.buffer.name for r in block.writes) or "nothing"
        fail(primitive, f"block {block.name} does not access a buffer named {buffer!r}; it "
                        f"reads {reads} and writes {writes}")
    arg_check(isinstance(buffer, (tuple, list)) and len(buffer) == 2
              and buffer[0] in ("read", "write") and isinstance(buffer[1], int),
              primitive, "buffer", 'a buffer name, ("read", i) or ("write", i)', buffer)
    kind, position = buffer
    regions = block.reads if kind == "read" else block.writes
    check(0 <= position < len(regions), primitive,
          f"block {block.name} has {len(regions)} {kind} regions, so {kind} {position} does "
          "not exist")
    return regions[position].buffer, kind


def simple_loop_nest(found: Located, primitive: str, in_order: bool) -> list[For]:
    """The loops binding a block's iterators: the block alone under one serial loop per
    iterator, a perfect nest, no predicate. Returns the loops in iterator order (loop ``k``
    binds iterator ``k``); ``in_order`` also requires them nested in that order."""
    realize: BlockRealize = found.node
    blk = realize.block
    loops = tree.enclosing_loops(found.path)
    check(len(loops) == len(blk.iter_vars), primitive,
          f"block {blk.name} sits under {len(loops)} loops but has {len(blk.iter_vars)} "
          f"iterators; {primitive} requires one loop per iterator")
    for outer, inner in zip(loops, [*loops[1:], realize]):
        check(outer.body is inner, primitive,
              f"block {blk.name} is not alone under loop {outer.var.name}: {primitive} "
              "requires a perfect loop nest around the block")
        check(outer.kind is ForKind.SERIAL, primitive,
              f"loop {outer.var.name} is {outer.kind.value}; {primitive} requires serial loops")
    check(_is_true(realize.predicate), primitive,
          f"block {blk.name} has the predicate {realize.predicate}; {primitive} requires none")
    by_var = {id(loop.var): loop for loop in loops}
    ordered = []
    for position, (iv, binding) in enumerate(zip(blk.iter_vars, realize.bindings)):
        loop = by_var.get(id(binding)) if isinstance(binding, Var) else None
        check(loop is not None and (not in_order or loop is loops[position])
              and loop.extent == iv.extent, primitive,
              f"iterator {iv.var.name} of block {blk.name} is bound to {binding}; {primitive} "
              f"requires each iterator bound to its own loop of the same extent"
              + (", in order" if in_order else ""))
        ordered.append(loop)
    check(len({id(loop) for loop in ordered}) == len(ordered), primitive,
          f"block {blk.name} binds two iterators to one loop")
    return ordered


def anchor_of(found: Located) -> Stmt:
    """The outermost loop around a block below its parent block (the block itself when it has
    no loops): where copies of its inputs and outputs go."""
    loops = tree.enclosing_loops(found.path)
    return loops[0] if loops else found.node


def splice(func: PrimFunc, found: Located, anchor: Stmt, replacement: Stmt,
           buffers: tuple[Buffer, ...]) -> PrimFunc:
    """``func`` with ``anchor`` replaced by ``replacement`` (sequences flattened) and
    ``buffers`` allocated by the block enclosing ``found``."""
    scope = tree.enclosing_block(found.path).block

    class _Splice(Mutator):
        def visit(self, node: Any) -> Any:
            if node is anchor:
                return replacement
            if not isinstance(node, (Stmt, Block, tuple)):
                return node
            result = super().visit(node)
            if node is scope:
                return dataclasses.replace(result, alloc_buffers=result.alloc_buffers + buffers)
            if isinstance(result, SeqStmt) and result is not node:
                return seq(*result.stmts)
            return result

    return PrimFunc(func.name, func.params, _Splice().visit(func.body), func.loc)


def copy_nest(name: str, iterators: Sequence[tuple[Var, int]], store: BufferStore) -> Stmt:
    """A block ``name`` running ``store`` over spatial ``iterators`` (Var, extent), under one
    serial loop each, with its regions inferred."""
    iter_vars = tuple(IterVar(var, extent) for var, extent in iterators)
    block = Block(name, iter_vars, (), (), store)
    reads, writes = infer_block_regions(block)
    block = dataclasses.replace(block, reads=tuple(reads), writes=tuple(writes))
    loop_vars = [Var(_loop_name(var.name)) for var, _ in iterators]
    stmt: Stmt = BlockRealize(tuple(loop_vars), block)
    for var, (_, extent) in reversed(list(zip(loop_vars, iterators))):
        stmt = For(var, extent, stmt)
    return stmt


def _with_regions(block: Block, old: Block, substitution: dict[Var, Expr],
                 ranges: dict[Var, Interval]) -> Block:
    """``block`` (rebuilt from ``old`` with its iterators replaced by ``substitution``) with
    reads and writes to match: inferred from the body, or, for an opaque intrinsic call,
    the old regions with the iterators replaced."""
    if _holds_intrinsic(block.body):
        def region(r: BufferRegion) -> BufferRegion:
            return BufferRegion(r.buffer, tuple(
                Range(simplify(substitute(x.start, substitution), ranges), x.extent)
                for x in r.ranges), r.loc)
        return dataclasses.replace(block, reads=tuple(region(r) for r in old.reads),
                                   writes=tuple(region(r) for r in old.writes))
    reads, writes = infer_block_regions(block)
    return dataclasses.replace(block, reads=tuple(reads), writes=tuple(writes))


def _index_ranges(func: PrimFunc) -> dict[Var, Interval]:
    """The range of every loop variable and block iterator of ``func`` (each Var is bound
    once, so one table serves every scope)."""
    ranges: dict[Var, Interval] = {}
    for node, _ in tree.walk_stmts(func):
        if isinstance(node, For):
            ranges[node.var] = Interval(0, node.extent - 1)
        elif isinstance(node, BlockRealize):
            ranges.update({iv.var: Interval(0, iv.extent - 1) for iv in node.block.iter_vars})
    return ranges


def unique_block_name(func: PrimFunc, base: str) -> str:
    """``base``, or ``base_1``, ``base_2`` ... : the first name no block of ``func`` has."""
    return _first_free(base, set(tree.block_names(func)))


def unique_buffer_name(func: PrimFunc, base: str) -> str:
    """The first of ``base``, ``base_1`` ... that no parameter or allocated buffer uses."""
    taken = {p.name for p in func.params}
    for node, _ in tree.walk_stmts(func):
        if isinstance(node, BlockRealize):
            taken.update(b.name for b in node.block.alloc_buffers)
    return _first_free(base, taken)


# -- private ----------------------------------------------------------------------------------


class _AccessRewriter(Mutator):
    """Rewrites every load and store through ``rewrite(buffer, indices)``, which returns the
    new (buffer, indices) or None to keep the access."""

    def __init__(self, rewrite: Callable[[Buffer, tuple[Expr, ...]],
                                         tuple[Buffer, tuple[Expr, ...]] | None]) -> None:
        self.rewrite = rewrite

    def access(self, buffer: Buffer, indices: tuple[Expr, ...], old: tuple[Expr, ...]
               ) -> tuple[Buffer, tuple[Expr, ...]] | None:
        new = self.rewrite(buffer, indices)
        if new is None:
            return None if indices is old else (buffer, indices)
        if new[0] is buffer and all(a is b for a, b in zip(new[1], old)):
            return None
        return new

    def visit_BufferLoad(self, load: BufferLoad) -> Expr:
        new = self.access(load.buffer, self.visit(load.indices), load.indices)
        return load if new is None else BufferLoad(new[0], new[1], load.loc)

    def visit_BufferStore(self, store: BufferStore) -> Stmt:
        value = self.visit(store.value)
        new = self.access(store.buffer, self.visit(store.indices), store.indices)
        if new is None:
            return store if value is store.value else dataclasses.replace(store, value=value)
        return BufferStore(new[0], value, new[1], store.loc)


class _RegionUpdater(_AccessRewriter):
    """An access rewriter that also swaps buffers in allocations and, in every block whose
    regions name a swapped buffer, replaces those regions by freshly inferred ones."""

    def __init__(self, rewrite: Callable[[Buffer, tuple[Expr, ...]],
                                         tuple[Buffer, tuple[Expr, ...]] | None],
                 swapped: dict[Buffer, Buffer]) -> None:
        super().__init__(rewrite)
        self.swapped = swapped

    def visit_Block(self, block: Block) -> Block:
        result = self.generic_visit(block)
        allocs = tuple(self.swapped.get(b, b) for b in result.alloc_buffers)
        if any(a is not b for a, b in zip(allocs, result.alloc_buffers)):
            result = dataclasses.replace(result, alloc_buffers=allocs)
        if not any(r.buffer in self.swapped for r in (*result.reads, *result.writes)):
            return result
        reads, writes = infer_block_regions(result)
        return dataclasses.replace(result, reads=self.regions(result.reads, reads),
                                   writes=self.regions(result.writes, writes))

    def regions(self, declared: tuple[BufferRegion, ...], inferred: list[BufferRegion]
                ) -> tuple[BufferRegion, ...]:
        fresh = {r.buffer: r for r in inferred}
        out = []
        for region in declared:
            if region.buffer not in self.swapped:
                out.append(region)
            elif self.swapped[region.buffer] in fresh:
                out.append(fresh[self.swapped[region.buffer]])
        return tuple(out)


def _check_reindexable(found: Located, target: Buffer, kind: str, primitive: str) -> None:
    realize: BlockRealize = found.node
    blk = realize.block
    anchor = anchor_of(found)
    others = [] if anchor is realize else [
        r.block.name for r in tree.child_block_realizes(anchor) if r is not realize]
    check(not others, primitive,
          f"block {blk.name} shares its loops with block {', '.join(others)}; {primitive} "
          "requires the block alone under its loops")
    check(not _holds_intrinsic(blk.body), primitive,
          f"block {blk.name} holds an intrinsic call; reindex before tensorizing")
    written = any(r.buffer is target for r in blk.writes)
    read = _reads(blk, target)
    if kind == "read":
        check(not written, primitive,
              f"block {blk.name} both reads and writes {target.name}; reindex its write "
              "instead")
        return
    check(_is_true(realize.predicate), primitive,
          f"block {blk.name} writes {target.name} under the predicate {realize.predicate}; "
          "the copy back would write elements the block skips")
    check(not read or blk.init is not None, primitive,
          f"block {blk.name} reads {target.name}'s earlier values (it has no init); the "
          "reindexed buffer would start without them")


def _single_pattern(blk: Block, target: Buffer, primitive: str) -> tuple[Expr, ...]:
    """The one index tuple ``blk`` accesses ``target`` with; affine in its iterators, in
    bounds, and one-to-one for a written buffer."""
    patterns: list[tuple[Expr, ...]] = []

    def collect(node: Node) -> None:
        if isinstance(node, (BufferLoad, BufferStore)) and node.buffer is target:
            if node.indices not in patterns:
                patterns.append(node.indices)

    for stmt in (blk.init, blk.body):
        if stmt is not None:
            post_order_visit(stmt, collect)
    text = [f"{target.name}[{', '.join(str(i) for i in p)}]" for p in patterns]
    check(len(patterns) == 1, primitive,
          f"block {blk.name} accesses {target.name} with {len(patterns)} index patterns "
          f"({', '.join(text)}); {primitive} requires exactly one")
    pattern = patterns[0]
    own = {iv.var for iv in blk.iter_vars}
    ranges = {iv.var: Interval(0, iv.extent - 1) for iv in blk.iter_vars}
    for index, extent in zip(pattern, target.shape):
        check(is_affine(index) and _vars_within(index, own), primitive,
              f"index {index} of {text[0]} in block {blk.name} is not an affine function of "
              "the block's iterators")
        check(bound(index, ranges).within(0, extent - 1), primitive,
              f"index {index} of {text[0]} in block {blk.name} leaves [0, {extent - 1}] for "
              "some iterator values")
    used = [iv for iv in blk.iter_vars if any(_uses(i, iv.var) for i in pattern)]
    if used and any(r.buffer is target for r in blk.writes):
        # The map's parameters take the iterators' names so that its reasons read naturally.
        names = [iv.var.name for iv in used]
        if len(set(names)) < len(names) or not all(
                n.isidentifier() and not keyword.iskeyword(n) for n in names):
            names = [f"x{k}" for k in range(len(used))]
        params = [Var(n) for n in names]
        indices = substitute(pattern, dict(zip([iv.var for iv in used], params)))
        reason = IndexMap(tuple(params), indices).why_not_bijective([iv.extent for iv in used])
        check(reason is None, primitive,
              f"block {blk.name} writes {text[0]}; reindexing a write requires its indices to "
              f"map the block's iterators one-to-one onto a box from 0: {reason}")
    return pattern


def _reads(blk: Block, target: Buffer) -> bool:
    found: list[bool] = []
    for stmt in (blk.init, blk.body):
        if stmt is not None:
            post_order_visit(stmt, lambda n: found.append(
                isinstance(n, BufferLoad) and n.buffer is target))
    return any(found)


def _replace_within(stmt: Stmt, old: Stmt, new: Stmt) -> Stmt:
    if stmt is old:
        return new

    class _Replace(Mutator):
        def visit(self, node: Any) -> Any:
            return new if node is old else super().visit(node)

    return _Replace().visit(stmt)


def _inner_loop_ranges(block: Block) -> dict[Var, Interval]:
    ranges: dict[Var, Interval] = {}
    for stmt in (block.init, block.body):
        if stmt is not None:
            for node, _ in tree.walk_under(stmt):
                if isinstance(node, For):
                    ranges[node.var] = Interval(0, node.extent - 1)
    return ranges


def _holds_intrinsic(stmt: Stmt) -> bool:
    return any(isinstance(node, IntrinsicCall) for node, _ in tree.walk_under(stmt))


def _uses(expr: Node, var: Var) -> bool:
    found: list[bool] = []
    post_order_visit(expr, lambda n: found.append(n is var))
    return any(found)


def _vars_within(expr: Node, allowed: set[Var]) -> bool:
    found: list[bool] = []
    post_order_visit(expr, lambda n: found.append(not isinstance(n, Var) or n in allowed))
    return all(found)


def _is_true(expr: Expr) -> bool:
    return isinstance(expr, IntImm) and expr.dtype.is_bool and expr.value == 1


def _unique(names: list[str]) -> list[str]:
    taken: set[str] = set()
    out = []
    for name in names:
        out.append(_first_free(name, taken))
        taken.add(out[-1])
    return out


def _first_free(base: str, taken: set[str]) -> str:
    if base not in taken:
        return base
    suffix = 1
    while f"{base}_{suffix}" in taken:
        suffix += 1
    return f"{base}_{suffix}"


def _loop_name(iterator: str) -> str:
    """A loop name for an iterator: ``vi`` -> ``i``."""
    return iterator[1:] if len(iterator) > 1 and iterator.startswith("v") else iterator
