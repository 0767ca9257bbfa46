"""Helpers for the simulator tests: a small machine with round numbers, so expected cycle
counts can be worked out by hand from docs/simulator.md, and DRAM images."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from simulator import MachineConfig

# A 4x4 machine with simple timing: latency 100 and 16 B/cycle DRAM, array latency 2,
# 4 vector lanes with latency 3, one request per engine in flight.
SMALL = {
    "name": "small", "clock_mhz": 100,
    "array": {"rows": 4, "cols": 4, "dataflow": "weight_stationary",
              "double_buffered_weights": True, "latency": 2},
    "inp": {"rows": 64, "banks": 2},
    "wgt": {"rows": 64, "banks": 2},
    "acc": {"rows": 64, "banks": 2},
    "vector": {"lanes": 4, "latency": 3},
    "dram": {"bytes_per_cycle": 16, "latency": 100},
    "dma": {"max_outstanding": 1, "issue_cycles": 1},
    "queues": {"instruction_depth": 8, "token_depth": 4, "fetch_cycles": 1},
}


def small_machine(**changes: Any) -> MachineConfig:
    """SMALL with ``section__field=value`` changes, e.g. ``array__rows=8``."""
    data = copy.deepcopy(SMALL)
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if name:
            data[section][name] = value
        else:
            data[section] = value
    return MachineConfig.from_dict(data)


def dram_with(size: int, **regions: tuple[int, np.ndarray]) -> np.ndarray:
    """A zeroed DRAM image of ``size`` bytes with each array's raw bytes at its address."""
    image = np.zeros(size, np.uint8)
    for addr, values in regions.values():
        raw = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
        image[addr:addr + raw.size] = raw
    return image
