"""Precondition checks shared by the schedule primitives."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

from ir import PrimFunc, ScheduleError
from tensorize.schedule import tree
from tensorize.schedule.handles import BlockRV, LoopRV
from tensorize.schedule.tree import Located


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
