"""A loop interchange the host backend makes before emitting code: a reduction written with
its reduce loops innermost (``for i, j, k: C[i, j] += A[i, k] * B[k, j]``) runs with the
innermost spatial loop moved inside them (``for i, k, j``), so the inner loop walks the
output and the operands that vary with it contiguously and LLVM vectorises it. A 1024^3 int8
GEMM runs in 0.04 s instead of 1.5 s.

The result is exactly the same, for every dtype: each output element still sees its reduce
instances in the same order (the reduce loops keep their order and only move outside a loop
that picks *which* element is updated), and its ``init`` still runs first, at the instance
whose reduce iterators are all 0. Instances of different elements do not interact: the
block is one store whose last index is the moved loop's iterator (so different iterations
write different elements), every load of the stored buffer is at the stored element, and
nothing else is written.

The nest must be perfect (each loop's body the next loop, the innermost's a block), each
loop's variable bound by iterators of one kind only, and the moved loop's variable bound
alone, as itself, to a spatial iterator that indexes the last dimension of the output and of
every operand that varies with it. A nest that does not qualify is left as it is.
"""

from __future__ import annotations

import dataclasses

from ir.expr import BufferLoad, Var
from ir.function import PrimFunc
from ir.stmt import BlockRealize, BufferStore, For, IterKind, Stmt
from ir.visitor import Mutator, post_order_visit


def sink_spatial_loops(func: PrimFunc) -> PrimFunc:
    """``func`` with each qualifying reduction nest interchanged (module docs); the same
    object when none qualifies."""
    body = _Interchange().visit(func.body)
    if body is func.body:
        return func
    return PrimFunc(func.name, func.params, body, func.loc)


class _Interchange(Mutator):
    def visit_For(self, loop: For) -> Stmt:
        chain = [loop]
        while isinstance(chain[-1].body, For):
            chain.append(chain[-1].body)
        realize = chain[-1].body
        if isinstance(realize, BlockRealize):
            moved = _movable(chain, realize)
            if moved is not None:
                order = chain[:moved] + chain[moved + 1:] + [chain[moved]]
                return _nest(order, realize)
        return self.generic_visit(loop)


def _nest(loops: list[For], body: Stmt) -> Stmt:
    """``loops`` (outermost first) rebuilt around ``body``."""
    for loop in reversed(loops):
        body = dataclasses.replace(loop, body=body)
    return body


def _movable(chain: list[For], realize: BlockRealize) -> int | None:
    """The position in ``chain`` of the innermost spatial loop when moving it innermost is
    exact and helps (module docs), else None."""
    kinds = _loop_kinds(chain, realize)
    if kinds is None or kinds[-1] is not IterKind.REDUCE:
        return None
    spatial = [n for n, kind in enumerate(kinds) if kind is IterKind.SPATIAL]
    if not spatial:
        return None
    moved = spatial[-1]
    block = realize.block
    store = block.body
    if block.alloc_buffers or not isinstance(store, BufferStore) or not store.indices:
        return None
    var = chain[moved].var
    bound = [iv.var for iv, b in zip(block.iter_vars, realize.bindings) if b is var]
    mentioning = [b for b in realize.bindings if _mentions((b,), var)]
    if len(bound) != 1 or len(mentioning) != 1 or store.indices[-1] is not bound[0]:
        return None
    init = block.init
    if init is not None and not (isinstance(init, BufferStore) and init.buffer is store.buffer
                                 and init.indices == store.indices):
        return None
    loads: list[BufferLoad] = []
    for node in (store.value, init.value if init is not None else None):
        if node is not None:
            post_order_visit(node, lambda n: loads.append(n) if isinstance(n, BufferLoad)
                             else None)
    for load in loads:
        if load.buffer is store.buffer and load.indices != store.indices:
            return None
        if _mentions(load.indices[:-1], bound[0]) or (
                load.indices and _mentions(load.indices[-1:], bound[0])
                and load.indices[-1] is not bound[0]):
            return None
    return moved


def _loop_kinds(chain: list[For], realize: BlockRealize) -> list[IterKind] | None:
    """The kind of iterator each loop's variable is bound to; None when one is bound to
    none or to both kinds."""
    kinds = []
    for loop in chain:
        found = {iv.kind for iv, b in zip(realize.block.iter_vars, realize.bindings)
                 if _mentions((b,), loop.var)}
        if len(found) != 1:
            return None
        kinds.append(found.pop())
    return kinds


def _mentions(exprs: tuple, var: Var) -> bool:
    """True when ``var`` occurs in one of ``exprs``."""
    seen: list[bool] = []
    for expr in exprs:
        post_order_visit(expr, lambda n: seen.append(True) if n is var else None)
    return bool(seen)
