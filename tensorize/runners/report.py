"""What a run reports: its steps, each passed, failed or skipped with what it found, in the
order they finished, and the figures it measured (``data``, the JSON report's fields).

A runner adds steps as it takes them; the edge that made the run decides how to show them
(the CLI prints each line as it arrives through ``listener``, or prints nothing and writes
the JSON at the end). A step that could not be taken here says ``skip`` and why; a skip
that leaves the run unproven (code emitted but never run) fails the run.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "FAIL", "skip"]


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a run: ``name`` (tensorize, validate, simulate, run, check ...),
    ``status``, ``detail`` (what it found, or why it was skipped), and whether it counts as
    passed (``ok``: a skip passes unless it leaves the run unproven)."""

    name: str
    status: Status
    detail: str
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        """The step as the JSON report writes it."""
        out: dict[str, Any] = {"step": self.name, "ok": self.ok, "detail": self.detail}
        if self.status == "skip":
            out["skipped"] = True
        return out


@dataclass(frozen=True, slots=True)
class Note:
    """A line that is not a step: an explanation (``--explain``) or a table's row block."""

    kind: Literal["explain", "table"]
    text: str


def _no_phase(what: str) -> AbstractContextManager[object]:
    return nullcontext()


@dataclass
class RunReport:
    """The steps of one run and its figures. ``listener`` sees each step and note as it is
    added (None: nobody watches); ``phase`` wraps a long step's silent work, named, in a
    context manager (the CLI's progress lines, :mod:`tensorize.cli.progress`)."""

    listener: Callable[[Step | Note], None] | None = None
    steps: list[Step] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    phase: Callable[[str], AbstractContextManager[object]] = field(default=_no_phase,
                                                                   repr=False)

    def step(self, name: str, ok: bool, detail: str) -> bool:
        """A step taken: passed or failed, and what it found; returns ``ok``."""
        self._add(Step(name, "ok" if ok else "FAIL", detail, ok))
        return ok

    def skip(self, name: str, reason: str, fails: bool = False) -> None:
        """A step this machine cannot take (a missing compiler or device), and why;
        ``fails``: the run cannot pass without it (code emitted but never run)."""
        self._add(Step(name, "skip", reason, not fails))

    def note(self, kind: Literal["explain", "table"], text: str) -> None:
        """A line beside the steps (an explanation, a table)."""
        if self.listener is not None:
            self.listener(Note(kind, text))

    def _add(self, step: Step) -> None:
        self.steps.append(step)
        if self.listener is not None:
            self.listener(step)

    @property
    def ok(self) -> bool:
        """True when no step failed."""
        return all(s.ok for s in self.steps)

    def to_dict(self, errors: list[str] | None = None) -> dict[str, Any]:
        """The JSON report: the figures, every step, ``ok``, and the errors that ended the
        run (if any)."""
        out = dict(self.data)
        out["steps"] = [s.to_dict() for s in self.steps]
        out["ok"] = self.ok and not errors
        if errors:
            out["error"] = "; ".join(errors)
        return out
