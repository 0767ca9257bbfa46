"""Chrome trace JSON (``{"traceEvents": [...]}``), which Perfetto and chrome://tracing open.

An "X" (complete) event per executed instruction (a loop's body instructions once per
iteration, each with its iteration), from the cycle its unit began it to the cycle it
finished, with times in microseconds at the machine's clock. A unit runs several of its
instructions at once (a DMA engine keeps up to ``dma.max_outstanding`` requests in flight;
the array pipelines GEMMs), and slices that overlap on one track are dropped or mis-drawn by
the viewers, which want the slices of a track nested or disjoint. So each unit gets one
track per concurrent resource ("load DMA #0", "load DMA #1", ...): a slice goes on the first
of its unit's tracks that is free when it begins, and a unit has as many tracks as it ever
has instructions in flight.
"""

from __future__ import annotations

import json
import os
from array import array
from collections.abc import Iterator, Sequence

import numpy as np

from simulator.assembler import format_instruction
from simulator.isa import Instruction
from simulator.loops import expand

UNITS = ("load", "gemm", "vector", "store", "dram")
# What one track of each unit stands for: one in-flight request of a DMA engine, one GEMM or
# vector instruction in the unit's pipeline, one transfer on the shared DRAM port.
LANE_NAMES = {"load": "load DMA", "gemm": "gemm pipeline", "vector": "vector pipeline",
              "store": "store DMA", "dram": "dram port"}

# One record per event: (unit index into UNITS, begin cycle, end cycle, instruction number).
# Instructions are numbered in the order they execute: in a program without loops, the number
# is the instruction's index in the program.
Record = tuple[int, int, int, int]


class Records(Sequence[Record]):
    """A run's records, four machine integers each: a long run keeps millions of them."""

    def __init__(self) -> None:
        self._data = array("q")
        # Append one record, given as (unit, begin, end, number).
        self.add = self._data.extend

    def __len__(self) -> int:
        return len(self._data) // 4

    def __getitem__(self, n):  # type: ignore[no-untyped-def]
        if isinstance(n, slice):
            return [self[k] for k in range(*n.indices(len(self)))]
        if n < 0:
            n += len(self)
        if not 0 <= n < len(self):
            raise IndexError(n)
        return tuple(self._data[4 * n:4 * n + 4])

    def __iter__(self) -> Iterator[Record]:
        data = self._data
        for n in range(0, len(data), 4):
            yield (data[n], data[n + 1], data[n + 2], data[n + 3])

    def rows(self, first: int, last: int) -> np.ndarray:
        """Records [first, last) as an ``(n, 4)`` int64 array (a copy)."""
        values = np.frombuffer(self._data, dtype=np.int64)[4 * first:4 * last]
        return values.reshape(-1, 4).copy()

    def repeat(self, first: int, last: int, copies: int, cycles: int, numbers: int) -> None:
        """Append records [first, last) ``copies`` times more, copy j (1-based) with its
        begin and end ``j * cycles`` later and its instruction numbers ``j * numbers``
        on (a loop's periods, :mod:`simulator.steady`)."""
        block = self.rows(first, last)
        later = np.arange(1, copies + 1, dtype=np.int64)[:, None, None] * \
            np.array([0, cycles, cycles, numbers], dtype=np.int64)
        self._data.frombytes((block[None] + later).tobytes())

    def table(self) -> np.ndarray:
        """The records as an ``(n, 4)`` int64 array (a copy): unit, begin, end, number."""
        return np.frombuffer(self._data, dtype=np.int64).reshape(-1, 4).copy()


def assign_lanes(records: Sequence[Record]) -> list[int]:
    """The lane (0, 1, ...) of each record within its unit: the first lane whose previous
    slice has ended when the record begins, so the slices of one lane are disjoint.

    Records are placed in order of their begin cycle (ties in record order); the lanes a unit
    gets are as many as it ever has records in flight at once.
    """
    lanes = [0] * len(records)
    free_at: dict[int, list[int]] = {}  # unit -> the cycle each of its lanes is free from
    order = sorted(range(len(records)), key=lambda n: records[n][1])
    for n in order:
        unit, begin, end, _ = records[n]
        ends = free_at.setdefault(unit, [])
        lane = next((k for k, free in enumerate(ends) if free <= begin), len(ends))
        if lane == len(ends):
            ends.append(end)
        else:
            ends[lane] = end
        lanes[n] = lane
    return lanes


def chrome_trace(records: Sequence[Record], program: Sequence[Instruction], clock_mhz: float,
                 machine: str) -> dict[str, object]:
    """The trace as a JSON-ready dict: process and thread names (one thread per lane, in
    unit order; at least one per unit), then one complete event per record: ``args`` holds
    the instruction's index in the program, its cycles, its assembly (with this iteration's
    addresses) and, inside loops, its ``iteration`` (one index per loop, outermost first)."""
    lanes = assign_lanes(records)
    counts = [1] * len(UNITS)  # an idle unit keeps one (empty) track
    for (unit, *_), lane in zip(records, lanes):
        counts[unit] = max(counts[unit], lane + 1)
    first_tid = [sum(counts[:unit]) for unit in range(len(UNITS))]
    events: list[dict[str, object]] = [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": f"NPU {machine}"}}]
    for unit, name in enumerate(UNITS):
        for lane in range(counts[unit]):
            tid = first_tid[unit] + lane
            events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid,
                           "args": {"name": f"{LANE_NAMES[name]} #{lane}"}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": tid,
                           "args": {"sort_index": tid}})
    executed = list(expand(program))
    for (unit, begin, end, number), lane in zip(records, lanes):
        node, iteration = executed[number]
        insn = node.instruction_at(iteration)
        args: dict[str, object] = {"index": node.index, "cycles": [begin, end],
                                   "insn": format_instruction(insn)}
        if iteration:
            args["iteration"] = list(iteration)
        events.append({
            "ph": "X", "pid": 0, "tid": first_tid[unit] + lane,
            "name": type(insn).__name__.lower(), "cat": UNITS[unit],
            "ts": begin / clock_mhz, "dur": (end - begin) / clock_mhz, "args": args,
        })
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_chrome_trace(path: str | os.PathLike[str], records: Sequence[Record],
                       program: Sequence[Instruction], clock_mhz: float, machine: str) -> None:
    """Write the trace to ``path``."""
    with open(path, "w") as out:
        json.dump(chrome_trace(records, program, clock_mhz, machine), out)
