"""The machine a report's figures were measured on, named with the parameters that decide
them: for an NPU the array (rows x cols), dataflow, clock, the on-chip memories' bytes and the
DRAM port's bytes per cycle; for a CPU target its name and features.

Data first (:func:`npu_machine`, :func:`cpu_machine`: plain dicts a JSON report holds as
they are), then one line of text (:func:`machine_line`) that a table header, a CSV comment and
an HTML page show alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulator import MachineConfig
from simulator.config import ELEMENT_BYTES, memory_bytes


def npu_machine(config: MachineConfig) -> dict[str, Any]:
    """The NPU ``config`` as report data: name, array rows and cols, dataflow, clock (MHz),
    the bytes of each on-chip memory (inp, wgt, acc) and the DRAM port's bytes per cycle."""
    return {"kind": "npu", "name": config.name, "rows": config.array.rows,
            "cols": config.array.cols, "dataflow": config.array.dataflow,
            "clock_mhz": config.clock_mhz,
            **{f"{memory}_bytes": memory_bytes(config, memory) for memory in ELEMENT_BYTES},
            "dram_bytes_per_cycle": config.dram.bytes_per_cycle}


def cpu_machine(target: str, features: str | None) -> dict[str, Any]:
    """A CPU target as report data: its name and the features its code was built for."""
    return {"kind": "cpu", "name": target, "features": features or ""}


def machine_line(machine: Mapping[str, Any]) -> str:
    """The machine as one line: ``npu-16x16: 16x16 weight_stationary array, 700 MHz, SRAM inp
    4 KiB + wgt 4 KiB + acc 16 KiB, DRAM port 32 bytes/cycle``; a CPU target's name and
    features; any other machine its name."""
    name = machine.get("name", "?")
    if machine.get("kind") == "npu":
        memories = " + ".join(f"{m} {_size(machine[f'{m}_bytes'])}" for m in ELEMENT_BYTES)
        return (f"{name}: {machine['rows']}x{machine['cols']} {machine['dataflow']} array, "
                f"{machine['clock_mhz']:g} MHz, SRAM {memories}, DRAM port "
                f"{machine['dram_bytes_per_cycle']:g} bytes/cycle")
    if machine.get("kind") == "cpu":
        return f"{name} ({machine['features'] or 'no extra features'})"
    return str(name)


def _size(nbytes: int) -> str:
    """Bytes in KiB or MiB where they divide evenly, else in bytes."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes:,} bytes"
