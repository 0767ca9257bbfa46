"""decompose_reduction: split a reduction block's init out into a block of its own.

A reduction block runs its ``init`` where all its reduce iterators are 0, then its body. After
``decompose_reduction(block, loop)``, a block ``<name>_init`` with the spatial iterators only
runs the init right before ``loop``, under the loops outside ``loop`` and its own copies of
the loops inside ``loop`` that bind spatial iterators; the block keeps its name and its body
and loses its init. Intrinsics that zero an accumulator tile and then accumulate into it need
exactly this shape.

Where the init may go. The init nest runs once per iteration of the loops outside ``loop``,
and completely before ``loop``. That is right exactly when every reduction step of an
element happens inside one iteration of those outer loops, so the condition is:

    no loop outside ``loop`` (between the block's scope and ``loop``) appears in the binding
    of a reduce iterator; ``loop`` itself and the loops inside it may.

``loop`` may itself be the outermost reduction loop (the usual choice). A loop inside ``loop``
that feeds both a spatial and a reduce iterator cannot be split between the two nests, and a
loop inside ``loop`` that feeds no iterator re-runs the whole reduction (re-initialising it)
in each of its iterations; both are refused. The init's predicate is the block's predicate
where the loops left out of the init nest (reduce loops) are at 0, the iteration in which
the original init ran.
"""

from __future__ import annotations

from ir import (Block, BlockRealize, BufferRegion, Expr, For, IntImm, IterKind, IterVar, PrimFunc,
                Stmt, Var, substitute)
from ir.arith import Interval, const_int, prove, simplify
from ir.visitor import vars_of
from tensorize.schedule import tree
from tensorize.schedule.check import check, fail, get_loop
from tensorize.schedule.coverage import region_in_loops, relax
from tensorize.schedule.handles import BlockRV, LoopRV
from tensorize.schedule.sites import (Site, locate, loop_ranges, loops_below, scope_ranges,
                                      sibling_sites)
from tensorize.schedule.splicing import splice, splice_func, unique_name, with_regions

__all__ = ["decompose_reduction"]


def decompose_reduction(func: PrimFunc, block: BlockRV, loop: LoopRV
                        ) -> tuple[PrimFunc, BlockRV]:
    """Split the init of reduction ``block`` into a block ``<name>_init`` placed right before
    ``loop``; the block keeps its body (no init) and its name.

    Preconditions, each refused with its reason:

    - the block has an init;
    - ``loop`` is one of the loops between the block and its enclosing block;
    - no loop outside ``loop`` binds a reduce iterator (the init would run before every
      reduction step); no loop inside ``loop`` binds both a spatial and a reduce iterator, or
      no iterator at all (extent > 1);
    - each reduce iterator is 0 when the reduce loops are 0 (where the init runs);
    - any other block under ``loop`` that reads the block's output comes after it and reads
      only what the block writes in the same iteration of ``loop`` (which the init would
      otherwise have reset early); none writes it.

    Returns the new function and the handle of the init block.

    >>> from ir import script as T
    >>> from tensorize.schedule import Schedule
    >>> @T.prim_func
    ... def rowsum(A: T.Buffer((4, 8), "int32"), S: T.Buffer((4,), "int32")):
    ...     for i, k in T.grid(4, 8):
    ...         with T.block("S"):
    ...             vi, vk = T.axis.remap("SR", [i, k])
    ...             with T.init():
    ...                 S[vi] = 0
    ...             S[vi] += A[vi, vk]
    >>> sch = Schedule(rowsum)
    >>> init = sch.decompose_reduction(sch.get_block("S"), sch.get_loops(sch.get_block("S"))[1])
    >>> print(sch.func)
    @T.prim_func
    def rowsum(A: T.Buffer((4, 8), "int32"), S: T.Buffer((4,), "int32")):
        for i in range(4):
            with T.block("S_init"):
                vi_init = T.axis.remap("S", [i])
                T.reads()
                T.writes(S[vi_init])
                S[vi_init] = 0
            for k in range(8):
                with T.block("S"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    T.reads(S[vi], A[vi, vk])
                    T.writes(S[vi])
                    S[vi] += A[vi, vk]
    """
    name = "decompose_reduction"
    site = locate(func, block, name)
    target = get_loop(func, loop, name)
    node: For = target.node
    check(site.block.init is not None, name,
          f"block {site.name!r} has no init to decompose", site.realize)
    check(any(l is node for l in site.loops), name,
          f"loop {node.var.name} is not around block {site.name!r} (its loops: "
          f"{', '.join(l.var.name for l in site.loops) or 'none'})", node)
    inner = loops_below(site, node)
    copied, dropped = _classify(site, inner, node, name)
    _check_readers(func, site, node, name)
    init_vars = {l.var: Var(f"{l.var.name}_init", l.var.dtype) for l in copied}
    zeros = {l.var: _zero(l.var) for l in dropped}
    init_block = _init_block(func, site)
    spatial = [(iv, b) for iv, b in zip(site.block.iter_vars, site.realize.bindings)
               if iv.kind is IterKind.SPATIAL]
    ranges = {**scope_ranges(site), **loop_ranges(site.loops),
              **{init_vars[l.var]: Interval(0, l.extent - 1) for l in copied}}
    for iv, binding in zip(site.block.iter_vars, site.realize.bindings):
        if iv.kind is IterKind.REDUCE:
            start = const_int(simplify(substitute(binding, zeros), ranges))
            check(start == 0, name,
                  f"reduce iterator {iv.var.name} of block {site.name!r} is not 0 where its "
                  f"loops start (its binding is {binding}), so the init's iteration is unknown",
                  site.realize)
    bindings = tuple(simplify(substitute(b, {**zeros, **init_vars}), ranges) for _, b in spatial)
    predicate = simplify(substitute(site.realize.predicate, {**zeros, **init_vars}), ranges)
    stmt: Stmt = BlockRealize(bindings, init_block, predicate)
    for l in reversed(copied):
        stmt = For(init_vars[l.var], l.extent, stmt, l.kind, l.thread, l.loc)
    update = with_regions(Block(site.block.name, site.block.iter_vars, site.block.reads,
                                site.block.writes, site.block.body, None,
                                site.block.alloc_buffers, site.block.annotations,
                                site.block.loc))
    updated = splice(node, {id(site.realize): (BlockRealize(
        site.realize.bindings, update, site.realize.predicate, site.realize.loc),)})
    return splice_func(func, {id(node): (stmt, updated)}), BlockRV(init_block.name)


