"""Chrome trace JSON (``{"traceEvents": [...]}``), which Perfetto and chrome://tracing open.

One track per unit: an "X" (complete) event per instruction, from the cycle its unit began
it to the cycle it finished, with times in microseconds at the machine's clock.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from simulator.assembler import format_instruction
from simulator.isa import Instruction

UNITS = ("load", "gemm", "vector", "store", "dram")

# One record per event: (unit index into UNITS, begin cycle, end cycle, instruction index).
Record = tuple[int, int, int, int]


def chrome_trace(records: Sequence[Record], program: Sequence[Instruction], clock_mhz: float,
                 machine: str) -> dict[str, object]:
    """The trace as a JSON-ready dict."""
    events: list[dict[str, object]] = [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": f"NPU {machine}"}}]
    for tid, name in enumerate(UNITS):
        events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid,
                       "args": {"name": name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": tid,
                       "args": {"sort_index": tid}})
    for unit, begin, end, index in records:
        insn = program[index]
        events.append({
            "ph": "X", "pid": 0, "tid": unit, "name": type(insn).__name__.lower(),
            "cat": UNITS[unit], "ts": begin / clock_mhz, "dur": (end - begin) / clock_mhz,
            "args": {"index": index, "cycles": [begin, end], "insn": format_instruction(insn)},
        })
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_chrome_trace(path: str | os.PathLike[str], records: Sequence[Record],
                       program: Sequence[Instruction], clock_mhz: float, machine: str) -> None:
    """Write the trace to ``path``."""
    with open(path, "w") as out:
        json.dump(chrome_trace(records, program, clock_mhz, machine), out)
