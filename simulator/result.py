"""What one simulation run reports: cycles, per-unit time, utilisation, traffic, a trace."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from simulator.config import MachineConfig
from simulator.isa import Instruction
from simulator.trace import Record, write_chrome_trace


@dataclass(frozen=True, slots=True)
class UnitStats:
    """One unit's cycles: ``busy`` with an instruction in flight, ``stall`` with one ready
    in its queue but held (tokens, a full token queue, an operand not yet written, the DRAM
    port), ``idle`` otherwise; busy + stall + idle = the run's cycles."""

    name: str
    busy: int
    stall: int
    idle: int
    instructions: int


@dataclass(frozen=True, slots=True, eq=False)
class SimResult:
    """The outcome of :func:`simulator.simulate`.

    ``units`` maps load/gemm/vector/store/dram to :class:`UnitStats`; for dram, busy counts
    the cycles the shared port moved data and stall is 0 (a request waits only while the port
    is busy), and ``dram_wait`` sums the cycles requests queued for the port beyond their
    latency. ``bytes`` counts traffic per memory and direction (``dram.read``, ``inp.write``,
    ...). ``dram`` is the final DRAM
    image (the caller's array is never modified). ``functional`` says whether values were
    computed and checked or only time was.
    """

    config: MachineConfig
    program: tuple[Instruction, ...]
    cycles: int
    units: Mapping[str, UnitStats]
    useful_macs: int
    bytes: Mapping[str, int]
    instructions: Mapping[str, int]
    dram_wait: int
    dram: np.ndarray
    functional: bool
    records: tuple[Record, ...]

    @property
    def mac_utilisation(self) -> float:
        """Useful MACs / (R * C * cycles): the fraction of the array's peak the run used."""
        peak = self.config.array.rows * self.config.array.cols * self.cycles
        return self.useful_macs / peak if peak else 0.0

    @property
    def microseconds(self) -> float:
        """The run's time at the machine's clock."""
        return self.cycles / self.config.clock_mhz

    def write_trace(self, path: str | os.PathLike[str]) -> None:
        """Write a Chrome trace JSON that Perfetto and chrome://tracing open."""
        write_chrome_trace(path, self.records, self.program, self.config.clock_mhz,
                           self.config.name)

    def summary(self) -> str:
        """A text table: totals, then one line per unit, then traffic and instruction mix."""
        lines = [
            (f"machine {self.config.name}: {self.cycles} cycles = {self.microseconds:.2f} us "
             f"at {self.config.clock_mhz:g} MHz"),
            (f"MAC utilisation {100 * self.mac_utilisation:.2f}% "
             f"({self.useful_macs} useful MACs on a "
             f"{self.config.array.rows}x{self.config.array.cols} array)"),
            "",
            f"{'unit':<8}{'busy':>12}{'stall':>12}{'idle':>12}{'busy %':>9}{'insns':>9}",
        ]
        for stats in self.units.values():
            share = 100 * stats.busy / self.cycles if self.cycles else 0.0
            lines.append(f"{stats.name:<8}{stats.busy:>12}{stats.stall:>12}{stats.idle:>12}"
                         f"{share:>8.1f}%{stats.instructions:>9}")
        lines.append(f"DRAM port contention: requests waited {self.dram_wait} cycles in all")
        lines.append("")
        lines.append("bytes    " + "  ".join(f"{k} {v}" for k, v in self.bytes.items()))
        lines.append("insns    " + "  ".join(f"{k} {v}" for k, v in self.instructions.items()))
        return "\n".join(lines)
