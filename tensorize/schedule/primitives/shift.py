"""shift_operand: feed one factor of an integer sum of products through a constant shift.

A block ``C[s] += acc(X[..]) * acc(Y[..])`` summing over its reduce iterators computes, for
any constant ``b``, ``sum (X + b) * Y - b * sum Y``: integer accumulators wrap, so both sides
agree modulo ``2**bits`` whatever the reduction's length. ``shift_operand`` rewrites the block
that way so that ``X + b`` can have another dtype than ``X`` (int8 + 128 is uint8, what x86's
VPDPBUSD takes), in three new blocks around the block's loop nest::

    X_shifted[v] = dtype(acc(X[v]) + b)                    # before: the shifted copy of X
    Y_sum[t] += acc(Y[..])                                 # before: t the spatial iterators
                                                           #   indexing Y, over every reduce
    C[s] += acc(X_shifted[..]) * acc(Y[..])                # the block, reading the copy
    C[s] = C[s] - b * Y_sum[t]                             # after: the compensation

For a GEMM ``C[i, j] += A[i, k] * B[k, j]`` with A shifted, ``Y_sum[j]`` is the column sum of
B, computed once from B (a constant weight's is a constant).
"""

from __future__ import annotations

from ir import (BinOp, Block, BlockRealize, Buffer, BufferLoad, BufferStore, Cast, IntImm,
                IterKind, IterVar, PrimFunc, Stmt, Var, replace_buffers)
from ir.dtypes import DType, dtype as as_dtype
from ir.visitor import post_order_visit, substitute
from tensorize.schedule.check import arg_check, check
from tensorize.schedule.handles import BlockRV
from tensorize.schedule.sites import Site, locate
from tensorize.schedule import tree
from tensorize.schedule.splicing import (buffer_names, build_nest, splice, splice_func,
                                         unique_name, with_regions)

__all__ = ["shift_operand"]

PRIMITIVE = "shift_operand"


def shift_operand(func: PrimFunc, block: BlockRV, buffer: str, bias: int, dtype: str
                  ) -> tuple[PrimFunc, tuple[BlockRV, BlockRV, BlockRV]]:
    """Make ``block`` read ``buffer`` shifted by ``bias`` as ``dtype``, and subtract ``bias``
    times the sum of the other factor from its output (module docs).

    Preconditions: the block's body is ``C[s] = C[s] + acc(X) * acc(Y)`` (either order)
    with ``acc`` an integer dtype, ``X`` a load of ``buffer`` and ``Y`` a load of another
    buffer, each directly under its conversion; ``C`` is indexed by the block's spatial
    iterators, each once (the compensation visits every output element once); every value
    of ``buffer`` plus ``bias`` is a value of ``dtype``, and every value of ``dtype`` one of
    ``acc``; the block's loop nest sits directly in the root block.

    Returns the new function and the handles of the shifting copy, the sum and the
    compensation blocks.

    >>> from ir import script as T
    >>> from tensorize.schedule import Schedule
    >>> @T.prim_func
    ... def dot(A: T.Buffer((4,), "int8"), B: T.Buffer((4,), "int8"),
    ...         C: T.Buffer((1,), "int32")):
    ...     for i, k in T.grid(1, 4):
    ...         with T.block("C"):
    ...             vi, vk = T.axis.remap("SR", [i, k])
    ...             with T.init():
    ...                 C[vi] = 0
    ...             C[vi] += T.cast(A[vk], "int32") * T.cast(B[vk], "int32")
    >>> sch = Schedule(dot)
    >>> _ = sch.shift_operand(sch.get_block("C"), "A", 128, "uint8")
    >>> [b.name for b in (*sch.func.body.block.alloc_buffers,)]
    ['A_shifted', 'B_sum']
    """
    site = locate(func, block, PRIMITIVE)
    arg_check(isinstance(bias, int) and not isinstance(bias, bool) and bias != 0, PRIMITIVE,
              "bias", "a nonzero int", bias)
    arg_check(isinstance(dtype, str), PRIMITIVE, "dtype", "a dtype name", dtype)
    new_type = as_dtype(dtype)
    store, shifted, other = _product(site, buffer)
    acc = store.buffer.dtype
    _check_ranges(site, shifted.buffer, bias, new_type, acc)
    spatial, reduce = _iterators(site, store)
    check(site.scope is func.body and bool(site.loops), PRIMITIVE,
          f"block {site.name!r} requires its own loop nest directly in the root block",
          site.realize)
    names = buffer_names(func)
    copy = shifted.buffer.with_(name=unique_name(f"{buffer}_shifted", names), dtype=new_type,
                                strides=None)
    used = _vars_in(other)
    kept = [iv for iv in spatial if iv.var in used]
    sums = Buffer(unique_name(f"{other.buffer.name}_sum", [*names, copy.name]),
                  tuple(iv.extent for iv in kept) or (1,), acc)
    blocks = tree.block_names(func)
    shift_block = _shift_block(unique_name(f"{buffer}_shift", blocks), shifted, copy, bias,
                               acc)
    sum_block = _sum_block(unique_name(f"{site.name}_{other.buffer.name}_sum", blocks),
                           sums, kept, reduce, other, acc)
    fix_block = _compensation(unique_name(f"{site.name}_compensate", blocks), store, sums,
                              kept, spatial, bias)
    place = site.loops[0]
    rewritten = BlockRealize(site.realize.bindings,
                             replace_buffers(site.realize.block, {shifted.buffer: copy}),
                             site.realize.predicate, site.realize.loc)
    placed = splice(place, {id(site.realize): (rewritten,)})
    edits = {id(place): (_nest(shift_block), _nest(sum_block), placed, _nest(fix_block))}
    new = splice_func(func, edits, (copy, sums))
    return new, (BlockRV(shift_block.name), BlockRV(sum_block.name), BlockRV(fix_block.name))


