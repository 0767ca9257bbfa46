"""The cycle costs of each unit, as formulas of the machine config (docs/simulator.md derives
them). The engine combines them with the resources' availability times; tests use them to
hand-compute expected cycle counts."""

from __future__ import annotations

import math

from simulator.config import MachineConfig, RequantConfig


def dma_transfer_cycles(nbytes: int, config: MachineConfig) -> int:
    """Cycles a transfer holds the shared DRAM port: ceil(bytes / bandwidth)."""
    return math.ceil(nbytes / config.dram.bytes_per_cycle)


def dma_cycles(nbytes: int, config: MachineConfig) -> int:
    """An uncontended DMA from issue to done: latency + ceil(bytes / bandwidth)."""
    return config.dram.latency + dma_transfer_cycles(nbytes, config)


def preload_cycles(config: MachineConfig) -> int:
    """Weight preload (weight-stationary): one weight row shifts in per cycle through R rows."""
    return config.array.rows


def stream_cycles(rows: int, k: int, config: MachineConfig) -> int:
    """Cycles a GEMM occupies the array's input port.

    Weight-stationary: one input row enters per cycle, ``rows``. Output-stationary: the rows
    run as ceil(rows / R) sub-tiles of R output rows, each streaming k reduction steps and
    shifting R result rows out, so one starts every max(k, R) cycles.
    """
    if config.array.dataflow == "weight_stationary":
        return rows
    return math.ceil(rows / config.array.rows) * max(k, config.array.rows)


def drain_cycles(k: int, config: MachineConfig) -> int:
    """Cycles from the end of a GEMM's streaming until its last result is in the accumulator.

    Weight-stationary: the last input row crosses the array skewed, R - 1 rows down and C - 1
    columns across, one more cycle to leave it, then the pipeline ``latency``. Output-
    stationary: the last sub-tile, begun max(k, R) before the end, needs k + R + C - 2
    cycles to finish its last PE, R more to shift its rows out, then the ``latency``.
    """
    rows, cols, latency = config.array.rows, config.array.cols, config.array.latency
    if config.array.dataflow == "weight_stationary":
        return rows + cols - 2 + latency
    return (k + rows + cols - 2) + rows + latency - max(k, rows)


def weight_release_cycles(config: MachineConfig) -> int:
    """Cycles after streaming ends until the last input row has passed the bottom PE row,
    freeing the weight buffer it used: R - 1."""
    return config.array.rows - 1


def vector_issue_cycles(rows: int, config: MachineConfig) -> int:
    """Cycles the vector unit takes to accept ``rows`` acc rows: rows * ceil(C / lanes)."""
    return rows * math.ceil(config.array.cols / config.vector.lanes)



def requant_issue_cycles(rows: int, config: MachineConfig, stage: RequantConfig) -> int:
    """Cycles the requantisation stage ``stage`` (the machine's ``requant``) takes to accept
    ``rows`` acc rows: rows * ceil(C / requant.lanes)."""
    return rows * math.ceil(config.array.cols / stage.lanes)
