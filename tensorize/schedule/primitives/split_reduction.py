"""split_reduction: one reduction as ``parts`` independent partial reductions and their sum.

A reduction block ``O[idx] = O[idx] + v`` (``idx`` its spatial iterators) whose reduce
iterator ``k`` runs over ``range(K)`` becomes, with ``K = parts * Kp`` and
``k = s * Kp + kp``::

    P[s, idx] = 0                                    # for every s < parts
    P[s, idx] = P[s, idx] + v[k := s * Kp + kp]      # the block: s a new spatial iterator
    O[idx] = init                                    # the sum block, where the block had one
    O[idx] = O[idx] + P[s, idx]                      # s its reduce iterator

Each part sums the terms of its own slice of ``k``, in their order, and the sum adds the
parts in order of ``s``. Integer sums are the same whatever the order (wrapping addition is
associative); a float sum is the same sum of the same terms, rounded at other places. The
parts share no element, so they may run at once: a GPU whose grid of output tiles leaves
its multiprocessors idle runs each part as a block of its own (split-K).
"""

from __future__ import annotations

from ir import (Block, BlockRealize, Buffer, BufferLoad, BufferStore, Expr, For, IntImm,
                IterKind, IterVar, PrimFunc, Var, const, substitute)
from ir.arith import linearize
from ir.expr import BinOp
from ir.visitor import post_order_visit
from tensorize.schedule import tree
from tensorize.schedule.check import arg_check, check, check_root_nest
from tensorize.schedule.handles import BlockRV, LoopRV
from tensorize.schedule.sites import Site, bound_iterator, locate
from tensorize.schedule.splicing import (buffer_names, build_nest, splice_func, unique_name,
                                         with_regions)

__all__ = ["split_reduction"]

_PRIMITIVE = "split_reduction"


def split_reduction(func: PrimFunc, block: BlockRV, loop: LoopRV, parts: int
                    ) -> tuple[PrimFunc, BlockRV]:
    """Split the reduction of ``block`` over the reduce iterator that ``loop`` binds into
    ``parts`` partial sums and a block adding them up (module docs).

    Preconditions, each refused with its reason: the block sits directly in the root block
    in a perfect loop nest binding each iterator to one loop in order, with no predicate;
    ``loop`` is one of those loops and binds a reduce iterator whose extent ``parts``
    divides; the body is ``O[idx] = O[idx] + v`` with ``v`` not reading ``O`` and ``idx``
    the block's spatial iterators, each once, each plus at most a constant (``O[i + 3]``,
    the rest of a :func:`partition`); the init, if any, is one store to ``O[idx]``.

    The block keeps its name and writes a new root buffer ``<O>_part`` of shape ``(parts,
    extents of idx)``, indexed by the iterators without their constants, with a new first
    (spatial) iterator, the part, and the split iterator's extent divided by ``parts``; its
    init zeroes the partial sums. A block
    ``<name>_sum`` right after its nest writes ``O``: the block's init, if it had one, then
    the parts added in order. Returns the new function and the handle of the sum block.

    >>> from ir import script as T
    >>> from tensorize.schedule import Schedule
    >>> @T.prim_func
    ... def f(A: T.Buffer((4, 8), "int8"), O: T.Buffer((4,), "int32")):
    ...     for i, k in T.grid(4, 8):
    ...         with T.block("O"):
    ...             vi, vk = T.axis.remap("SR", [i, k])
    ...             with T.init():
    ...                 O[vi] = 0
    ...             O[vi] += T.cast(A[vi, vk], "int32")
    >>> sch = Schedule(f)
    >>> sch.split_reduction(sch.get_block("O"), sch.get_loops(sch.get_block("O"))[1], 2)
    BlockRV('O_sum')
    >>> print(sch.func)
    @T.prim_func
    def f(A: T.Buffer((4, 8), "int8"), O: T.Buffer((4,), "int32")):
        O_part = T.alloc_buffer((2, 4), "int32")
        for k_s, i, k in T.grid(2, 4, 4):
            with T.block("O"):
                vk_s, vi, vk = T.axis.remap("SSR", [k_s, i, k])
                T.reads(O_part[vk_s, vi], A[vi, vk_s * 4 + vk])
                T.writes(O_part[vk_s, vi])
                with T.init():
                    O_part[vk_s, vi] = 0
                O_part[vk_s, vi] += T.cast(A[vi, vk_s * 4 + vk], "int32")
        for ax0, ax1 in T.grid(4, 2):
            with T.block("O_sum"):
                v0, v1 = T.axis.remap("SR", [ax0, ax1])
                T.reads(O[v0], O_part[v1, v0])
                T.writes(O[v0])
                with T.init():
                    O[v0] = 0
                O[v0] += O_part[v1, v0]
    """
    arg_check(isinstance(parts, int) and not isinstance(parts, bool) and parts >= 2,
              _PRIMITIVE, "parts", "an int of at least 2", parts)
    site = locate(func, block, _PRIMITIVE)
    check_root_nest(func, site, _PRIMITIVE)
    split = _split_iterator(func, site, loop, parts)
    store, term = _accumulation(site)
    spatial = [iv for iv in site.block.iter_vars if iv.kind is IterKind.SPATIAL]
    indexed = _output_iterators(site, store, spatial)
    extents = {iv.var: iv.extent for iv in spatial}
    partial = Buffer(unique_name(f"{store.buffer.name}_part", buffer_names(func)),
                     (parts, *(extents[v] for v in indexed)), store.buffer.dtype)

    depth = split.extent // parts
    part_var = Var(f"{split.var.name}_s")
    part_loop = Var(f"{site.loops[site.block.iter_vars.index(split)].var.name}_s")
    slice_of = {split.var: part_var * depth + split.var}
    part_index = (part_var, *indexed)
    load = BufferLoad(partial, part_index)
    body = BufferStore(partial, BinOp("add", load, substitute(term, slice_of)), part_index,
                       store.loc)
    init = (None if site.block.init is None
            else BufferStore(partial, const(0, store.buffer.dtype), part_index, store.loc))
    iters = (IterVar(part_var, parts),
             *(IterVar(iv.var, depth, iv.kind) if iv is split else iv
               for iv in site.block.iter_vars))
    parted = with_regions(Block(site.name, iters, (), (), body, init, loc=site.block.loc))
    stmt: BlockRealize | For = BlockRealize((part_loop, *site.realize.bindings), parted,
                                            loc=site.realize.loc)
    for iv, loop_node in reversed(list(zip(site.block.iter_vars, site.loops))):
        stmt = For(loop_node.var, depth if iv is split else loop_node.extent, stmt,
                   loop_node.kind, loop_node.thread, loop_node.loc)
    stmt = For(part_loop, parts, stmt)

    summed = _sum_block(unique_name(f"{site.name}_sum", tree.block_names(func)), store,
                        site.block.init, partial, indexed, extents)
    nest = build_nest(summed, [IntImm(0)] * len(summed.iter_vars),
                      [iv.extent for iv in summed.iter_vars], {})
    new = splice_func(func, {id(site.loops[0]): (stmt, nest)}, (partial,))
    return new, BlockRV(summed.name)