def _product(site: Site, buffer: str) -> tuple[BufferStore, BufferLoad, BufferLoad]:
    """The block's store and its two factors, the one loading ``buffer`` first."""
    body = site.block.body
    check(isinstance(body, BufferStore) and isinstance(body.value, BinOp)
          and body.value.op == "add", PRIMITIVE,
          f"block {site.name!r} requires a body C[..] = C[..] + a * b", site.realize)
    own = body.value.a
    check(isinstance(own, BufferLoad) and own.buffer is body.buffer
          and own.indices == body.indices, PRIMITIVE,
          f"block {site.name!r} requires its sum to start from the element it stores",
          site.realize)
    product = body.value.b
    check(isinstance(product, BinOp) and product.op == "mul", PRIMITIVE,
          f"block {site.name!r} requires its update to be a product", site.realize)
    factors = [_converted_load(f, body.buffer.dtype) for f in (product.a, product.b)]
    check(None not in factors, PRIMITIVE, f"block {site.name!r} requires each factor to be "
          f"a load converted to {body.buffer.dtype}", site.realize)
    loads = [f for f in factors if f is not None]
    mine = [f for f in loads if f.buffer.name == buffer]
    check(len(mine) == 1, PRIMITIVE, f"block {site.name!r} requires one factor loading "
          f"{buffer}, got {len(mine)}", site.realize)
    other = next(f for f in loads if f is not mine[0])
    return body, mine[0], other


def _converted_load(expr: object, acc: DType) -> BufferLoad | None:
    if isinstance(expr, Cast) and expr.dtype == acc and isinstance(expr.value, BufferLoad):
        return expr.value
    return None


def _check_ranges(site: Site, source: Buffer, bias: int, new_type: DType, acc: DType) -> None:
    """Every shifted value is one of ``new_type``, and every value of that one of ``acc``,
    an integer dtype whose wrapping makes the compensation exact."""
    check(acc.is_int and source.dtype.is_int and new_type.is_int, PRIMITIVE,
          f"block {site.name!r} requires integer operands and accumulator, got "
          f"{source.dtype} into {acc}", site.realize)
    low, high = source.dtype.min + bias, source.dtype.max + bias
    check(new_type.min <= low and high <= new_type.max, PRIMITIVE,
          f"{source.name} + {bias} requires values in {new_type} "
          f"[{new_type.min}, {new_type.max}], got [{low}, {high}]", site.realize)
    check(acc.min <= new_type.min and new_type.max <= acc.max, PRIMITIVE,
          f"block {site.name!r} requires {acc} to hold every {new_type} value", site.realize)