def _zero(var: Var) -> IntImm:
    return IntImm(0, var.dtype)


def _classify(site: Site, inner: list[For], node: For, primitive: str
              ) -> tuple[list[For], list[For]]:
    """Split the loops from ``node`` down into those the init nest copies (they bind spatial
    iterators) and those it leaves out (reduce loops); refuse the misplaced ones."""
    spatial_vars: set[int] = set()
    reduce_vars: set[int] = set()
    for iv, binding in zip(site.block.iter_vars, site.realize.bindings):
        used = {id(v) for v in vars_of(binding)}
        (reduce_vars if iv.kind is IterKind.REDUCE else spatial_vars).update(used)
    inside = {id(l.var) for l in inner}
    for outer in site.loops:
        if outer is node:
            break
        check(id(outer.var) not in reduce_vars, primitive,
              f"loop {outer.var.name}, outside loop {node.var.name}, carries the reduction of "
              f"block {site.name!r}; the init would run again before each of its steps "
              f"(decompose at loop {outer.var.name} or further out)", outer)
    scope_reduce = reduce_vars - inside - {id(l.var) for l in site.loops}
    check(not scope_reduce, primitive,
          f"a reduce iterator of block {site.name!r} is bound to an iterator of its enclosing "
          "block; its reduction does not lie within the loops around it", site.realize)
    copied, dropped = [], []
    for l in inner:
        key = id(l.var)
        if key in spatial_vars and key in reduce_vars:
            fail(primitive, f"loop {l.var.name} binds both a spatial and a reduce iterator of "
                            f"block {site.name!r}; it cannot be split between the init and the "
                            "update", l)
        if key not in spatial_vars and key not in reduce_vars and l.extent > 1:
            fail(primitive, f"loop {l.var.name} binds no iterator of block {site.name!r}: each "
                            "of its iterations re-runs (and re-initialises) the reduction; "
                            f"decompose at a loop inside {l.var.name}", l)
        (copied if key in spatial_vars else dropped).append(l)
    return copied, dropped


def _init_block(func: PrimFunc, site: Site) -> Block:
    """The init as a block over the spatial iterators (reduce iterators are 0 there)."""
    renamed: dict[Var, Expr] = {}
    iterators = []
    for iv in site.block.iter_vars:
        if iv.kind is IterKind.SPATIAL:
            var = Var(f"{iv.var.name}_init", iv.var.dtype)
            iterators.append(IterVar(var, iv.extent, IterKind.SPATIAL, iv.loc))
            renamed[iv.var] = var
        else:
            renamed[iv.var] = _zero(iv.var)
    name = unique_name(f"{site.name}_init", tree.block_names(func))
    return with_regions(Block(name, tuple(iterators), (), (),
                              substitute(site.block.init, renamed)))


def _check_readers(func: PrimFunc, site: Site, node: For, primitive: str) -> None:
    """Other blocks under ``node`` may read the block's output only after it, within what it
    writes in the same iteration of ``node``; with the init moved before ``node`` they would
    otherwise see reset values early."""
    outputs = site.writes()
    mine = {r.buffer: r for r in _written(site, node)}
    order = [s.realize for s in sibling_sites(func, site.scope)]
    own = order.index(site.realize)
    for other in sibling_sites(func, site.scope):
        if other.realize is site.realize or not other.is_under(node):
            continue
        clash = sorted(b.name for b in other.writes() & outputs)
        check(not clash, primitive,
              f"block {other.name!r} under loop {node.var.name} also writes "
              f"{', '.join(clash)}", other.realize)
        for region in other.block.reads:
            if region.buffer not in outputs:
                continue
            check(order.index(other.realize) > own, primitive,
                  f"block {other.name!r} reads {region.buffer.name} before block "
                  f"{site.name!r} under loop {node.var.name}; it would see the init's values",
                  other.realize)
            read = relax(region_in_loops(other.realize, region), loops_below(other, node)[1:])
            _check_inside(read, mine[region.buffer], other, site, node, primitive)


def _written(site: Site, node: For) -> list[BufferRegion]:
    return [relax(region_in_loops(site.realize, r), loops_below(site, node)[1:])
            for r in site.block.writes]


def _check_inside(read: BufferRegion, written: BufferRegion, reader: Site, site: Site,
                  node: For, primitive: str) -> None:
    ranges = {**scope_ranges(site), **loop_ranges(site.loops)}
    for got, have in zip(read.ranges, written.ranges):
        inside = prove(got.start >= have.start, ranges) and \
            prove(got.start + got.extent <= have.start + have.extent, ranges)
        check(inside, primitive,
              f"block {reader.name!r} reads {read.buffer.name} beyond what block "
              f"{site.name!r} writes in one iteration of loop {node.var.name}; the init, moved "
              "before the loop, would reset what it reads", reader.realize)
