"""Precondition checks shared by the schedule primitives."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from ir import IntImm, PrimFunc, ScheduleError
from tensorize.schedule import tree
from tensorize.schedule.handles import BlockRV, LoopRV
from tensorize.schedule.tree import Located

if TYPE_CHECKING:
    from tensorize.schedule.sites import Site


def check(cond: bool, primitive: str, reason: str, *nodes: object) -> None:
    """Raise ScheduleError(primitive, reason) unless ``cond`` holds: one reason per check."""
    if not cond:
        raise ScheduleError(primitive, reason, tuple(nodes))


def fail(primitive: str, reason: str, *nodes: object) -> NoReturn:
    """Raise ScheduleError(primitive, reason)."""
    raise ScheduleError(primitive, reason, tuple(nodes))


def arg_check(cond: bool, primitive: str, argument: str, expected: str, got: Any) -> None:
    """Validate an argument at the boundary: "split: argument 'factors': expected ..., got ..."."""
    if not cond:
        raise ScheduleError(primitive, f"argument '{argument}': expected {expected}, got {got!r}")


def get_loop(func: PrimFunc, loop: LoopRV, primitive: str) -> Located:
    """The loop a handle names, or a ScheduleError saying it is gone."""
    arg_check(isinstance(loop, LoopRV), primitive, "loop", "a loop handle (LoopRV)", loop)
    found = tree.find_loop(func, loop.var)
    check(found is not None, primitive,
          f"loop {loop.var.name} is no longer in the function (a primitive replaced it)")
    return found  # type: ignore[return-value]


def get_block(func: PrimFunc, block: BlockRV, primitive: str) -> Located:
    """The block a handle names, or a ScheduleError listing the blocks there are."""
    arg_check(isinstance(block, BlockRV), primitive, "block", "a block handle (BlockRV)", block)
    found = tree.find_block(func, block.name)
    if found is None:
        names = ", ".join(tree.block_names(func)) or "none"
        fail(primitive, f"no block named {block.name!r}; blocks: {names}")
    return found


def distinct_loops(loops: Sequence[LoopRV], primitive: str) -> None:
    """Refuse a loop named twice."""
    seen: set[int] = set()
    for loop in loops:
        arg_check(isinstance(loop, LoopRV), primitive, "loops", "loop handles", loop)
        check(id(loop.var) not in seen, primitive, f"loop {loop.var.name} is given twice")
        seen.add(id(loop.var))


def check_root_nest(func: PrimFunc, site: Site, primitive: str) -> None:
    """Refuse a block that does not sit in the root block in a perfect loop nest binding
    iterator n to loop n, with no predicate and no buffers of its own: the shape the
    primitives that rebuild a block's whole nest (diagonalize, split_reduction) rewrite."""
    check(site.scope is func.body, primitive,
          f"block {site.name!r} requires to sit in the root block, got block "
          f"{site.scope.block.name!r} around it", site.realize)
    loops = site.loops
    check(len(loops) == len(site.block.iter_vars) and all(
        b is loop.var for b, loop in zip(site.realize.bindings, loops)), primitive,
        f"block {site.name!r} requires each iterator bound to one loop of its own, in order; "
        "got other bindings", site.realize)
    check(all(outer.body is inner for outer, inner in zip(loops, loops[1:] + (site.realize,))),
          primitive, f"block {site.name!r} requires a perfect loop nest, got statements "
                     "beside it", site.realize)
    check(isinstance(site.realize.predicate, IntImm) and site.realize.predicate.value == 1,
          primitive, f"block {site.name!r} requires no predicate, got "
                     f"{site.realize.predicate}", site.realize)
    check(not site.block.alloc_buffers, primitive,
          f"block {site.name!r} requires no buffers of its own, got "
          f"{', '.join(b.name for b in site.block.alloc_buffers)}", site.realize)
