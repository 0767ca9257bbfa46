"""Sweep files written into a test's temporary directory, and an executor that runs
points in the test's own process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorize.sweep import run_point

MACHINES = Path(__file__).resolve().parents[3] / "examples" / "machines"

# Two small machines (8x8 and 16x8 arrays) x two small layers: four points of a fraction of
# a second each.
SMALL = f"""\
name: small
target: npu
base: {MACHINES / "npu32x32.yaml"}
vary:
  array.rows: [8, 16]
  array.cols: [8]
workloads:
  - layers:
      - {{name: g, gemm: {{m: 32, n: 16, k: 24}}}}
      - {{name: c, conv2d: {{height: 6, width: 6, channels: 8, out_channels: 8, kernel: 3}}}}
"""


@pytest.fixture
def write_sweep(tmp_path):
    """Write a sweep file (default: :data:`SMALL`) and return its path."""
    def write(text: str = SMALL, name: str = "sweep.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path
    return write


class CountingExecutor:
    """Runs the points it is handed in this process, counting them (what the runner hands
    over is the same for every executor)."""

    def __init__(self) -> None:
        self.handed: list[str] = []

    def run(self, tasks):
        for task in tasks:
            self.handed.append(task.key)
            yield task, run_point(task)
