"""Sweeps run on the local process pool: rows as ``tensorize run`` measures them, failed
points that do not stop the others, and resuming that runs only what is not done."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time

import pytest

from tensorize.cli import main
from tensorize.sweep import LocalExecutor, load_sweep, run_sweep
from tests.tensorize.cli.test_run_cmd import SMALL_GEMM as KERNEL
from tests.tensorize.sweep.conftest import MACHINES, CountingExecutor

# On the built-in family (16x16x16 GEMM tiles), the 8-row array cannot run the GEMM.
BUILTIN_FAMILY = """\
family: base
vary:
  array.rows: [8, 16]
workloads:
  - layers: [{name: g, gemm: {m: 32, n: 16, k: 32}}]
"""


@pytest.mark.slow  # in CI's slow pass, for the default run's time
def test_each_row_has_the_cycles_tensorize_run_measures(write_sweep, tmp_path, capsys):
    kernel = tmp_path / "gemm.py"
    kernel.write_text(KERNEL)
    sweep = load_sweep(write_sweep(f"""\
base: {MACHINES / "npu8x64.yaml"}
vary:
  array.cols: [16, 32]
  dram.bytes_per_cycle: [8]
workloads:
  - kernel: {kernel}
  - layers: [{{name: conv, conv2d: {{height: 6, width: 5, channels: 8, out_channels: 16,
                                    kernel: 3}}}}]
"""))
    outcome = run_sweep(sweep, tmp_path / "out", LocalExecutor(1), plots=False)
    assert [r["error"] for r in outcome.rows] == [None] * 4
    assert [(r["workload"], r["fields"]["array.cols"]) for r in outcome.rows] == [
        ("gemm", 16), ("conv", 16), ("gemm", 32), ("conv", 32)]
    for row in outcome.rows:
        assert row["macs"] <= row["cycles"] * row["pes"]
        assert row["utilisation"] == round(row["macs"] / (row["cycles"] * row["pes"]), 6)
    capsys.readouterr()
    for row in outcome.rows[::2]:  # the kernel file's rows, checked by the run command
        machine = tmp_path / "out" / row["machine_file"]
        assert main(["run", str(kernel), "--target", "npu", "--machine", str(machine),
                     "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["npu"]["cycles"] == row["cycles"]
        assert report["npu"]["dram"]["bytes"] == row["dram_bytes"]
        assert report["npu"]["array"] == [8, row["fields"]["array.cols"]]


def test_a_failed_point_records_its_error_and_the_others_run(write_sweep, tmp_path):
    outcome = run_sweep(load_sweep(write_sweep(BUILTIN_FAMILY)), tmp_path / "out",
                        CountingExecutor(), plots=False)
    failed, passed = outcome.rows
    assert failed["fields"] == {"array.rows": 8} and failed["cycles"] is None
    assert "not tensorized" in failed["error"] and "8 rows" in failed["error"]
    assert passed["error"] is None and passed["cycles"] > 0
    assert outcome.failed == 1
    assert outcome.summary["failures"][0]["key"] == failed["key"]


def test_a_rerun_runs_only_the_points_not_done(write_sweep, tmp_path):
    sweep = load_sweep(write_sweep(BUILTIN_FAMILY.replace("[8, 16]", "[8, 16, 32]")))
    out = tmp_path / "out"
    first = CountingExecutor()
    rows = run_sweep(sweep, out, first, plots=False).rows
    assert len(first.handed) == 3
    # The rerun hands over only the failed point (8 rows) ...
    again = CountingExecutor()
    outcome = run_sweep(sweep, out, again, plots=False)
    assert again.handed == [rows[0]["key"]] and (outcome.executed, outcome.resumed) == (1, 2)
    # ... and, with one more value, the new point as well.
    grown = load_sweep(write_sweep(BUILTIN_FAMILY.replace("[8, 16]", "[8, 16, 32, 64]")))
    third = CountingExecutor()
    outcome = run_sweep(grown, out, third, plots=False)
    assert len(third.handed) == 2 and rows[0]["key"] in third.handed
    assert [r["fields"]["array.rows"] for r in outcome.rows] == [8, 16, 32, 64]
    lines = (out / "results.csv").read_text().splitlines()
    assert len(lines) == 5 and lines[0].startswith("key,workload,array.rows,cycles")


@pytest.mark.slow
def test_a_pool_worker_that_dies_loses_no_point(write_sweep, tmp_path):
    # Workers run no user code (docs/trust.md), so the test kills one from outside, as an
    # out-of-memory kill would, while the sweep runs.
    sweep = load_sweep(write_sweep("""\
vary:
  array.rows: [8, 16, 32]
workloads:
  - layers: [{name: g, gemm: {m: 64, n: 64, k: 64}},
             {name: c, conv2d: {height: 10, width: 10, channels: 16, out_channels: 16,
                                kernel: 3}}]
"""))
    killed: list[int] = []

    rows = tmp_path / "out" / "results.jsonl"

    def kill_a_worker() -> None:
        # Once a point has finished the pool is running (a worker killed while the pool is
        # still starting can leave concurrent.futures waiting forever).
        for _ in range(6000):
            workers = multiprocessing.active_children()
            if workers and rows.exists() and rows.read_text().strip():
                os.kill(workers[0].pid, signal.SIGKILL)
                killed.append(workers[0].pid)
                return
            time.sleep(0.005)

    killer = threading.Thread(target=kill_a_worker)
    killer.start()
    outcome = run_sweep(sweep, tmp_path / "out", LocalExecutor(2), plots=False)
    killer.join()
    assert killed  # a worker did die
    assert len(outcome.rows) == 6 and outcome.executed == 6
    assert [r["error"] for r in outcome.rows] == [None] * 6
