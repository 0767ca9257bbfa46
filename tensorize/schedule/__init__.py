"""Schedule primitives: loop-nest transformations that provably preserve the program.

Use :class:`Schedule` with block and loop handles, or the free functions in
:mod:`tensorize.schedule.primitives` on function values.
"""

from tensorize.schedule.handles import BlockRV, LoopRV
from tensorize.schedule.index_map import IndexMap
from tensorize.schedule.schedule import Schedule
from tensorize.schedule.trace import Trace

__all__ = ["BlockRV", "IndexMap", "LoopRV", "Schedule", "Trace"]
