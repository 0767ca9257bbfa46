"""cache_read and cache_write: stage a buffer through a copy in another memory scope.

``cache_read`` copies what one block reads into a new buffer just before the block's loop
nest and makes the block read the copy; ``cache_write`` makes a block write a new buffer and
copies it back just after. The copy buffer has the original's shape (``compact_buffer``
shrinks it later) and lives in the root block's ``alloc_buffers``; where the block accesses
a box at constant offsets short of the whole buffer (one half of a ``partition``: rows
``i + 32`` of A), the copy has the box's shape and the block indexes it from 0, so the
copy's loops run its whole iteration domain (``compute_at`` requires that).

The copy goes around the outermost statement holding the block that no other block writes
(for a read) or touches (for a write) the buffer in: at root level, beside the block's whole
loop nest. It covers the block's region relaxed over the loops inside that statement; at root
level that is all the block accesses, usually the whole buffer.
"""

from __future__ import annotations

from collections.abc import Callable

from intrinsics import Registry, Scope
from ir import (Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, Expr, IntImm,
                IntrinsicCall, IterVar, Mutator, PrimFunc, Stmt, Var, replace_buffers)
from ir.arith import simplify
from tensorize.schedule import tree
from tensorize.schedule.check import arg_check, check, fail
from tensorize.schedule.coverage import box_of, clipped_box, region_in_loops, relax, writes_exactly
from tensorize.schedule.handles import BlockRV
from tensorize.schedule.sites import (Site, locate, loop_ranges, loops_below, scope_ranges,
                                      sibling_sites)
from tensorize.schedule.splicing import (buffer_names, build_nest, splice, splice_func,
                                         unique_name, with_regions)

__all__ = ["cache_read", "cache_write"]

# Scopes every target understands; the intrinsic families add their own.
BASE_SCOPES = ("global", "shared", "local")


def known_scopes(registry: Registry | None) -> tuple[str, ...]:
    """The memory scopes a buffer can be cached into by name: the base ones and every scope
    a family of ``registry`` declares (None: the base ones only)."""
    families = registry.families if registry is not None else ()
    declared = [name for family in families for name in family.scopes]
    return tuple(dict.fromkeys((*BASE_SCOPES, *declared)))


def _scope_name(scope: str | Scope, primitive: str, registry: Registry | None) -> str:
    """The name of ``scope``: a :class:`Scope` itself, or a name the base scopes or a family
    of ``registry`` (the caller's, or the Schedule's) declare."""
    if isinstance(scope, Scope):
        return scope.name
    arg_check(isinstance(scope, str), primitive, "scope", "a memory scope name", scope)
    known = known_scopes(registry)
    hint = "" if registry is not None else \
        " (a family's scope by name needs its registry: Schedule(func, registry=...))"
    check(scope in known, primitive,
          f"cache into an unknown scope {scope!r}; known scopes: {', '.join(known)}{hint}")
    return scope


def _pick(site: Site, which: str, buffer: str | int, primitive: str) -> BufferRegion:
    """The region of ``site``'s reads or writes that ``buffer`` (a name or an index) names."""
    regions = site.block.reads if which == "reads" else site.block.writes
    names = ", ".join(r.buffer.name for r in regions) or "nothing"
    if isinstance(buffer, int) and not isinstance(buffer, bool):
        check(0 <= buffer < len(regions), primitive,
              f"block {site.name!r} {which} {len(regions)} buffer(s) ({names}); index "
              f"{buffer} is out of range")
        return regions[buffer]
    arg_check(isinstance(buffer, str), primitive, "buffer",
              f"a buffer name or an index into the block's {which}", buffer)
    for region in regions:
        if region.buffer.name == buffer:
            return region
    fail(primitive, f"block {site.name!r} does not {which[:-1]} buffer {buffer!r}; it "
                    f"{which} {names}")


def _outermost_free(site: Site, busy: Callable[[Site], bool], siblings: list[Site]) -> Stmt:
    """The outermost statement holding the block (a loop, or its realize) in which no other
    block of its scope is ``busy``."""
    others = [s for s in siblings if s.realize is not site.realize]
    for stmt in site.loops:
        if not any(busy(s) and s.is_under(stmt) for s in others):
            return stmt
    return site.realize


def _copy_block(name: str, source: Buffer, dest: Buffer,
                box: list[tuple[int, int]] | None = None, from_cache: bool = False) -> Block:
    """A block copying ``source`` to ``dest`` elementwise, one iterator per dimension: over
    the whole buffer, or over ``box`` ((start, extent) per dimension, :func:`_fixed_box`),
    which the cache (``dest``, or ``source`` when ``from_cache``) holds alone, from 0; the
    other buffer is indexed at start + iterator."""
    dims = box or [(0, extent) for extent in source.shape]
    iterators = tuple(IterVar(Var(f"v{d}"), extent) for d, (_, extent) in enumerate(dims))
    own = tuple(iv.var for iv in iterators)
    placed = tuple(v + start if start else v for v, (start, _) in zip(own, dims))
    read, written = (own, placed) if from_cache else (placed, own)
    store = BufferStore(dest, source[read], written)
    return with_regions(Block(name, iterators, (), (), store))


