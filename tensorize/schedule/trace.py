"""The record of the primitives a schedule applied, printable as Python that replays them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from intrinsics import Intrinsic, Scope
from tensorize.schedule.handles import BlockRV, LoopRV


# The schedule's lookups: they change nothing, so the printed trace runs one only when it
# returns a handle no earlier line bound (a block handle is its name; a loop handle its loop
# variable, which primitives keep).
LOOKUPS = frozenset({"get_block", "get_loops", "get_child_blocks"})


@dataclass(frozen=True, slots=True)
class TraceStep:
    """One applied primitive: its name, its arguments and the handles it returned."""

    primitive: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    outputs: Any


class Trace:
    """The steps of a schedule, in order. ``str(trace)`` is replayable Python."""

    def __init__(self) -> None:
        self.steps: list[TraceStep] = []

    def append(self, step: TraceStep) -> None:
        """Record one applied primitive."""
        self.steps.append(step)

    def __len__(self) -> int:
        return len(self.steps)

    def as_python(self, schedule_name: str = "sch") -> str:
        """Python statements that replay the trace on ``sch = Schedule(func, registry=...)``.

        Each handle is bound to one variable (``b0``, ``l3``) where it first appears; a
        lookup whose handles are all bound already is left out.
        """
        names: dict[Any, str] = {}
        counters = {"b": 0, "l": 0}
        lines: list[str] = []

        def name_of(handle: Any) -> str:
            if handle in names:
                return names[handle]
            prefix = "b" if isinstance(handle, BlockRV) else "l"
            label = f"{prefix}{counters[prefix]}"
            counters[prefix] += 1
            names[handle] = label
            return label

        def render(value: Any) -> str:
            if isinstance(value, (Intrinsic, Scope)):
                return repr(value.name)  # primitives take intrinsics and scopes by name
            if isinstance(value, (BlockRV, LoopRV)):
                if value not in names and isinstance(value, BlockRV):
                    return repr(value.name)
                return names.get(value) or repr(value)
            if isinstance(value, (list, tuple)):
                inner = ", ".join(render(v) for v in value)
                return f"[{inner}]"
            return repr(value)

        for step in self.steps:
            if step.primitive in LOOKUPS and all(h in names for h in _handles(step.outputs)):
                continue  # every handle it returns is already bound to a variable
            call_args = [render(a) for a in step.args]
            call_args += [f"{k}={render(v)}" for k, v in step.kwargs]
            call = f"{schedule_name}.{step.primitive}({', '.join(call_args)})"
            outputs = step.outputs
            if outputs is None:
                lines.append(call)
            elif isinstance(outputs, (list, tuple)):
                targets = [name_of(h) for h in outputs]
                if not targets:
                    lines.append(call)
                elif len(targets) == 1:
                    lines.append(f"{targets[0]}, = {call}")
                else:
                    lines.append(f"{', '.join(targets)} = {call}")
            else:
                lines.append(f"{name_of(outputs)} = {call}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.as_python()


def _handles(outputs: Any) -> list[Any]:
    """The handles a step returned, as a list (None: none)."""
    if outputs is None:
        return []
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
