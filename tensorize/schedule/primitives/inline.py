"""compute_inline, inline_update and write_in_place: remove an intermediate buffer by folding
one block into its readers, remove a pass over a buffer by folding an update of it in place
into the block that reads it next, or let an elementwise block overwrite its input.

``compute_inline(block)``: a block that only computes ``B[v...] = f(v...)`` (no reduction,
each element once) disappears; every read ``B[idx]`` becomes ``f(idx)``. A staging copy
followed by an elementwise epilogue becomes the epilogue reading the staged tile directly.

``inline_update(block)``: a block that updates each element of an intermediate in place,
``B[v...] = g(B[v...], v...)`` (a compensation subtracted from a sum), disappears; the one
block that reads ``B`` after it reads ``g(B[idx], idx)`` wherever it read ``B[idx]``. One
pass over ``B`` fewer, the same values.

``write_in_place(block, buffer)``: an elementwise block that reads ``X[idx]`` and writes
``Y[idx]`` (same shape, dtype and scope, both intermediates) writes ``X[idx]`` instead, and
every later use of ``Y`` uses ``X``. Element ``idx`` of ``X`` is read by the block just before
it is overwritten there, and nothing reads ``X`` afterwards, so no value is lost. This is the
form of a machine's in-place vector instructions (``acc = max(acc, 0)``).
"""

from __future__ import annotations

from ir import (Block, BlockRealize, Buffer, BufferLoad, BufferStore, Expr, IntImm, IntrinsicCall,
                IterKind, Mutator, PrimFunc, Var, replace_buffers, substitute)
from ir.visitor import post_order_visit
from tensorize.schedule import tree
from tensorize.schedule.check import arg_check, check, fail
from tensorize.schedule.handles import BlockRV
from tensorize.schedule.sites import Site, locate
from tensorize.schedule.splicing import removal, splice_func, with_regions

__all__ = ["compute_inline", "inline_update", "write_in_place"]


def compute_inline(func: PrimFunc, block: BlockRV) -> tuple[PrimFunc, None]:
    """Fold a block ``B[v...] = f(v...)`` into every block that reads ``B``, and drop it.

    Preconditions: the block has no reduce iterator, no init and no predicate; its body is
    one store whose indices are its iterators, each once, over extents equal to ``B``'s
    shape (so it writes every element once); ``B`` is an intermediate that no other block
    writes, that the stored value does not read, and that no intrinsic call reads. Returns
    the new function.
    """
    name = "compute_inline"
    site = locate(func, block, name)
    blk = site.block
    store = _single_store(site, name)
    buffer = store.buffer
    check(not any(iv.kind is IterKind.REDUCE for iv in blk.iter_vars) and blk.init is None,
          name, f"block {site.name!r} is a reduction; only a block computing each element "
                "once can be inlined")
    check(_is_true(site.realize.predicate), name,
          f"block {site.name!r} runs under a predicate; inlining would compute elements it "
          "skips")
    ivs = {iv.var: iv for iv in blk.iter_vars}
    indices_ok = (all(isinstance(i, Var) and i in ivs for i in store.indices)
                  and len({id(i) for i in store.indices}) == len(store.indices)
                  and len(store.indices) == len(blk.iter_vars)
                  and all(ivs[i].extent == n for i, n in zip(store.indices, buffer.shape)))
    check(indices_ok, name, f"block {site.name!r} stores {buffer.name}[{_text(store.indices)}]; "
                            "inlining needs one iterator per dimension, over the whole buffer")
    check(buffer in func.allocs, name, f"block {site.name!r} writes {buffer.name}, a parameter "
                                       f"of {func.name}: its values must reach the caller")
    check(not _reads(store.value, buffer), name,
          f"block {site.name!r} reads {buffer.name}, the buffer it writes")
    readers = _readers(func, site, buffer, name, after_only=False)
    check(bool(readers), name, f"no block reads {buffer.name}; there is nothing to inline into")
    inline = _Inline(buffer, store)
    edits = {id(removal(site, name)): ()}
    for realize in readers:
        new_block = with_regions(inline.visit(realize.block))
        edits[id(realize)] = (BlockRealize(realize.bindings, new_block, realize.predicate,
                                           realize.loc),)
    new = splice_func(func, edits)
    return _drop_alloc(new, buffer), None


