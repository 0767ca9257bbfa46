"""The Schedule: a function being rewritten by primitives, with handles and a trace."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

from intrinsics import Registry
from ir import BlockRealize, For, PrimFunc, Stmt
from tensorize.schedule import primitives as p
from tensorize.schedule import tree
from tensorize.schedule.check import check, fail, get_block, get_loop
from tensorize.schedule.handles import BlockRV, LoopRV
from tensorize.schedule.index_map import as_index_map
from tensorize.schedule.trace import Trace, TraceStep


Args = ParamSpec("Args")
Out = TypeVar("Out")


def _as_method(primitive: Callable[Concatenate[PrimFunc, Args], tuple[PrimFunc, Out]]
               ) -> Callable[Concatenate[Schedule, Args], Out]:
    """Wrap a free primitive ``f(func, *args) -> (new_func, outputs)`` as a Schedule method
    taking the same arguments and returning the outputs. A primitive that takes intrinsics
    or scopes by name (it has a ``registry`` parameter) is given the schedule's registry."""
    named = "registry" in inspect.signature(primitive).parameters

    def method(self: Schedule, *args: Args.args, **kwargs: Args.kwargs) -> Out:
        return self._apply(primitive, args, kwargs, named)

    method.__name__ = primitive.__name__
    method.__qualname__ = f"Schedule.{primitive.__name__}"
    method.__doc__ = primitive.__doc__
    return method


