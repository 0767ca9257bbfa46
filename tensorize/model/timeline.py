"""The network's timeline on the NPU as a Chrome trace (Perfetto, chrome://tracing).

A kernel's trace (``tensorize run --trace``) has one slice per executed instruction; a
network runs millions of them, so its timeline keeps what a reader sizing the machine looks
for at that scale: one slice per layer on a ``layers`` track, laid end to end in the order
the layers run (each layer's programs run one after another, as the model executor runs
them), and per unit (load DMA, GEMM array, vector unit, store DMA, DRAM port) the spans in
which the unit had at least one instruction in flight, each named after its layer. The gaps
on a unit's track are the cycles it waited; the ``layers`` track says whose cycles they
were. Layers that ran on the host take no NPU cycles: each is an instant event, with its
reason, on a ``host layers`` track at the point of the network where it ran.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator.trace import UNITS
from tensorize.atomic import write_atomically

# The name of each unit's track.
TRACKS = {"load": "load DMA", "gemm": "GEMM array", "vector": "vector unit",
          "store": "store DMA", "dram": "DRAM port"}


@dataclass(frozen=True)
class LayerTimeline:
    """One layer's NPU time: its cycles, and per unit the ``(n, 2)`` begin/end cycles
    (from the layer's first cycle) of the spans in which the unit was busy."""

    cycles: int
    busy: dict[str, np.ndarray]


def layer_timeline(sims: Sequence[Any]) -> LayerTimeline:
    """The timeline of a layer whose NPU programs' simulations are ``sims``
    (:class:`simulator.SimResult`, in the order they ran, one after another)."""
    spans: dict[str, list[np.ndarray]] = {unit: [] for unit in UNITS}
    start = 0
    for sim in sims:
        table = sim.records.table()
        for index, unit in enumerate(UNITS):
            rows = table[table[:, 0] == index]
            spans[unit].append(_union(rows[:, 1:3]) + start)
        start += sim.cycles
    return LayerTimeline(start, {unit: np.concatenate(parts) if parts else _EMPTY
                                 for unit, parts in spans.items()})


def part_timeline(table: np.ndarray, numbers: tuple[int, int], start: int, end: int
                  ) -> LayerTimeline:
    """The timeline of one layer of a linked program (:mod:`targets.npu.link`) whose
    simulation's records are ``table`` (:meth:`simulator.trace.Records.table`): the layer's
    instructions are those numbered ``[numbers[0], numbers[1])``, its cycles those from
    ``start`` to ``end`` of the program. A span that began before ``start`` (the layer's
    loads while the layer before drained) keeps its place: it begins before the layer."""
    mine = table[(table[:, 3] >= numbers[0]) & (table[:, 3] < numbers[1])]
    busy = {unit: _union(mine[mine[:, 0] == index][:, 1:3]) - start
            for index, unit in enumerate(UNITS)}
    return LayerTimeline(end - start, busy)


_EMPTY = np.zeros((0, 2), dtype=np.int64)


def _union(intervals: np.ndarray) -> np.ndarray:
    """The ``[begin, end)`` intervals merged where they overlap or touch, in order."""
    if not len(intervals):
        return _EMPTY
    intervals = intervals[np.argsort(intervals[:, 0], kind="stable")]
    begins, ends = intervals[:, 0], np.maximum.accumulate(intervals[:, 1])
    # A span starts where an interval begins after every earlier one has ended.
    starts = np.flatnonzero(np.r_[True, begins[1:] > ends[:-1]])
    return np.stack([begins[starts], np.r_[ends[starts[1:] - 1], ends[-1]]], axis=1)


def network_trace(records: Iterable[dict[str, Any]],
                  timelines: Iterable[LayerTimeline | None], machine: str, model: str,
                  clock_mhz: float) -> dict[str, Any]:
    """The trace as a JSON-ready dict: ``records`` are the model run's layer records (the
    report's schema), ``timelines`` the layers' timelines (None for a layer that ran on
    the host); times in microseconds at the machine's clock."""
    tracks = ["layers", "host layers", *(f"{TRACKS[unit]} busy" for unit in UNITS)]
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 0,
         "args": {"name": f"{model} on NPU {machine}"}}]
    for tid, name in enumerate(tracks):
        events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid,
                       "args": {"name": name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": tid,
                       "args": {"sort_index": tid}})
    now = 0
    for record, timeline in zip(records, timelines):
        if timeline is None:
            events.append({"ph": "i", "s": "t", "pid": 0, "tid": 1, "name": record["name"],
                           "ts": now / clock_mhz, "args": _host_args(record)})
            continue
        events.append({"ph": "X", "pid": 0, "tid": 0, "name": record["name"],
                       "cat": "layer", "ts": now / clock_mhz,
                       "dur": timeline.cycles / clock_mhz, "args": _layer_args(record)})
        for index, unit in enumerate(UNITS):
            for begin, end in timeline.busy[unit].tolist():
                events.append({"ph": "X", "pid": 0, "tid": 2 + index, "name": record["name"],
                               "cat": unit, "ts": (now + begin) / clock_mhz,
                               "dur": (end - begin) / clock_mhz})
        now += timeline.cycles
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"model": model, "machine": machine, "clock_mhz": clock_mhz,
                          "cycles": now}}


def _layer_args(record: dict[str, Any]) -> dict[str, Any]:
    keys = ("index", "op", "shape", "intrinsic", "cycles", "macs", "utilisation",
            "dram_bytes", "bound")
    return {key: record[key] for key in keys if record.get(key) is not None}


def _host_args(record: dict[str, Any]) -> dict[str, Any]:
    return {"index": record["index"], "op": record["op"], "placement": record["placement"],
            "why": record["why_not"]}


def write_network_trace(path: Path, records: Iterable[dict[str, Any]],
                        timelines: Iterable[LayerTimeline | None], machine: str, model: str,
                        clock_mhz: float) -> None:
    """Write :func:`network_trace` to ``path`` as JSON (atomically: a reader never sees
    half a trace)."""
    trace = network_trace(records, timelines, machine, model, clock_mhz)

    def write(tmp: Path) -> None:
        with open(tmp, "w") as out:
            json.dump(trace, out)

    write_atomically(path, write)
