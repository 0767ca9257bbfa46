"""A sweep's points: every machine of the grid that meets the constraints, times every
workload, each with its key.

The key is a hash of what decides the point's result: the machine (its YAML text, family
included), the workload (a kernel file's text by digest, a layer's sizes), the target and
the tool's version. A rerun skips a key already done, and a changed kernel, machine or
version runs again.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from typing import Any

from tensorize import __version__
from tensorize.sweep.machines import area, machine_text, point_name, quantities, with_fields
from tensorize.sweep.spec import Sweep
from tensorize.sweep.workloads import Workload

KEY_DIGITS = 16


@dataclass(frozen=True)
class Task:
    """What a worker needs for one point (picklable): its key, the machine's YAML text and
    the workload."""

    key: str
    machine_text: str
    workload: Workload


@dataclass(frozen=True)
class Point:
    """One point: its position in the sweep, the varied fields' values, the machine's
    area proxy, and its task."""

    index: int
    fields: dict[str, Any]
    area: dict[str, int]
    task: Task

    @property
    def key(self) -> str:
        """The point's key (its task's)."""
        return self.task.key


@dataclass(frozen=True)
class Expansion:
    """The points of a sweep, and how many machines the constraints left out."""

    points: tuple[Point, ...]
    machines: int
    excluded: int


def expand(sweep: Sweep) -> Expansion:
    """Every (machine, workload) point of ``sweep``, machines in grid order (the last varied
    field fastest), workloads in file order."""
    import yaml

    names = list(sweep.vary)
    extra = yaml.safe_dump(sweep.base_extra, sort_keys=False) if sweep.base_extra and \
        sweep.family == "base" else ""
    points: list[Point] = []
    machines = excluded = 0
    for combination in itertools.product(*sweep.vary.values()):
        fields = dict(zip(names, combination))
        machine = with_fields(sweep.base_machine, fields)
        if "name" not in fields:  # reports and traces name the point's machine
            machine["name"] = point_name(machine["name"], machine, fields)
        values = quantities(machine)
        if not all(_holds(c, values) for c in sweep.constraints):
            excluded += 1
            continue
        machines += 1
        text = machine_text(machine, sweep.family == "generated") + extra
        for workload in sweep.workloads:
            task = Task(point_key(text, workload, sweep.target), text, workload)
            points.append(Point(len(points), fields, area(machine), task))
    return Expansion(tuple(points), machines, excluded)


def _holds(constraint: Any, values: dict[str, float]) -> bool:
    """A constraint dividing by zero on a machine does not hold for it."""
    try:
        return constraint.holds(values)
    except ZeroDivisionError:
        return False


def point_key(machine_text: str, workload: Workload, target: str) -> str:
    """The hash of machine + workload + target + tool version."""
    identity = {"machine": machine_text, "workload": workload.identity(), "target": target,
                "version": __version__}
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_DIGITS]
