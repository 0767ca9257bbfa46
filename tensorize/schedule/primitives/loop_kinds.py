"""Primitives that change how a loop runs: parallel, vectorize, unroll, bind."""

from __future__ import annotations

from ir import For, ForKind, IterKind, PrimFunc, post_order_visit
from ir.stmt import THREAD_TAGS
from tensorize.schedule import tree
from tensorize.schedule.check import arg_check, check, get_loop
from tensorize.schedule.handles import LoopRV

__all__ = ["bind", "parallel", "unroll", "vectorize"]


def _reduce_iterators_bound_to(loop: For) -> list[str]:
    """Names ("block.iterator") of reduce iterators whose binding uses the loop's variable."""
    found: list[str] = []
    for realize in tree.child_block_realizes(loop):
        for iv, binding in zip(realize.block.iter_vars, realize.bindings):
            if iv.kind is not IterKind.REDUCE:
                continue
            uses: list[bool] = []
            post_order_visit(binding, lambda n: uses.append(n is loop.var))
            if any(uses):
                found.append(f"{realize.block.name}.{iv.var.name}")
    return found


def _set_kind(func: PrimFunc, loop: LoopRV, kind: ForKind, primitive: str,
              thread: str | None = None, allow_reduce: bool = False) -> tuple[PrimFunc, None]:
    found = get_loop(func, loop, primitive)
    node: For = found.node
    check(node.kind in (ForKind.SERIAL, kind), primitive,
          f"loop {node.var.name} is already {node.kind.value}", node)
    if not allow_reduce:
        carried = _reduce_iterators_bound_to(node)
        check(not carried, primitive,
              f"loop {node.var.name} carries the reduction of {', '.join(carried)}; its "
              "iterations depend on each other", node)
    new = For(node.var, node.extent, node.body, kind, thread, node.loc)
    return tree.replace_stmt(func, node, new), None


def parallel(func: PrimFunc, loop: LoopRV) -> tuple[PrimFunc, None]:
    """Mark a loop to run its iterations in parallel.

    Precondition: no reduce iterator of a block under the loop is bound to it.
    """
    return _set_kind(func, loop, ForKind.PARALLEL, "parallel")


def vectorize(func: PrimFunc, loop: LoopRV) -> tuple[PrimFunc, None]:
    """Mark a loop to run as vector lanes.

    Precondition: no reduce iterator of a block under the loop is bound to it.
    """
    return _set_kind(func, loop, ForKind.VECTORIZED, "vectorize")


def unroll(func: PrimFunc, loop: LoopRV) -> tuple[PrimFunc, None]:
    """Mark a loop to be unrolled (any loop may be)."""
    return _set_kind(func, loop, ForKind.UNROLLED, "unroll", allow_reduce=True)


def bind(func: PrimFunc, loop: LoopRV, thread: str) -> tuple[PrimFunc, None]:
    """Bind a loop to a GPU thread axis (``blockIdx.x`` ... ``threadIdx.z``).

    Preconditions: the tag is known; no reduce iterator is bound to the loop; no enclosing
    loop is bound to the same tag.
    """
    arg_check(thread in THREAD_TAGS, "bind", "thread", f"one of {', '.join(THREAD_TAGS)}",
              thread)
    found = get_loop(func, loop, "bind")
    for outer in found.path:
        check(not (isinstance(outer, For) and outer.thread == thread), "bind",
              f"loop {outer.var.name if isinstance(outer, For) else ''} around it is already "
              f"bound to {thread}", outer)
    return _set_kind(func, loop, ForKind.THREAD_BINDING, "bind", thread=thread)