def _iterators(site: Site, store: BufferStore) -> tuple[list[IterVar], list[IterVar]]:
    """The block's spatial and reduce iterators; the store must index by every spatial one,
    once each."""
    spatial = [iv for iv in site.block.iter_vars if iv.kind is IterKind.SPATIAL]
    reduce = [iv for iv in site.block.iter_vars if iv.kind is IterKind.REDUCE]
    check(all(isinstance(i, Var) for i in store.indices)
          and sorted(i.name for i in store.indices) == sorted(iv.var.name for iv in spatial)
          and len(set(store.indices)) == len(spatial), PRIMITIVE,
          f"block {site.name!r} requires {store.buffer.name} indexed by its spatial "
          "iterators, each once", site.realize)
    check(bool(reduce), PRIMITIVE, f"block {site.name!r} requires a reduce iterator",
          site.realize)
    return spatial, reduce


def _vars_in(load: BufferLoad) -> set[Var]:
    return set().union(*(_vars_in_expr(i) for i in load.indices))


def _vars_in_expr(expr: object) -> set[Var]:
    found: set[Var] = set()
    post_order_visit(expr, lambda n: found.add(n) if isinstance(n, Var) else None)
    return found


def _shift_block(name: str, load: BufferLoad, copy: Buffer, bias: int, acc: DType) -> Block:
    """``copy[v] = dtype(acc(source[v]) + bias)`` over all of the source; an iterator takes
    the name of the block's iterator indexing that dimension, as a reindex copy's do (the
    packing schedule finds its tile factors by those names)."""
    source = load.buffer
    names = [i.name if isinstance(i, Var) else f"v{d}" for d, i in enumerate(load.indices)]
    if len(set(names)) < len(names):
        names = [f"v{d}" for d in range(len(names))]
    ivs = tuple(IterVar(Var(n), e) for n, e in zip(names, source.shape))
    idx = tuple(iv.var for iv in ivs)
    value = Cast(copy.dtype, BinOp("add", Cast(acc, source[idx]), IntImm(bias, acc)))
    return with_regions(Block(name, ivs, (), (), BufferStore(copy, value, idx)))


def _sum_block(name: str, sums: Buffer, kept: list[IterVar], reduce: list[IterVar],
               other: BufferLoad, acc: DType) -> Block:
    """``sums[kept] += acc(other)`` over ``kept`` and ``reduce``, its loops in the order the
    other factor's dimensions use them (its last dimension innermost, so the sum walks it
    contiguously: a GEMM's B[k, j] row by row, not column by column)."""
    first_use = {}
    for position, index in enumerate(other.indices):
        for var in sorted(_vars_in_expr(index), key=lambda v: v.name):
            first_use.setdefault(var, position)
    order = sorted((*kept, *reduce), key=lambda iv: first_use.get(iv.var, -1))
    ivs = tuple(IterVar(Var(iv.var.name), iv.extent, iv.kind) for iv in order)
    renamed = {old.var: new.var for old, new in zip(order, ivs)}
    load = BufferLoad(other.buffer, tuple(substitute(i, renamed) for i in other.indices))
    idx = tuple(renamed[iv.var] for iv in kept) or (IntImm(0),)
    body = BufferStore(sums, BinOp("add", sums[idx], Cast(acc, load)), idx)
    return with_regions(Block(name, ivs, (), (), body, BufferStore(sums, IntImm(0, acc), idx)))


def _compensation(name: str, store: BufferStore, sums: Buffer, kept: list[IterVar],
                  spatial: list[IterVar], bias: int) -> Block:
    ivs = tuple(IterVar(Var(iv.var.name), iv.extent) for iv in spatial)
    renamed = {old.var: new.var for old, new in zip(spatial, ivs)}
    out = tuple(substitute(i, renamed) for i in store.indices)
    idx = tuple(renamed[iv.var] for iv in kept) or (IntImm(0),)
    acc = store.buffer.dtype
    value = BinOp("sub", store.buffer[out], BinOp("mul", IntImm(bias, acc), sums[idx]))
    return with_regions(Block(name, ivs, (), (), BufferStore(store.buffer, value, out)))


def _nest(block: Block) -> Stmt:
    """Loops over every iterator of ``block``, from 0."""
    return build_nest(block, [IntImm(0)] * len(block.iter_vars),
                      [iv.extent for iv in block.iter_vars], {})
