"""pad_einsum: round a block's iteration space up to multiples of an intrinsic's shape.

A 100x60x36 GEMM cannot use a 16x16x16 instruction until every extent is a multiple of 16.
``pad_einsum`` grows the iteration space to 112x64x48 and makes the extra iterations
harmless: inputs are copied into zero-padded buffers, so padded reduce iterations add zero,
and the output goes to a padded intermediate from which only the original region is copied
back, so padded spatial iterations never reach the user's output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ir import (BinOp, Block, BlockRealize, Buffer, BufferLoad, BufferStore, Cast, Expr, For,
                IterKind, IterVar, PrimFunc, Stmt, Var, and_, const, min_, post_order_visit,
                replace_buffers, select, seq)
from ir.regions import infer_block_regions
from tensorize.schedule.check import arg_check, check, get_block
from tensorize.schedule.handles import BlockRV
from tensorize.schedule.tree import Located
from tensorize.schedule.primitives.layout import (anchor_of, copy_nest, simple_loop_nest,
                                                   splice, unique_block_name,
                                                   unique_buffer_name)

__all__ = ["pad_einsum"]


@dataclasses.dataclass(frozen=True, slots=True)
class _Einsum:
    """The one store of an einsum block and the index pattern of each buffer it reads."""

    store: BufferStore
    reads: dict[Buffer, tuple[Var, ...]]


def pad_einsum(func: PrimFunc, block: BlockRV, padding: Sequence[int]) -> tuple[PrimFunc, None]:
    """Pad an einsum block's iteration space to multiples of ``padding`` (one size per block
    iterator, in order), and its buffers with it.

    Every input read along a grown iterator is first copied by a block ``<input>_pad`` into a
    buffer of the padded shape, zero outside the original extents; a grown output is computed
    into ``<output>_pad`` and copied back by a block ``<output>_unpad`` over the original region
    only. Loops keep their order and take the new extents. When every size already divides its
    extent, nothing changes and the same function is returned.

    Preconditions: the block is an einsum (its body is one store, and every buffer access,
    the store's included, is indexed by block iterators directly, one pattern per buffer;
    any init is one store of the same element); it sits alone under one serial loop per
    iterator with no predicate; it reads its own output only after an init; when a reduce
    iterator grows, the update is ``out = out + e`` where a factor of the product ``e`` is a
    load indexed by that iterator (so padded iterations add zero); nothing divides by a value
    read from a padded input.

    >>> from tests.tensorize.schedule.kernels import gemm_int8
    >>> from tensorize.schedule import Schedule
    >>> sch = Schedule(gemm_int8(100, 60, 36))
    >>> sch.pad_einsum(sch.get_block("C"), [16, 16, 16])
    >>> [iv.extent for iv in sch.get(sch.get_block("C")).block.iter_vars]
    [112, 64, 48]
    """
    primitive = "pad_einsum"
    found = get_block(func, block, primitive)
    realize: BlockRealize = found.node
    blk = realize.block
    n_iters = len(blk.iter_vars)
    arg_check(isinstance(padding, (list, tuple)) and len(padding) == n_iters, primitive,
              "padding", f"one size per iterator of block {blk.name} ({n_iters})", padding)
    arg_check(all(isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in padding),
              primitive, "padding", "positive ints", padding)
    loops = simple_loop_nest(found, primitive, in_order=False)
    einsum = _einsum(blk, primitive)
    extents = {iv.var: iv.extent for iv in blk.iter_vars}
    padded = {iv.var: -(-iv.extent // p) * p for iv, p in zip(blk.iter_vars, padding)
              if iv.extent % p}
    if not padded:
        return func, None
    _check_padding_is_harmless(blk, einsum, padded, primitive)

    swaps: dict[Buffer, Buffer] = {}
    copies_in: list[Stmt] = []
    output = einsum.store.buffer
    for buffer, pattern in einsum.reads.items():
        if buffer is output or not any(v in padded for v in pattern):
            continue
        swaps[buffer] = _padded_buffer(func, buffer, pattern, padded)
        copies_in.append(_copy_in(func, buffer, swaps[buffer], pattern, extents, padded))
    copies_out: list[Stmt] = []
    pattern = tuple(v for v in einsum.store.indices if isinstance(v, Var))
    if any(v in padded for v in pattern):
        swaps[output] = _padded_buffer(func, output, pattern, padded)
        copies_out.append(_copy_out(func, swaps[output], output, pattern, extents))

    iter_vars = tuple(IterVar(iv.var, padded.get(iv.var, iv.extent), iv.kind, iv.loc)
                      for iv in blk.iter_vars)
    new_block = dataclasses.replace(blk, iter_vars=iter_vars,
                                    body=replace_buffers(blk.body, swaps),
                                    init=replace_buffers(blk.init, swaps))
    reads, writes = infer_block_regions(new_block)
    new_block = dataclasses.replace(new_block, reads=tuple(reads), writes=tuple(writes))
    stmt: Stmt = dataclasses.replace(realize, block=new_block)
    grown = {id(loop): padded[iv.var] for iv, loop in zip(blk.iter_vars, loops)
             if iv.var in padded}
    for loop in reversed(_nest_order(found, loops)):
        stmt = dataclasses.replace(loop, extent=grown.get(id(loop), loop.extent), body=stmt)
    return splice(func, found, anchor_of(found), seq(*copies_in, stmt, *copies_out),
                  tuple(swaps.values())), None


def _nest_order(found: Located, loops: list[For]) -> list[For]:
    """``loops`` outermost first, as they are nested above the block."""
    return [node for node in found.path if any(node is loop for loop in loops)]


def _einsum(blk: Block, primitive: str) -> _Einsum:
    """The block's store and read patterns, or a ScheduleError saying why it is no einsum."""
    store = blk.body
    check(isinstance(store, BufferStore), primitive,
          f"block {blk.name}'s body is a {type(store).__name__}, not one store; pad_einsum "
          "requires an einsum block")
    own = {iv.var for iv in blk.iter_vars}
    reads: dict[Buffer, tuple[Var, ...]] = {}

    def direct(buffer: Buffer, indices: tuple[Expr, ...]) -> tuple[Var, ...]:
        for index in indices:
            check(isinstance(index, Var) and index in own, primitive,
                  f"block {blk.name} indexes {buffer.name} with {index}, not an iterator of "
                  "the block; pad_einsum requires an einsum block (every access indexed by "
                  "iterators directly)")
        return tuple(i for i in indices if isinstance(i, Var))

    def record(node: object) -> None:
        if not isinstance(node, BufferLoad):
            return
        pattern = direct(node.buffer, node.indices)
        known = reads.setdefault(node.buffer, pattern)
        check(known == pattern, primitive,
              f"block {blk.name} reads {node.buffer.name} with two index patterns "
              f"({', '.join(v.name for v in known)} and {', '.join(v.name for v in pattern)}); "
              "pad_einsum requires one per buffer")

    direct(store.buffer, store.indices)
    post_order_visit(store.value, record)
    if blk.init is not None:
        init = blk.init
        check(isinstance(init, BufferStore) and init.buffer is store.buffer
              and init.indices == store.indices, primitive,
              f"block {blk.name}'s init is not one store to "
              f"{store.buffer.name}[{', '.join(str(i) for i in store.indices)}]")
        post_order_visit(init.value, record)
    own_pattern = reads.get(store.buffer)
    check(own_pattern is None or own_pattern == tuple(store.indices), primitive,
          f"block {blk.name} reads its output {store.buffer.name} at other indices than it "
          "writes")
    return _Einsum(store, reads)


