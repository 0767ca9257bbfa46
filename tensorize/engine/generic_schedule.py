"""The schedule for targets without a dedicated one: tile the block to the intrinsic's
extents and tensorize, leaving operands where they are.

The block arrives in the intrinsic's shape (``gemm_view``): iterators ``(outer..., one per
intrinsic iterator)`` padded to the intrinsic's extents. Each intrinsic iterator's loop is
split by its extent, the outer parts go outside in order, and the tile becomes one call.
Staging into the target's registers or fragments is the target backend's part, not this
schedule's: the tensorized IR runs on the host with each call lowered to its semantics.
"""

from __future__ import annotations

from intrinsics import Intrinsic
from tensorize.schedule import Schedule


def schedule_generic(sch: Schedule, block_name: str, intrinsic: Intrinsic) -> None:
    """Tile block ``block_name`` to ``intrinsic``'s extents and tensorize it."""
    block = sch.get_block(block_name)
    count = len(intrinsic.iter_vars)
    loops = sch.get_loops(block)[-count:]
    outer_parts, inner_parts = [], []
    for loop, iv in zip(loops, intrinsic.iter_vars):
        if sch.get(loop).extent == iv.extent:
            inner_parts.append(loop)
            continue
        outer, inner = sch.split(loop, [None, iv.extent])
        outer_parts.append(outer)
        inner_parts.append(inner)
    if outer_parts:
        sch.reorder(*outer_parts, *inner_parts)
    sch.tensorize(inner_parts[0], intrinsic)
