"""A sweep killed mid-run (SIGKILL: no cleanup at all) keeps every point it finished, and
the rerun runs only the rest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tensorize.sweep import expand, load_sweep, run_sweep
from tests.tensorize.sweep.conftest import SMALL, CountingExecutor

pytestmark = pytest.mark.slow

SIXTEEN = SMALL.replace("array.cols: [8]", "array.cols: [8, 16, 32, 64]")


def _start(path, out):
    """``tensorize sweep`` in its own process group, once it has written 3 rows."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tensorize", "sweep", str(path), "-j", "1", "--out", str(out),
         "--no-plots"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    rows = out / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if rows.exists() and rows.read_text().count("\n") >= 3:
            break
        time.sleep(0.05)
    return process


def _finished(out):
    """The rows on disk: every line whole (flushed per point)."""
    finished = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert 3 <= len(finished) < 16
    assert all(row["error"] is None and row["cycles"] > 0 for row in finished)
    return finished


def _resume_runs_the_rest(path, out, finished):
    sweep = load_sweep(path)
    rerun = CountingExecutor()
    outcome = run_sweep(sweep, out, rerun, plots=False)
    done = {row["key"] for row in finished}
    assert sorted(rerun.handed) == sorted(p.key for p in expand(sweep).points
                                          if p.key not in done)
    assert outcome.resumed == len(finished) and len(outcome.rows) == 16
    assert outcome.failed == 0


def test_a_killed_sweep_loses_no_finished_point(write_sweep, tmp_path):
    path = write_sweep(SIXTEEN)
    out = tmp_path / "out"
    process = _start(path, out)
    os.killpg(process.pid, signal.SIGKILL)  # the command and its pool, at once
    process.wait()
    _resume_runs_the_rest(path, out, _finished(out))


def test_ctrl_c_stops_the_sweep_at_once_and_loses_no_finished_point(write_sweep, tmp_path):
    path = write_sweep(SIXTEEN)
    out = tmp_path / "out"
    process = _start(path, out)
    os.killpg(process.pid, signal.SIGINT)  # what a terminal sends the foreground group
    assert process.wait(timeout=30) == 130
    _resume_runs_the_rest(path, out, _finished(out))