def _fixed_box(region: BufferRegion, block: Block) -> list[tuple[int, int]] | None:
    """The region as (start, extent) per dimension when every start is a constant and it is
    short of the whole buffer (the rows of a ``partition``ed block), and ``block`` can be
    re-indexed (it calls no opaque intrinsic): the cache then holds the region alone, so
    a copy over it runs its whole iteration domain, as ``compute_at`` requires. None
    otherwise: the cache has the buffer's shape."""
    box = [(start, min(extent, dim)) for (start, extent), dim in
           zip(box_of(region), region.buffer.shape)]
    fixed = [(start.value, extent) for start, extent in box if isinstance(start, IntImm)]
    if len(fixed) != len(box) or _opaque(block):
        return None
    whole = all(extent == dim for (_, extent), dim in zip(fixed, region.buffer.shape))
    return None if whole else fixed


def _opaque(block: Block) -> bool:
    """Whether ``block`` calls an intrinsic (its regions are declared, not inferred)."""
    parts = (block.body,) if block.init is None else (block.init, block.body)
    return any(isinstance(node, IntrinsicCall) for part in parts
               for node, _ in tree.walk_under(part))


def _copy_nest(site: Site, place: Stmt, region: BufferRegion, block: Block,
               fixed: bool = False) -> Stmt:
    """Loops around ``block`` over ``region`` (in loop variables outside ``place``); from 0
    where the block's iterators are the region's own (``fixed``)."""
    starts, extents = [], []
    for (start, extent), dim in zip(box_of(region), region.buffer.shape):
        if extent >= dim:
            start, extent = IntImm(0), dim
        starts.append(IntImm(0) if fixed else start)
        extents.append(extent)
    inside = {id(loop) for loop in loops_below(site, place)}
    outside = [loop for loop in site.loops if id(loop) not in inside]
    return build_nest(block, starts, extents, {**scope_ranges(site), **loop_ranges(outside)})


def _cache_buffer(func: PrimFunc, buffer: Buffer, scope: str,
                  box: list[tuple[int, int]] | None = None) -> Buffer:
    """The cache of ``buffer`` in ``scope``: of its shape, or of ``box``'s extents."""
    base = f"{buffer.name}_{scope.replace('.', '_')}"
    shape = buffer.shape if box is None else tuple(extent for _, extent in box)
    return buffer.with_(name=unique_name(base, buffer_names(func)), scope=scope, strides=None,
                        shape=shape)


def _block_name(func: PrimFunc, buffer: Buffer) -> str:
    return unique_name(buffer.name, tree.block_names(func))


def _rewritten(site: Site, old: Buffer, new: Buffer,
               box: list[tuple[int, int]] | None = None) -> BlockRealize:
    """The block's realize accessing ``new`` for ``old``: at the same indices, or at each
    index less its dimension's start in ``box``."""
    realize = site.realize
    block = replace_buffers(realize.block, {old: new}) if box is None else with_regions(
        _Shift(old, new, tuple(start for start, _ in box)).visit(realize.block))
    return BlockRealize(realize.bindings, block, realize.predicate, realize.loc)


class _Shift(Mutator):
    """Every load and store of ``old`` becomes one of ``new`` at its indices less
    ``starts``."""

    def __init__(self, old: Buffer, new: Buffer, starts: tuple[int, ...]) -> None:
        self.old, self.new, self.starts = old, new, starts

    def shifted(self, indices: tuple[Expr, ...]) -> tuple[Expr, ...]:
        """``indices`` less the starts."""
        return tuple(simplify(i - s) if s else i for i, s in zip(indices, self.starts))

    def visit_BufferLoad(self, load: BufferLoad) -> Expr:
        if load.buffer is not self.old:
            return self.generic_visit(load)
        return BufferLoad(self.new, self.shifted(self.visit(load.indices)), load.loc)

    def visit_BufferStore(self, store: BufferStore) -> Stmt:
        if store.buffer is not self.old:
            return self.generic_visit(store)
        return BufferStore(self.new, self.visit(store.value),
                           self.shifted(self.visit(store.indices)), store.loc)


def _placed(place: Stmt, site: Site, realize: BlockRealize) -> Stmt:
    """``place`` with the block's realize replaced by ``realize``."""
    return splice(place, {id(site.realize): (realize,)})


