"""The summary: machines whose every workload ran, their Pareto front, the best per workload,
and the progress line."""

from __future__ import annotations

import io
import itertools

from tensorize.sweep.progress import Progress
from tensorize.sweep.report import machines, pareto_front, summarize


def _row(index, file, workload, cycles, pes, sram, error=None):
    return {"key": f"k{index}", "index": index, "workload": workload, "machine_file": file,
            "fields": {"m": file}, "cycles": cycles, "macs": 10 * pes if cycles else None,
            "pes": pes, "sram_bytes": sram, "utilisation": 0.5, "error": error}


ROWS = [
    _row(0, "a", "g", 100, 64, 1000), _row(1, "a", "c", 50, 64, 1000),   # 150 cycles
    _row(2, "b", "g", 80, 64, 2000), _row(3, "b", "c", 40, 64, 2000),    # 120: more SRAM
    _row(4, "c", "g", 90, 64, 2000), _row(5, "c", "c", 40, 64, 2000),    # 130: b beats it
    _row(6, "d", "g", 60, 256, 1000), _row(7, "d", "c", 20, 256, 1000),  # 80: more PEs
    _row(8, "e", "g", 10, 16, 100), _row(9, "e", "c", None, 16, 100, "not tensorized"),
]


def test_the_front_keeps_the_machines_no_other_beats():
    complete = machines(ROWS, workloads=2)
    assert [m["machine_file"] for m in complete] == ["a", "b", "c", "d"]  # e failed a point
    assert complete[0]["cycles"] == 150
    assert complete[0]["utilisation"] == round((640 + 640) / (150 * 64), 6)
    front = pareto_front(complete)
    assert [m["machine_file"] for m in front] == ["a", "b", "d"]


def test_the_summary_names_the_best_and_the_failures():
    summary = summarize(ROWS, workloads=2)
    assert {w: r["machine_file"] for w, r in summary["best"].items()} == {"g": "e", "c": "d"}
    assert summary["failed"] == 1 and summary["failures"][0]["error"] == "not tensorized"


def test_the_progress_line_counts_rate_and_eta(monkeypatch):
    clock = itertools.chain([100.0], itertools.repeat(102.0))  # started, then 2 s later
    monkeypatch.setattr("tensorize.sweep.progress.time.monotonic", lambda: next(clock))
    stream = io.StringIO()
    progress = Progress(total=10, resumed=4, stream=stream, interval=0.0)
    progress.update(failed=False)
    progress.update(failed=True)
    line = stream.getvalue().splitlines()[-1]
    assert line.startswith("sweep: 6/10 points done (4 resumed), 1 failed, 1.00 points/s")
    assert line.endswith("ETA 4s")
