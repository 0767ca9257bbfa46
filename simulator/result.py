"""What one simulation run reports: cycles, per-unit time, utilisation, traffic, a trace."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
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


@dataclass(frozen=True, slots=True)
class Roofline:
    """The least time a layer can take on a machine, and which resource sets it.

    The compute limit is ``macs / (R * C)`` cycles (every PE busy every cycle); the bandwidth
    limit is ``min_dram_bytes / dram.bytes_per_cycle`` cycles (each tensor the layer reads or
    writes crosses the DRAM port once). The layer takes at least the larger of the two: the
    attainable throughput is the smaller of the array's peak and what the port can feed. The
    resource with the larger limit ``binds``.
    """

    macs: int
    min_dram_bytes: int
    compute_cycles: float
    bandwidth_cycles: float

    @classmethod
    def of(cls, macs: int, min_dram_bytes: int, config: MachineConfig) -> Roofline:
        """The roofline of ``macs`` multiply-accumulates over ``min_dram_bytes`` of tensors."""
        peak = config.array.rows * config.array.cols
        return cls(macs, min_dram_bytes, macs / peak,
                   min_dram_bytes / config.dram.bytes_per_cycle)

    @property
    def bound_cycles(self) -> float:
        """The larger limit: no schedule of the layer on this machine takes fewer cycles."""
        return max(self.compute_cycles, self.bandwidth_cycles)

    @property
    def binds(self) -> str:
        """``compute`` or ``bandwidth``: the resource whose limit is the bound."""
        return "compute" if self.compute_cycles >= self.bandwidth_cycles else "bandwidth"

    def describe(self, cycles: int) -> str:
        """One line: both limits, which binds, and how far ``cycles`` is from the bound."""
        ratio = cycles / self.bound_cycles if self.bound_cycles else 0.0
        return (f"compute limit {self.compute_cycles:,.0f} cycles ({self.macs:,} MACs), "
                f"bandwidth limit {self.bandwidth_cycles:,.0f} cycles "
                f"({self.min_dram_bytes:,} bytes at least): {self.binds}-bound; the run takes "
                f"{ratio:.2f}x the bound")


@dataclass(frozen=True, slots=True, eq=False)
class SimResult:
    """The outcome of :func:`simulator.simulate`.

    ``units`` maps load/gemm/vector/store/dram to :class:`UnitStats`; for dram, busy counts
    the cycles the shared port moved data and stall is 0 (a request waits only while the port
    is busy), and ``dram_wait`` sums the cycles requests queued for the port beyond their
    latency. ``bytes`` counts traffic per memory and direction (``dram.read``, ``inp.write``,
    ...). ``dram`` is the final DRAM
    image (the caller's array is never modified). ``functional`` says whether values were
    computed and checked or only time was. ``instructions`` counts the instructions that ran
    (each loop iteration's); ``records`` holds one event per instruction run (two per DMA).
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
    records: Sequence[Record]

    @property
    def mac_utilisation(self) -> float:
        """Useful MACs / (R * C * cycles): the fraction of the array's peak the run used."""
        peak = self.config.array.rows * self.config.array.cols * self.cycles
        return self.useful_macs / peak if peak else 0.0

    @property
    def dram_bytes(self) -> int:
        """Bytes the DMA engines moved across the DRAM port, both directions."""
        return self.bytes["dram.read"] + self.bytes["dram.write"]

    @property
    def bytes_per_cycle(self) -> float:
        """Achieved DRAM bandwidth over the whole run, in bytes per cycle."""
        return self.dram_bytes / self.cycles if self.cycles else 0.0

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
        lines.append(f"DRAM bandwidth {self.bytes_per_cycle:.2f} bytes/cycle = "
                     f"{gigabytes_per_second(self.bytes_per_cycle, self.config):.2f} GB/s "
                     f"(port {self.config.dram.bytes_per_cycle:g} bytes/cycle)")
        lines.append("")
        lines.append("bytes    " + "  ".join(f"{k} {v}" for k, v in self.bytes.items()))
        lines.append("insns    " + "  ".join(f"{k} {v}" for k, v in self.instructions.items()))
        return "\n".join(lines)


def gigabytes_per_second(bytes_per_cycle: float, config: MachineConfig) -> float:
    """A bandwidth in bytes per cycle, in GB/s (10^9 bytes) at the machine's clock."""
    return bytes_per_cycle * config.clock_mhz / 1000