def _printable(value: Any, primitive: str) -> Any:
    if isinstance(value, types.FunctionType):
        return as_index_map(value, primitive)
    return value


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A schedule's state at one moment (:meth:`Schedule.snapshot`): its function and the
    number of trace steps applied."""

    func: PrimFunc
    steps: int


class Schedule:
    """A function under transformation.

    Every primitive checks its preconditions first; a refused primitive raises
    ``ScheduleError`` and leaves the schedule exactly as it was. ``sch.func`` is the current
    function; ``sch.trace`` prints as Python that replays the primitives applied.

    ``registry`` resolves the intrinsics and memory scopes that primitives are given by
    name (``sch.tensorize(loop, "npu_gemm")``); the trace records them by name, so it
    replays with the same registry (:meth:`replay`). Without one, primitives take
    intrinsics and scopes as values only (and the base scopes ``global``, ``shared``,
    ``local`` by name).
    """

    # The primitives (tensorize.schedule.primitives), one method each.
    bind = _as_method(p.bind)
    blockize = _as_method(p.blockize)
    cache_read = _as_method(p.cache_read)
    cache_write = _as_method(p.cache_write)
    compact_buffer = _as_method(p.compact_buffer)
    compute_at = _as_method(p.compute_at)
    compute_inline = _as_method(p.compute_inline)
    decompose_reduction = _as_method(p.decompose_reduction)
    diagonalize = _as_method(p.diagonalize)
    fold_init = _as_method(p.fold_init)
    fuse = _as_method(p.fuse)
    inline_update = _as_method(p.inline_update)
    pad_einsum = _as_method(p.pad_einsum)
    parallel = _as_method(p.parallel)
    partition = _as_method(p.partition)
    reindex = _as_method(p.reindex)
    reorder = _as_method(p.reorder)
    reverse_compute_at = _as_method(p.reverse_compute_at)
    shift_operand = _as_method(p.shift_operand)
    split = _as_method(p.split)
    split_reduction = _as_method(p.split_reduction)
    tensorize = _as_method(p.tensorize)
    transform_block_layout = _as_method(p.transform_block_layout)
    transform_layout = _as_method(p.transform_layout)
    unroll = _as_method(p.unroll)
    vectorize = _as_method(p.vectorize)
    write_in_place = _as_method(p.write_in_place)

    def __init__(self, func: PrimFunc, registry: Registry | None = None) -> None:
        names = tree.block_names(func)
        for name in names:
            if names.count(name) > 1:
                fail("Schedule", f"block name {name!r} is used twice; block names must be "
                                 "unique to be scheduled")
        self.original = func
        self.func = func
        self.registry = registry
        self.trace = Trace()

    def _apply(self, primitive: Callable[..., tuple[PrimFunc, Any]], args: tuple[Any, ...],
               kwargs: dict[str, Any], named: bool) -> Any:
        # A lambda (an index map) is recorded as the IndexMap it builds, so the trace prints
        # its text and replays.
        args = tuple(_printable(a, primitive.__name__) for a in args)
        kwargs = {k: _printable(v, primitive.__name__) for k, v in kwargs.items()}
        # Names resolve in the schedule's registry alone: one passed per call would not be
        # in the printed trace, which would then replay differently.
        check("registry" not in kwargs, primitive.__name__,
              "a Schedule resolves names in the registry it was made with; pass it as "
              "Schedule(func, registry=...), not to the primitive")
        extra = {"registry": self.registry} if named else {}
        new_func, outputs = primitive(self.func, *args, **kwargs, **extra)
        self.func = new_func
        self.trace.append(TraceStep(primitive.__name__, args, tuple(kwargs.items()), outputs))
        return outputs

    def snapshot(self) -> Snapshot:
        """The state to come back to with :meth:`restore` (an attempt that may be undone)."""
        return Snapshot(self.func, len(self.trace.steps))

    def restore(self, snapshot: Snapshot) -> None:
        """Undo every primitive applied since ``snapshot`` was taken."""
        self.func = snapshot.func
        del self.trace.steps[snapshot.steps:]

    # Lookups are recorded too, so the printed trace binds every handle it uses.
    def get_block(self, name: str) -> BlockRV:
        """The handle of the block called ``name``."""
        handle = BlockRV(name)
        get_block(self.func, handle, "get_block")
        self.trace.append(TraceStep("get_block", (name,), (), handle))
        return handle

    def get_loops(self, block: BlockRV) -> list[LoopRV]:
        """The loops around ``block`` up to its enclosing block, outermost first."""
        found = get_block(self.func, block, "get_loops")
        loops = [LoopRV(loop.var) for loop in tree.enclosing_loops(found.path)]
        self.trace.append(TraceStep("get_loops", (block,), (), loops))
        return loops

    def get_child_blocks(self, parent: BlockRV | LoopRV) -> list[BlockRV]:
        """The blocks directly under a block or a loop, in program order."""
        if isinstance(parent, LoopRV):
            stmt: Stmt = get_loop(self.func, parent, "get_child_blocks").node
        else:
            stmt = get_block(self.func, parent, "get_child_blocks").node
        children = [BlockRV(r.block.name) for r in tree.child_block_realizes(stmt)]
        self.trace.append(TraceStep("get_child_blocks", (parent,), (), children))
        return children

    def get(self, handle: BlockRV | LoopRV) -> BlockRealize | For:
        """The IR node a handle names now."""
        if isinstance(handle, LoopRV):
            return get_loop(self.func, handle, "get").node
        check(isinstance(handle, BlockRV), "get", f"expected a handle, got {handle!r}")
        return get_block(self.func, handle, "get").node

    def replay_trace(self) -> str:
        """A complete Python program that rebuilds this schedule from the original function
        (``func``) and the registry it was made with (``registry``)."""
        return ("from tensorize.schedule import IndexMap, Schedule\n"
                "sch = Schedule(func, registry=registry)\n" + self.trace.as_python() + "\n")

    @staticmethod
    def replay(func: PrimFunc, trace_text: str, registry: Registry | None = None) -> Schedule:
        """Run the Python of a printed trace on ``func``, names of intrinsics and scopes
        resolved in ``registry`` (the one the traced schedule was made with); returns the
        resulting schedule."""
        namespace: dict[str, Any] = {"func": func, "registry": registry}
        exec(compile(trace_text, "<trace>", "exec"), namespace)  # noqa: S102 (user's own trace)
        return namespace["sch"]

