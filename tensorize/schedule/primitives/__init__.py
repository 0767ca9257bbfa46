"""The schedule primitives, each a function ``f(func, *args) -> (new_func, handles)``.

Each is listed here by name; :class:`~tensorize.schedule.Schedule` declares a method of the
same name for each (so type checkers and editors see ``sch.split``), and :data:`PRIMITIVES`
maps the names to the functions. Adding a primitive is writing its function in a module of
this package, importing it here and declaring it on the Schedule.
"""

from collections.abc import Callable
from typing import Any

from tensorize.schedule.primitives.blockize import blockize
from tensorize.schedule.primitives.cache import cache_read, cache_write
from tensorize.schedule.primitives.compact import compact_buffer
from tensorize.schedule.primitives.compute_at import compute_at, reverse_compute_at
from tensorize.schedule.primitives.diagonalize import diagonalize
from tensorize.schedule.primitives.fold_init import fold_init
from tensorize.schedule.primitives.inline import compute_inline, inline_update, write_in_place
from tensorize.schedule.primitives.layout import (reindex, transform_block_layout,
                                                  transform_layout)
from tensorize.schedule.primitives.loop_kinds import bind, parallel, unroll, vectorize
from tensorize.schedule.primitives.loops import fuse, reorder, split
from tensorize.schedule.primitives.padding import pad_einsum
from tensorize.schedule.primitives.partition import partition
from tensorize.schedule.primitives.reduction import decompose_reduction
from tensorize.schedule.primitives.shift import shift_operand
from tensorize.schedule.primitives.split_reduction import split_reduction
from tensorize.schedule.primitives.tensorize_call import tensorize

PRIMITIVES: dict[str, Callable[..., Any]] = {f.__name__: f for f in (
    bind, blockize, cache_read, cache_write, compact_buffer, compute_at, compute_inline,
    decompose_reduction, diagonalize, fold_init, fuse, inline_update, pad_einsum, parallel,
    partition,
    reindex, reorder,
    reverse_compute_at, shift_operand, split, split_reduction, tensorize, transform_block_layout,
    transform_layout, unroll, vectorize, write_in_place)}

__all__ = ["PRIMITIVES"]
