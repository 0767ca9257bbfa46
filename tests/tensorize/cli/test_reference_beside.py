"""tensorize run calls the kernel file's reference(...) on a thread of its own, beside the
run (tensorize.cli.run_cmd.ReferenceBeside), and prints what it printed when the reference
came first: the same lines in the same order (each as soon as the reference has returned),
and where the reference fails, its error alone (no step line, no step in the --json
report)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tensorize.cli import main, run_cmd

# Set once the run's steps have finished; the kernels' references wait for it, so a run
# that called them before its steps would stall (they give up after 20 s and fail).
RUN_DONE = threading.Event()
# The thread each reference ran on.
THREADS: list[str] = []

GEMM = '''
import numpy as np
from ir import script as T
from tests.tensorize.cli import test_reference_beside as test


@T.prim_func
def gemm(A: T.Buffer((20, 24), "int8"), B: T.Buffer((24, 12), "int8"),
         C: T.Buffer((20, 12), "int32")):
    for i, j, k in T.grid(20, 12, 24):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")


def reference(A, B):
    test.THREADS.append(test.threading.current_thread().name)
    WAIT
    RESULT
'''
# The reference returns once the run's steps are done (or at once).
WAIT = """if not test.RUN_DONE.wait(20):
        raise RuntimeError("the run did not go on beside the reference")"""
RIGHT = "return A.astype(np.int32) @ B.astype(np.int32)"
WRONG = "return A.astype(np.int32)"  # A's shape, not C's


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """A kernel file whose reference returns ``result``, run with the run's steps setting
    RUN_DONE once they are done."""
    RUN_DONE.clear()
    THREADS.clear()
    run_kernel = run_cmd.run_kernel

    def run_then_release(*args, **kwargs):
        try:
            return run_kernel(*args, **kwargs)
        finally:
            RUN_DONE.set()

    monkeypatch.setattr(run_cmd, "run_kernel", run_then_release)

    def write(result: str, wait: bool = True) -> str:
        path = tmp_path / "kernel.py"
        path.write_text(GEMM.replace("RESULT", result).replace("WAIT", WAIT if wait else ""))
        return str(path)
    return write


def test_the_reference_runs_beside_the_steps_which_print_in_order(kernel, capsys):
    assert main(["run", kernel(RIGHT), "--quiet"]) == 0
    assert THREADS == ["reference"]
    names = [line.split()[1] for line in capsys.readouterr().out.splitlines()]
    assert names == ["round-trip", "execute", "reference"]


def test_a_failing_reference_ends_the_run_before_any_step(kernel, capsys):
    path = kernel(WRONG)
    assert main(["run", path, "--quiet"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{path}: reference(...) requires output C of shape (20, 12), got shape " \
           "(20, 24)" in captured.err


def test_a_failing_reference_leaves_the_json_report_without_steps(kernel, capsys):
    path = kernel(WRONG)
    assert main(["run", path, "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["steps"] == [] and not report["ok"]
    assert report["error"].startswith(f"{path}: reference(...) requires output C")
    # Not the figures the run recorded meanwhile (the host run's timing_ms).
    assert set(report) == {"kernel", "func", "target", "steps", "ok", "error"}


def test_the_lines_print_once_the_reference_has_returned(kernel, capsys, monkeypatch):
    path = kernel(RIGHT, wait=False)
    printed: list[str] = []
    run_kernel = run_cmd.run_kernel

    def run_once_printed(*args, **kwargs):
        # The round-trip step is recorded before the run starts: it prints while the run
        # has not begun, once the reference (which returns at once) is done.
        deadline = time.monotonic() + 20
        while "round-trip" not in "".join(printed) and time.monotonic() < deadline:
            printed.append(capsys.readouterr().out)
            time.sleep(0.01)
        return run_kernel(*args, **kwargs)

    monkeypatch.setattr(run_cmd, "run_kernel", run_once_printed)
    assert main(["run", path, "--quiet"]) == 0
    assert "".join(printed).startswith("ok   round-trip")