def _check_padding_is_harmless(blk: Block, einsum: _Einsum, padded: dict[Var, int],
                               primitive: str) -> None:
    """Padded iterations must not change the original region of the output."""
    store = einsum.store
    output = store.buffer
    check(output not in einsum.reads or blk.init is not None, primitive,
          f"block {blk.name} reads {output.name}'s earlier values (it has no init); the "
          "padded output would start without them")
    _check_no_division_by_padding(blk, store.value, einsum, padded, primitive)
    grown = [iv for iv in blk.iter_vars if iv.kind is IterKind.REDUCE and iv.var in padded]
    if not grown:
        return
    names = ", ".join(iv.var.name for iv in grown)
    value = store.value
    update = None
    if isinstance(value, BinOp) and value.op == "add":
        own = BufferLoad(output, store.indices)
        if value.a == own:
            update = value.b
        elif value.b == own:
            update = value.a
    check(update is not None, primitive,
          f"block {blk.name} is not a sum {output.name} = {output.name} + ...; padding its "
          f"reduce iterator {names} would fold extra values into the result")
    factors = _factors(update)
    for iv in grown:
        check(any(_zero_along(f, iv.var, output) for f in factors), primitive,
              f"in block {blk.name}, no factor of the summed product is a load indexed by "
              f"reduce iterator {iv.var.name}; its padded iterations would not add zero")


