"""The ``tensorize`` entry point: lazy start-up, and how every way of ending is reported
(user errors, --json refusals, internal errors, Ctrl-C, a closed stdout, deep kernels)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tensorize.cli
from tensorize.cli import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, main, run_cmd
from tests.tensorize.cli.test_run_cmd import SMALL_GEMM

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def gemm(tmp_path: Path) -> str:
    path = tmp_path / "gemm.py"
    path.write_text(SMALL_GEMM)
    return str(path)


def test_help_imports_no_backend() -> None:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "tensorize", "--help"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    heavy = sorted(m for m in imported
                   if m.split(".")[0] in ("targets", "llvmlite", "simulator", "numpy"))
    assert "usage: tensorize" in done.stdout
    assert not heavy, f"tensorize --help imported {heavy}"


def test_a_closed_stdout_ends_the_run_quietly(gemm: str) -> None:
    reader, writer = os.pipe()
    os.close(reader)  # nobody reads: the first write fails as under `| head` after it exits
    try:
        done = subprocess.run([sys.executable, "-m", "tensorize", "run", gemm], cwd=ROOT,
                              stdout=writer, stderr=subprocess.PIPE, text=True, timeout=120,
                              check=False)
    finally:
        os.close(writer)
    assert done.returncode == EXIT_BROKEN_PIPE
    assert done.stderr == ""


def test_json_refusal_prints_a_json_error_on_stdout(gemm: str, capsys) -> None:
    status = main(["run", gemm, "--target", "npu", "--intrinsic", "wmma_m16n16k16_f16_f32",
                   "--json"])
    out, err = capsys.readouterr()
    assert status == 2
    report = json.loads(out)
    assert report["ok"] is False
    assert "an intrinsic of target cuda" in report["error"]
    assert "error: --intrinsic requires an intrinsic of target npu" in err


def test_an_unexpected_exception_is_one_line_with_exit_1(gemm: str, capsys, monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("the engine fell over")

    monkeypatch.setattr(run_cmd, "run_kernel", broken)
    assert main(["run", gemm, "--target", "npu", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err == ("internal error: RuntimeError: the engine fell over (set TENSORIZE_DEBUG=1 "
                   "for the traceback)\n")


def test_debug_switch_shows_the_traceback(gemm: str, monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("the engine fell over")

    monkeypatch.setattr(run_cmd, "run_kernel", broken)
    monkeypatch.setenv("TENSORIZE_DEBUG", "1")
    with pytest.raises(RuntimeError, match="the engine fell over"):
        main(["run", gemm, "--target", "npu", "--quiet"])


def test_ctrl_c_during_start_up_exits_130(capsys, monkeypatch) -> None:
    def interrupted(command: str | None = None):
        raise KeyboardInterrupt

    monkeypatch.setattr(tensorize.cli, "build_parser", interrupted)
    assert main(["run", "kernel.py"]) == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "interrupted\n"


def test_ctrl_c_during_the_work_exits_130(gemm: str, monkeypatch) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_cmd, "run_kernel", interrupted)
    assert main(["run", gemm, "--target", "npu", "--quiet"]) == EXIT_INTERRUPTED


def test_a_deep_kernel_runs_past_the_default_recursion_limit(tmp_path: Path, capsys) -> None:
    # 1500 nested additions: the script front end recurses once per level, beyond the
    # default limit of 1000 frames.
    terms = " + ".join(["A[vi]"] * 1500)
    path = tmp_path / "deep.py"
    path.write_text(f'''
from ir import script as T


@T.prim_func
def deep(A: T.Buffer((16,), "int32"), C: T.Buffer((16,), "int32")):
    for i in range(16):
        with T.block("C"):
            vi = T.axis.spatial(16, i)
            C[vi] = {terms}
''')
    assert sys.getrecursionlimit() < 1500
    assert main(["run", str(path), "--quiet"]) == 0
    assert "ok   execute" in capsys.readouterr().out


# A kernel file whose build() signals that the command is at work, then works for a minute.
SLOW_BUILD = '''
import pathlib
import time


def build():
    pathlib.Path({marker!r}).write_text("at work")
    time.sleep(60)
'''


def test_ctrl_c_ends_the_console_command_quietly_at_once(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    kernel = tmp_path / "slow.py"
    kernel.write_text(SLOW_BUILD.format(marker=str(marker)))
    process = subprocess.Popen([sys.executable, "-m", "tensorize", "run", str(kernel),
                                "--target", "npu"], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            if marker.exists() or process.poll() is not None:
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert marker.exists()
    assert process.returncode == EXIT_INTERRUPTED
    assert err == "interrupted\n"
    assert out == ""


def test_json_keeps_the_steps_that_passed_when_a_step_refuses(gemm: str, capsys,
                                                              monkeypatch) -> None:
    from ir.errors import ScheduleError

    def refused(ctx, func, inputs, opts, report):
        report.step("tensorize", True, "C: a block that tensorized")
        raise ScheduleError("cache_read", "operand dst requires 64 contiguous elements")

    monkeypatch.setattr(run_cmd, "run_kernel", refused)
    assert main(["run", gemm, "--target", "npu", "--json"]) == 2
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["ok"] is False
    assert [s["step"] for s in report["steps"]] == ["round-trip", "tensorize"]
    assert "operand dst requires 64 contiguous elements" in report["error"]
    assert "operand dst requires 64 contiguous elements" in captured.err
