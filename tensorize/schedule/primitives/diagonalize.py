"""diagonalize: a depthwise reduction as grouped GEMMs over channel tiles, each with a
diagonal weight tile.

A depthwise block ``O[..., c] += X[..., c] * W[..., c]`` has a spatial iterator, the channel
``c``, that indexes the output and both operands alike, so it can be neither a GEMM's N (one
operand lacks it) nor its K (the output lacks it). With ``c = g * T + o`` (a group ``g`` of
``T`` channels) and ``D[g, ..., i, o] = W[..., g * T + o]`` where ``i == o`` and 0 elsewhere::

    O[..., g*T + o] += sum over i < T of X[..., g*T + i] * D[g, ..., i, o]

is the same sum: for each ``(g, o)`` only the term ``i == o`` is not zero, and it is the
original term. Each group is then a GEMM with N = ``o`` and K = the old reduce iterators and
``i``, which an array with T columns computes one tile at a time; T - 1 of every T products
multiply a zero. Integer sums are exact whatever the order; a float sum gains T - 1 exact
zeros per term, which changes no value (x + 0 == x), so the block computes the same numbers.
"""

from __future__ import annotations

from typing import NoReturn

from ir import (Block, BlockRealize, Buffer, BufferLoad, BufferStore, Cast, Expr, For, IntImm,
                IterKind, IterVar, PrimFunc, Var, const, eq, select, substitute)
from ir.expr import BinOp
from ir.visitor import vars_of
from tensorize.schedule import tree
from tensorize.schedule.check import arg_check, check, check_root_nest, fail
from tensorize.schedule.handles import BlockRV
from tensorize.schedule.sites import Site, locate
from tensorize.schedule.splicing import (buffer_names, build_nest, splice_func, unique_name,
                                         with_regions)

__all__ = ["diagonalize"]

_PRIMITIVE = "diagonalize"