def _check_no_division_by_padding(blk: Block, value: Expr, einsum: _Einsum,
                                  padded: dict[Var, int], primitive: str) -> None:
    padded_inputs = {b for b, p in einsum.reads.items() if any(v in padded for v in p)}

    def visit(node: object) -> None:
        if isinstance(node, BinOp) and node.op in ("div", "floordiv", "floormod"):
            loads: list[Buffer] = []
            post_order_visit(node.b, lambda n: loads.append(n.buffer)
                             if isinstance(n, BufferLoad) else None)
            for buffer in loads:
                check(buffer not in padded_inputs, primitive,
                      f"block {blk.name} divides by a value read from {buffer.name}, which "
                      "padding fills with zeros")

    post_order_visit(value, visit)


def _factors(expr: Expr) -> list[Expr]:
    if isinstance(expr, BinOp) and expr.op == "mul":
        return _factors(expr.a) + _factors(expr.b)
    return [expr]


def _zero_along(factor: Expr, var: Var, output: Buffer) -> bool:
    """True when ``factor`` is a (cast) load of an input indexed by ``var``: zero wherever
    ``var`` is in the padding."""
    while isinstance(factor, Cast):
        factor = factor.value
    return (isinstance(factor, BufferLoad) and factor.buffer is not output
            and any(i is var for i in factor.indices))


def _padded_buffer(func: PrimFunc, buffer: Buffer, pattern: tuple[Var, ...],
                   padded: dict[Var, int]) -> Buffer:
    shape = tuple(padded.get(v, n) for v, n in zip(pattern, buffer.shape))
    return Buffer(unique_buffer_name(func, f"{buffer.name}_pad"), shape, buffer.dtype,
                  buffer.scope)


def _copy_in(func: PrimFunc, source: Buffer, target: Buffer, pattern: tuple[Var, ...],
             extents: dict[Var, int], padded: dict[Var, int]) -> Stmt:
    """A block copying ``source`` into ``target``, zero where a padded dimension's index is
    past the original extent. The load's index is clamped because a select evaluates both
    branches."""
    copy_vars = [Var(v.name) for v in pattern]
    index: list[Expr] = []
    inside: Expr | None = None
    for var, v in zip(copy_vars, pattern):
        if v not in padded:
            index.append(var)
            continue
        index.append(min_(var, extents[v] - 1))
        bound = var < extents[v]
        inside = bound if inside is None else and_(inside, bound)
    value = select(inside, BufferLoad(source, tuple(index)), const(0, source.dtype))
    store = BufferStore(target, value, tuple(copy_vars))
    name = unique_block_name(func, target.name)
    return copy_nest(name, list(zip(copy_vars, target.shape)), store)


def _copy_out(func: PrimFunc, source: Buffer, target: Buffer, pattern: tuple[Var, ...],
              extents: dict[Var, int]) -> Stmt:
    """A block copying the original region of the padded output ``source`` back to
    ``target``: the region the block wrote before padding."""
    copy_vars = [Var(v.name) for v in pattern]
    store = BufferStore(target, BufferLoad(source, tuple(copy_vars)), tuple(copy_vars))
    name = unique_block_name(func, f"{target.name}_unpad")
    return copy_nest(name, [(c, extents[v]) for c, v in zip(copy_vars, pattern)], store)