def inline_update(func: PrimFunc, block: BlockRV) -> tuple[PrimFunc, None]:
    """Fold an in-place update ``B[v...] = g(B[v...], v...)`` into the one block that reads
    ``B`` after it, and drop it (module docs).

    Preconditions: the block has no reduce iterator, no init and no predicate; its body is
    one store whose indices are its iterators, each once, over ``B``'s whole shape, and the
    stored value reads ``B`` only at those indices; ``B`` is an intermediate; after the
    block (in program order) exactly one block reads ``B``, not through an intrinsic call,
    and none writes it. Returns the new function.
    """
    name = "inline_update"
    site = locate(func, block, name)
    blk = site.block
    store = _single_store(site, name)
    buffer = store.buffer
    check(not any(iv.kind is IterKind.REDUCE for iv in blk.iter_vars) and blk.init is None
          and _is_true(site.realize.predicate), name,
          f"block {site.name!r} is a reduction or runs under a predicate; only an update of "
          "every element once can be folded")
    ivs = {iv.var: iv for iv in blk.iter_vars}
    check(all(isinstance(i, Var) and i in ivs for i in store.indices)
          and len({id(i) for i in store.indices}) == len(store.indices) == len(ivs)
          and all(ivs[i].extent == n for i, n in zip(store.indices, buffer.shape)), name,
          f"block {site.name!r} stores {buffer.name}[{_text(store.indices)}]; folding needs "
          "one iterator per dimension, over the whole buffer")
    check(buffer in func.allocs, name, f"block {site.name!r} updates {buffer.name}, a "
                                       f"parameter of {func.name}: the caller reads it")
    own: list[BufferLoad] = []
    post_order_visit(store.value, lambda n: own.append(n) if isinstance(n, BufferLoad)
                     and n.buffer is buffer else None)
    check(all(load.indices == store.indices for load in own), name,
          f"block {site.name!r} reads {buffer.name} at other indices than it updates")
    readers = _readers(func, site, buffer, name, after_only=True)
    check(len(readers) == 1, name, f"{len(readers)} blocks read {buffer.name} after block "
                                   f"{site.name!r}; folding needs exactly one")
    reader, = readers
    folded = with_regions(_Inline(buffer, store).visit(reader.block))
    edits = {id(removal(site, name)): (),
             id(reader): (BlockRealize(reader.bindings, folded, reader.predicate, reader.loc),)}
    return splice_func(func, edits), None


def write_in_place(func: PrimFunc, block: BlockRV, buffer: str) -> tuple[PrimFunc, None]:
    """Make an elementwise block write its output into its input ``buffer`` (by name).

    Preconditions: the block's body is one store ``Y[idx] = f(...)`` whose every read of
    ``buffer`` is ``buffer[idx]``, the very indices it stores to; ``Y`` and ``buffer`` are
    intermediates of one shape, dtype and scope; no other block writes ``Y``, and no block
    after this one (in program order) reads or writes ``buffer``. Returns the new function.
    """
    name = "write_in_place"
    arg_check(isinstance(buffer, str), name, "buffer", "a buffer name", buffer)
    site = locate(func, block, name)
    store = _single_store(site, name)
    target = store.buffer
    source = next((r.buffer for r in site.block.reads if r.buffer.name == buffer), None)
    check(source is not None, name, f"block {site.name!r} does not read {buffer!r}")
    check(source is not target, name, f"block {site.name!r} already writes {buffer!r}")
    same = (source.shape, source.dtype, source.scope) == (target.shape, target.dtype,
                                                          target.scope)
    check(same, name, f"{target.name} ({target.shape}, {target.dtype}, {target.scope}) and "
                      f"{source.name} ({source.shape}, {source.dtype}, {source.scope}) differ; "
                      "one cannot hold the other")
    for b in (source, target):
        check(b in func.allocs, name, f"{b.name} is a parameter of {func.name}; only "
                                      "intermediates can share storage")
    loads: list[BufferLoad] = []
    post_order_visit(store.value, lambda n: loads.append(n) if isinstance(n, BufferLoad)
                     and n.buffer is source else None)
    check(all(l.indices == store.indices for l in loads), name,
          f"block {site.name!r} reads {source.name} at other indices than it writes "
          f"{target.name}[{_text(store.indices)}]; an element would be overwritten before "
          "it is read")
    after = False
    for stmt, _ in tree.walk_stmts(func):
        if not isinstance(stmt, BlockRealize) or stmt.block is func.root:
            continue
        if stmt is site.realize:
            after = True
            continue
        other = stmt.block
        check(not any(w.buffer is target for w in other.writes), name,
              f"block {other.name!r} also writes {target.name}")
        if after:
            check(not any(r.buffer is source for r in (*other.reads, *other.writes)), name,
                  f"block {other.name!r} uses {source.name} after block {site.name!r}; "
                  "it would see the overwritten values")
    merged = replace_buffers(func.body, {target: source})
    new = PrimFunc(func.name, func.params, merged, func.loc)
    return _drop_alloc(new, target, keep=source), None


