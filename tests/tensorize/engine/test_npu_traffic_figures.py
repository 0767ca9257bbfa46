"""docs/simulator.md's table of ResNet-50's DRAM traffic and cycles (*GEMM tiles and DRAM
traffic*) against what the command beside it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "simulator.md"
# The table's rows, by the machine the bench labels them with.
ROWS = {"16x16": "| 16x16 weight-stationary", "32x32": "| 32x32 output-stationary"}


def run_bench(*args: str) -> str:
    """What ``python ARGS`` prints, run from the repository root."""
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=900, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert done.returncode == 0, done.stderr
    return done.stdout


def documented() -> dict[str, list[str]]:
    """The cells of the section's table, by machine."""
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("## GEMM tiles and DRAM traffic"):]
    section = section[:section.index("\n## ", 1)]
    rows = {}
    for label, start in ROWS.items():
        line = next(l for l in section.splitlines() if l.startswith(start))
        rows[label] = [cell.strip() for cell in line.strip("|").split("|")]
    return rows


def printed(out: str) -> dict[str, list[str]]:
    """The same cells from the bench's output: network bytes previous and now, the least
    any fitting tiling moves, the worst layer now, the shapes within 1.2x now, the network
    cycles previous -> now."""
    rows = {}
    for block in out.strip().split("\n\n"):
        label = block.split()[0]
        lines = block.splitlines()[2:]
        layers = [l.split() for l in lines if re.match(r"\s*\d+ x \d+ x \d+", l)]
        worst = max(layers, key=lambda cells: float(cells[7]))
        network = next(l.split() for l in lines if l.split()[0] == "network")
        within = next(l.split() for l in lines if l.strip().startswith("within"))
        fitting = next(l.split() for l in lines if l.strip().startswith("least fitting"))
        cycles = next(l for l in lines if l.strip().startswith("network cycles"))
        before, after = re.findall(r"[\d,]{6,}", cycles)
        rows[label] = [network[1], network[2], fitting[2],
                       f"{worst[7]} ({worst[0]} x {worst[2]} x {worst[4]})",
                       f"{within[3]} of {within[5]} shapes", f"{before} -> {after}"]
    return rows


@pytest.mark.slow
def test_the_documented_traffic_and_cycles_are_what_the_bench_prints():
    out = printed(run_bench(str(ROOT / "bench" / "bench_npu_traffic.py"), "--simulate"))
    for label, cells in documented().items():
        assert cells[1:] == out[label], f"{PAGE.name}, {label}: documented {cells[1:]}"