def diagonalize(func: PrimFunc, block: BlockRV, tile: int) -> tuple[PrimFunc, BlockRV]:
    """Rewrite the depthwise block ``block`` as grouped GEMMs over ``tile`` channels with a
    diagonal weight tile (module docs).

    Preconditions: the block sits directly in the root block, in a perfect loop nest binding
    each iterator to one loop in order, with no predicate; its body is ``O[idx] = O[idx] +
    a * b`` (each of ``a``, ``b`` a load, or a cast of one), its init (if any) a store to
    ``O[idx]``; a spatial iterator ``c`` (the channel) is one index of ``O`` and of both
    operands and appears nowhere else in them; one operand (the weight ``W``) is indexed by
    no other spatial iterator; ``tile`` divides ``c``'s extent.

    A new block ``<W>_diagonal`` before the nest builds ``D`` (groups, W's other dimensions,
    tile, tile) in a new root buffer; the block keeps its name, with iterators (group, the
    other spatial ones with ``c`` replaced by its column in the group, the reduce ones, the
    channel in the group) and reads ``D`` instead of ``W``. Returns the new function and the
    handle of the block building ``D``.

    >>> from ir import script as T
    >>> from tensorize.schedule import Schedule
    >>> @T.prim_func
    ... def f(X: T.Buffer((6, 4), "int8"), W: T.Buffer((3, 4), "int8"),
    ...       O: T.Buffer((4, 4), "int32")):
    ...     for h, c, r in T.grid(4, 4, 3):
    ...         with T.block("O"):
    ...             vh, vc, vr = T.axis.remap("SSR", [h, c, r])
    ...             with T.init():
    ...                 O[vh, vc] = 0
    ...             O[vh, vc] += T.cast(X[vh + vr, vc], "int32") * T.cast(W[vr, vc], "int32")
    >>> sch = Schedule(f)
    >>> sch.diagonalize(sch.get_block("O"), 2)
    BlockRV('W_diagonal')
    >>> print(sch.func)
    @T.prim_func
    def f(X: T.Buffer((6, 4), "int8"), W: T.Buffer((3, 4), "int8"), O: T.Buffer((4, 4), "int32")):
        W_diagonal = T.alloc_buffer((2, 3, 2, 2), "int8")
        for ax0, ax1, ax2, ax3 in T.grid(2, 3, 2, 2):
            with T.block("W_diagonal"):
                v0, v1, v2, v3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
                T.reads(W[v1, v0 * 2 + v3])
                T.writes(W_diagonal[v0, v1, v2, v3])
                W_diagonal[v0, v1, v2, v3] = T.if_then_else(v2 == v3, W[v1, v0 * 2 + v3], 0)
        for c_g, h, c_o, r, c_i in T.grid(2, 4, 2, 3, 2):
            with T.block("O"):
                vc_g, vh, vc_o, vr, vc_i = T.axis.remap("SSSRR", [c_g, h, c_o, r, c_i])
                T.reads(O[vh, vc_g * 2 + vc_o], X[vh + vr, vc_g * 2 + vc_i],
                        W_diagonal[vc_g, vr, vc_i, vc_o])
                T.writes(O[vh, vc_g * 2 + vc_o])
                with T.init():
                    O[vh, vc_g * 2 + vc_o] = 0
                O[vh, vc_g * 2 + vc_o] += T.cast(X[vh + vr, vc_g * 2 + vc_i],
                                                 "int32") * T.cast(W_diagonal[vc_g, vr, vc_i, vc_o],
                                                                   "int32")
    """
    arg_check(isinstance(tile, int) and not isinstance(tile, bool) and tile > 0, _PRIMITIVE,
              "tile", "a positive int", tile)
    site = locate(func, block, _PRIMITIVE)
    check_root_nest(func, site, _PRIMITIVE)
    out, operands = _accumulation(site)
    channel = _channel(site, out, operands)
    weight = _weight(site, channel, operands)
    data = operands[1 - operands.index(weight)]
    extent = next(iv.extent for iv in site.block.iter_vars if iv.var is channel)
    check(extent % tile == 0, _PRIMITIVE,
          f"block {site.name!r} requires its channel extent to be a multiple of the tile, got "
          f"{channel.name} = {extent} and tile {tile}", site.realize)
    groups = extent // tile
    dim = _position(weight, channel)
    others = [d for d in range(len(weight.indices)) if d != dim]
    diagonal = Buffer(unique_name(f"{weight.buffer.name}_diagonal", buffer_names(func)),
                      (groups, *(weight.buffer.shape[d] for d in others), tile, tile),
                      weight.buffer.dtype)
    build = _diagonal_block(diagonal, weight.buffer, dim, tile,
                            unique_name(diagonal.name, tree.block_names(func)))
    nest = build_nest(build, [IntImm(0)] * len(build.iter_vars),
                      [iv.extent for iv in build.iter_vars], {})

    g, o, i = (Var(f"{channel.name}_{s}") for s in "goi")
    spatial = [iv for iv in site.block.iter_vars if iv.kind is IterKind.SPATIAL]
    reduce = [iv for iv in site.block.iter_vars if iv.kind is IterKind.REDUCE]
    iters = ([IterVar(g, groups)]
             + [IterVar(o, tile) if iv.var is channel else iv for iv in spatial]
             + reduce + [IterVar(i, tile, IterKind.REDUCE)])
    group_start = g * tile
    diagonal_load = BufferLoad(diagonal, (g, *(weight.indices[d] for d in others), i, o))
    loads = {id(weight): diagonal_load,
             id(data): substitute(data, {channel: group_start + i})}
    body = substitute(_replace_loads(site.block.body, loads), {channel: group_start + o})
    init = site.block.init
    if init is not None:
        init = substitute(init, {channel: group_start + o})
    grouped = with_regions(Block(site.name, tuple(iters), (), (), body, init,
                                 loc=site.block.loc))
    loop_vars = {iv.var: loop.var for iv, loop in zip(site.block.iter_vars, site.loops)}
    channel_loop = loop_vars[channel].name
    loop_vars.update({v: Var(f"{channel_loop}_{s}") for v, s in zip((g, o, i), "goi")})
    stmt = BlockRealize(tuple(loop_vars[iv.var] for iv in iters), grouped,
                        loc=site.realize.loc)
    for iv in reversed(iters):
        stmt = For(loop_vars[iv.var], iv.extent, stmt)
    new = splice_func(func, {id(site.loops[0]): (nest, stmt)}, (diagonal,))
    return new, BlockRV(build.name)