def _readers(func: PrimFunc, site: Site, buffer: Buffer, primitive: str, after_only: bool
             ) -> list[BlockRealize]:
    """The blocks other than ``site``'s that read ``buffer`` (with ``after_only``, those
    after it in program order); ScheduleError where such a block also writes ``buffer`` or
    reads it through an intrinsic call."""
    readers, after = [], False
    for stmt, _ in tree.walk_stmts(func):
        if not isinstance(stmt, BlockRealize) or stmt.block is func.root:
            continue
        if stmt is site.realize:
            after = True
            continue
        if after_only and not after:
            continue
        other = stmt.block
        check(not any(w.buffer is buffer for w in other.writes), primitive,
              f"block {other.name!r} also writes {buffer.name}")
        if any(r.buffer is buffer for r in other.reads):
            check(not _calls_intrinsic(other), primitive,
                  f"block {other.name!r} reads {buffer.name} through an intrinsic call")
            readers.append(stmt)
    return readers


class _Inline(Mutator):
    """Replace each read of the inlined buffer by the stored value at those indices."""

    def __init__(self, buffer: Buffer, store: BufferStore) -> None:
        self.buffer = buffer
        self.store = store

    def visit_BufferLoad(self, load: BufferLoad) -> Expr:
        indices = tuple(self.visit(i) for i in load.indices)
        if load.buffer is not self.buffer:
            return load if indices == load.indices else BufferLoad(load.buffer, indices,
                                                                   load.loc)
        mapping = dict(zip(self.store.indices, indices))
        return substitute(self.store.value, mapping)


def _single_store(site: Site, primitive: str) -> BufferStore:
    body = site.block.body
    if not isinstance(body, BufferStore):
        fail(primitive, f"block {site.name!r} must be one store, got a {type(body).__name__}")
    return body


def _drop_alloc(func: PrimFunc, buffer: Buffer, keep: Buffer | None = None) -> PrimFunc:
    """``func`` without ``buffer`` among the root block's allocations."""
    root = func.root
    allocs: list[Buffer] = []
    for b in root.alloc_buffers:  # renaming may have made two entries one buffer
        if b is not buffer and not any(b is a for a in allocs):
            allocs.append(b)
    if keep is not None and not any(keep is a for a in allocs):
        allocs.append(keep)
    new_root = Block(root.name, root.iter_vars, root.reads, root.writes, root.body, root.init,
                     tuple(allocs), root.annotations, root.loc)
    body = BlockRealize(func.body.bindings, new_root, func.body.predicate, func.body.loc)
    return PrimFunc(func.name, func.params, body, func.loc)


def _reads(expr: Expr, buffer: Buffer) -> bool:
    found: list[bool] = []
    post_order_visit(expr, lambda n: found.append(isinstance(n, BufferLoad)
                                                  and n.buffer is buffer))
    return any(found)


def _calls_intrinsic(block: Block) -> bool:
    found: list[bool] = []
    post_order_visit(block.body, lambda n: found.append(isinstance(n, IntrinsicCall)))
    return any(found)


def _is_true(expr: Expr) -> bool:
    return isinstance(expr, IntImm) and expr.dtype.is_bool and expr.value == 1


def _text(indices: tuple[Expr, ...]) -> str:
    return ", ".join(str(i) for i in indices)