def _split_iterator(func: PrimFunc, site: Site, loop: LoopRV, parts: int) -> IterVar:
    """The reduce iterator ``loop`` binds, whose extent ``parts`` must divide."""
    iv = bound_iterator(func, site, loop, _PRIMITIVE)
    check(iv.kind is IterKind.REDUCE, _PRIMITIVE,
          f"loop {loop.var.name} binds the spatial iterator {iv.var.name} of block "
          f"{site.name!r}; only a reduction splits into parts", site.realize)
    check(iv.extent % parts == 0, _PRIMITIVE,
          f"block {site.name!r} requires the extent of {iv.var.name} to be a multiple of the "
          f"parts, got {iv.extent} and {parts}", site.realize)
    return iv


def _accumulation(site: Site) -> tuple[BufferStore, Expr]:
    """The block's store ``O[idx] = O[idx] + v`` and its term ``v``, which must not read
    ``O``; the init, if any, one store to ``O[idx]``."""
    store = site.block.body
    reason = f"block {site.name!r} requires the body O[idx] = O[idx] + v, v not reading O"
    check(isinstance(store, BufferStore) and isinstance(store.value, BinOp)
          and store.value.op == "add", _PRIMITIVE, reason, site.realize)
    terms = (store.value.a, store.value.b)
    own = [t for t in terms if isinstance(t, BufferLoad) and t.buffer is store.buffer
           and t.indices == store.indices]
    check(len(own) >= 1, _PRIMITIVE, reason, site.realize)
    term = terms[1] if terms[0] is own[0] else terms[0]
    reads_output = []
    post_order_visit(term, lambda node: reads_output.append(node)
                     if isinstance(node, BufferLoad) and node.buffer is store.buffer else None)
    check(not reads_output, _PRIMITIVE, reason, site.realize)
    init = site.block.init
    check(init is None or (isinstance(init, BufferStore) and init.buffer is store.buffer
                           and init.indices == store.indices), _PRIMITIVE,
          f"block {site.name!r} requires its init to be one store to the element it "
          "accumulates", site.realize)
    return store, term


def _output_iterators(site: Site, store: BufferStore, spatial: list[IterVar]) -> list[Var]:
    """The spatial iterator of each index of ``store``, which must be that iterator plus at
    most a constant (the rest of a ``partition``: ``O[i + 3]``), each iterator once."""
    forms = [linearize(index) for index in store.indices]
    found = [atom for f in forms if len(f.terms) == 1
             for atom, coeff in f.terms if coeff == 1 and isinstance(atom, Var)]
    used = [id(v) for v in found]
    check(len(found) == len(forms) and len(set(used)) == len(used)
          and set(used) == {id(iv.var) for iv in spatial}, _PRIMITIVE,
          f"block {site.name!r} requires its output indexed by its spatial iterators, each "
          f"once and each plus at most a constant; got "
          f"{store.buffer.name}[{', '.join(map(str, store.indices))}]", site.realize)
    return found


def _sum_block(name: str, store: BufferStore, init: BufferStore | None, partial: Buffer,
               indexed: list[Var], extents: dict[Var, int]) -> Block:
    """``O[idx] = init; O[idx] += P[s, i...]`` over fresh iterators ``i``, one for each
    iterator of the output's indices (``indexed``; ``idx`` is the indices in them), then the
    part (reduce)."""
    iters = [IterVar(Var(f"v{d}"), extents[var]) for d, var in enumerate(indexed)]
    part = IterVar(Var(f"v{len(indexed)}"), partial.shape[0], IterKind.REDUCE)
    fresh = {var: iv.var for var, iv in zip(indexed, iters)}
    index = tuple(substitute(i, fresh) for i in store.indices)
    total = BufferStore(store.buffer, BinOp("add", BufferLoad(store.buffer, index),
                                            BufferLoad(partial, (part.var, *fresh.values()))),
                        index)
    first = None if init is None else substitute(init, fresh)
    return with_regions(Block(name, (*iters, part), (), (), total, first))