def cache_read(func: PrimFunc, block: BlockRV, buffer: str | int, scope: str | Scope, *,
               registry: Registry | None = None) -> tuple[PrimFunc, BlockRV]:
    """Make ``block`` read ``buffer`` (a name, or an index into its reads) through a copy in
    memory ``scope``.

    A new block ``<buffer>_<scope>`` (dots become underscores; made unique) copies the
    region the block reads into a new buffer of ``scope`` (allocated in the root block),
    right before the outermost statement around the block in which nothing else writes
    ``buffer``. Only ``block`` reads the copy; other readers are unchanged.

    Preconditions: the scope is known: ``global``, ``shared``, ``local``, a ``Scope`` of an
    intrinsic family, or the name of one a family of ``registry`` declares (a Schedule
    passes the registry it was made with); the block reads ``buffer`` and does not write it
    (use cache_write).

    Returns the new function and the handle of the copy block.

    >>> from ir import script as T
    >>> from tensorize.schedule import Schedule
    >>> @T.prim_func
    ... def double(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32")):
    ...     for i in range(8):
    ...         with T.block("B"):
    ...             vi = T.axis.spatial(8, i)
    ...             B[vi] = A[vi] * 2
    >>> sch = Schedule(double)
    >>> copy = sch.cache_read(sch.get_block("B"), "A", "shared")
    >>> print(sch.func)
    @T.prim_func
    def double(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32")):
        A_shared = T.alloc_buffer((8,), "int32", scope="shared")
        for ax0 in range(8):
            with T.block("A_shared"):
                v0 = T.axis.remap("S", [ax0])
                T.reads(A[v0])
                T.writes(A_shared[v0])
                A_shared[v0] = A[v0]
        for i in range(8):
            with T.block("B"):
                vi = T.axis.remap("S", [i])
                T.reads(A_shared[vi])
                T.writes(B[vi])
                B[vi] = A_shared[vi] * 2
    """
    name = "cache_read"
    site = locate(func, block, name)
    region = _pick(site, "reads", buffer, name)
    scope = _scope_name(scope, name, registry)
    source = region.buffer
    check(source not in site.writes(), name,
          f"block {site.name!r} writes {source.name} as well as reading it; a copy would miss "
          "its own updates (use cache_write)", site.realize)
    siblings = sibling_sites(func, site.scope)
    place = _outermost_free(site, lambda s: source in s.writes(), siblings)
    read = relax(region_in_loops(site.realize, region), loops_below(site, place))
    box = _fixed_box(read, site.block)
    cache = _cache_buffer(func, source, scope, box)
    copy = _copy_block(_block_name(func, cache), source, cache, box)
    nest = _copy_nest(site, place, read, copy, box is not None)
    placed = _placed(place, site, _rewritten(site, source, cache, box))
    return splice_func(func, {id(place): (nest, placed)}, (cache,)), BlockRV(copy.name)


def cache_write(func: PrimFunc, block: BlockRV, buffer: str | int, scope: str | Scope, *,
                registry: Registry | None = None) -> tuple[PrimFunc, BlockRV]:
    """Make ``block`` write ``buffer`` (a name, or an index into its writes) into a new
    buffer of memory ``scope``, and copy it back right after.

    The block (reads of the buffer included) uses the new buffer; a new block
    ``<buffer>_<scope>`` copies the written region back to ``buffer`` right after the
    outermost statement around the block in which no other block reads or writes it.

    Preconditions: the scope is known; the block writes ``buffer``; if it also reads it, it
    reads only what it writes and has an init (otherwise the copy would start from
    uninitialised values); in each iteration of the loops outside the copy-back, the block
    writes every element of the copied region (else stale values would be copied back).

    Returns the new function and the handle of the copy-back block.

    >>> from ir import script as T
    >>> from tensorize.schedule import Schedule
    >>> @T.prim_func
    ... def double(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32")):
    ...     for i in range(8):
    ...         with T.block("B"):
    ...             vi = T.axis.spatial(8, i)
    ...             B[vi] = A[vi] * 2
    >>> sch = Schedule(double)
    >>> copy = sch.cache_write(sch.get_block("B"), "B", "local")
    >>> [r.buffer.name for r in sch.get(sch.get_block("B")).block.writes], copy
    (['B_local'], BlockRV('B_local'))
    """
    name = "cache_write"
    site = locate(func, block, name)
    region = _pick(site, "writes", buffer, name)
    scope = _scope_name(scope, name, registry)
    dest = region.buffer
    if dest in site.reads():
        check(site.block.init is not None, name,
              f"block {site.name!r} reads {dest.name} before writing it and has no init; the "
              "cache would not hold the values it reads (cache_write before "
              "decompose_reduction)", site.realize)
        read = [r for r in site.block.reads if r.buffer is dest]
        check(all(r == region for r in read), name,
              f"block {site.name!r} reads {dest.name} outside the region it writes", site.realize)
    siblings = sibling_sites(func, site.scope)
    place = _outermost_free(site, lambda s: dest in s.reads() | s.writes(), siblings)
    inner = loops_below(site, place)
    mapped = region_in_loops(site.realize, region)
    written = relax(mapped, inner)
    exact = writes_exactly(site, mapped, inner, clipped_box(written))
    check(bool(exact), name,
          f"block {site.name!r} does not write every element of {dest.name} it covers in "
          "each iteration of the loops outside the copy-back (or the check cannot tell); "
          "copying back would store values it never wrote", site.realize)
    box = _fixed_box(written, site.block)
    cache = _cache_buffer(func, dest, scope, box)
    copy = _copy_block(_block_name(func, cache), cache, dest, box, from_cache=True)
    nest = _copy_nest(site, place, written, copy, box is not None)
    placed = _placed(place, site, _rewritten(site, dest, cache, box))
    return splice_func(func, {id(place): (placed, nest)}, (cache,)), BlockRV(copy.name)