def _accumulation(site: Site) -> tuple[BufferStore, list[BufferLoad]]:
    """The block's store ``O[idx] = O[idx] + a * b`` and its two operand loads."""
    store = site.block.body
    reason = (f"block {site.name!r} requires the body O[idx] = O[idx] + a * b, a and b loads "
              "or casts of loads")
    check(isinstance(store, BufferStore) and isinstance(store.value, BinOp)
          and store.value.op == "add", _PRIMITIVE, reason, site.realize)
    terms = [store.value.a, store.value.b]
    own = [t for t in terms if isinstance(t, BufferLoad) and t.buffer is store.buffer
           and t.indices == store.indices]
    check(len(own) == 1, _PRIMITIVE, reason, site.realize)
    product = terms[1 - terms.index(own[0])]
    check(isinstance(product, BinOp) and product.op == "mul", _PRIMITIVE, reason, site.realize)
    operands = [_loaded(e) for e in (product.a, product.b)]
    check(all(isinstance(o, BufferLoad) and o.buffer is not store.buffer for o in operands)
          and operands[0] is not operands[1], _PRIMITIVE, reason, site.realize)
    init = site.block.init
    check(init is None or (isinstance(init, BufferStore) and init.buffer is store.buffer
                           and init.indices == store.indices), _PRIMITIVE,
          f"block {site.name!r} requires its init to be one store to the element it "
          "accumulates", site.realize)
    return store, operands  # type: ignore[return-value]


def _loaded(expr: Expr) -> Expr:
    """The load under a cast, or ``expr``."""
    return expr.value if isinstance(expr, Cast) else expr


def _channel(site: Site, out: BufferStore, operands: list[BufferLoad]) -> Var:
    """The spatial iterator that is one index of the output and of both operands and occurs
    nowhere else in them."""
    for iv in site.block.iter_vars:
        if iv.kind is IterKind.SPATIAL and all(
                _position(access, iv.var) is not None for access in (out, *operands)):
            return iv.var
    return _refuse(site, "requires a spatial iterator (the channel) that is one index of the "
                         "output and of both operands, alone; got none (not a depthwise "
                         "reduction)")


def _weight(site: Site, channel: Var, operands: list[BufferLoad]) -> BufferLoad:
    """The operand indexed by no spatial iterator but the channel (the later one if both)."""
    spatial = {iv.var for iv in site.block.iter_vars
               if iv.kind is IterKind.SPATIAL and iv.var is not channel}
    for operand in reversed(operands):
        if not spatial.intersection(vars_of(operand.indices)):
            return operand
    return _refuse(site, "requires one operand (the weight) indexed by no spatial iterator "
                         f"but {channel.name}; got both indexed by others")


def _refuse(site: Site, reason: str) -> NoReturn:
    fail(_PRIMITIVE, f"block {site.name!r} {reason}", site.realize)


def _position(access: BufferLoad | BufferStore, var: Var) -> int | None:
    """The dimension ``access`` indexes by ``var`` alone, when ``var`` occurs in no other."""
    bare = [d for d, index in enumerate(access.indices) if index is var]
    mentions = [d for d, index in enumerate(access.indices) if var in vars_of(index)]
    return bare[0] if len(bare) == 1 and len(mentions) == 1 else None


def _replace_loads(store: BufferStore, loads: dict[int, Expr]) -> BufferStore:
    """``store`` with the operand loads (by identity) replaced."""
    add = store.value
    own, product = (add.a, add.b) if isinstance(add.b, BinOp) else (add.b, add.a)

    def swapped(expr: Expr) -> Expr:
        if isinstance(expr, Cast) and id(expr.value) in loads:
            return Cast(expr.dtype, loads[id(expr.value)])
        return loads.get(id(expr), expr)

    new_product = BinOp("mul", swapped(product.a), swapped(product.b))
    value = BinOp("add", own, new_product) if own is add.a else BinOp("add", new_product, own)
    return BufferStore(store.buffer, value, store.indices, store.loc)


def _diagonal_block(diagonal: Buffer, weight: Buffer, dim: int, tile: int, name: str) -> Block:
    """``D[g, w..., i, o] = W[w... with g * tile + o at dim] if i == o else 0``."""
    iters = tuple(IterVar(Var(f"v{d}"), extent) for d, extent in enumerate(diagonal.shape))
    g, *kept, i, o = (iv.var for iv in iters)
    indices: list[Expr] = list(kept)
    indices.insert(dim, g * tile + o)
    value = select(eq(i, o), BufferLoad(weight, tuple(indices)), const(0, weight.dtype))
    store = BufferStore(diagonal, value, tuple(iv.var for iv in iters))
    return with_regions(Block(name, iters, (), (), store))
