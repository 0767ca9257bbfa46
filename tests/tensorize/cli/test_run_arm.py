"""tensorize run --target arm: emit, compile, run under the emulator, count instructions."""

from __future__ import annotations

import json
import platform

import pytest

from targets.arm.qemu import qemu_binary
from tensorize.cli import main
from tests.tensorize.cli.test_run_cmd import SMALL_GEMM


@pytest.fixture
def gemm(tmp_path):
    path = tmp_path / "gemm.py"
    path.write_text(SMALL_GEMM)
    return str(path)


def test_arm_run_executes_the_object_and_matches_exactly(gemm, capsys):
    assert main(["run", gemm, "--target", "arm", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "ok   tensorize   C: arm_sdot_lane" in out
    assert "ok   run         C on unicorn" in out
    assert "all 800 elements equal (exact)" in out


def test_json_counts_one_sdot_per_intrinsic_call(gemm, capsys):
    assert main(["run", gemm, "--target", "arm", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    calls = {c["intrinsic"]: c["executed"] for c in report["calls"]}
    # Each arm_sdot_lane call is one SDOT (by element) in the object code.
    assert report["cpu"]["engine"] == "unicorn"
    assert report["cpu"]["counted"] == {"sdot": calls["arm_sdot_lane"]}
    # 40 x 20 x 24 pads to 40 x 24 x 24 (columns to the register tile): at most that many
    # MACs, 16 per SDOT.
    assert 16 * calls["arm_sdot_lane"] >= 40 * 20 * 24
    assert report["cpu"]["instructions"] > calls["arm_sdot_lane"]
    # The run names both rates, from the emulator's own counts: the kernel's useful MACs
    # and the executed ones (the padded columns included) per instruction.
    useful, executed = 40 * 20 * 24, 16 * report["cpu"]["counted"]["sdot"]
    assert report["macs"] == {"useful": useful, "executed": executed,
                              "calls": calls["arm_sdot_lane"],
                              "pad": round(1 - useful / executed, 4)}
    instructions = report["cpu"]["instructions"]
    run = next(s["detail"] for s in report["steps"] if s["step"] == "run")
    assert (f"(MACs per instruction: {useful / instructions:.2f} useful, "
            f"{executed / instructions:.2f} executed)") in run
    tensorize = next(s["detail"] for s in report["steps"] if s["step"] == "tensorize")
    assert (f"executed: {calls['arm_sdot_lane']:,} calls, {executed:,} MACs for {useful:,} "
            f"useful, pad {100 * (1 - useful / executed):.1f}% of executed MACs") in tensorize


def test_emit_code_writes_the_assembly(gemm, tmp_path):
    out = tmp_path / "gemm.s"
    assert main(["run", gemm, "--target", "arm", "--quiet", "--emit", "code",
                 "-o", str(out)]) == 0
    assert "\tsdot\tv" in out.read_text()


@pytest.mark.skipif(platform.machine().lower() in ("aarch64", "arm64"),
                    reason="an AArch64 host may run i8mm natively")
def test_i8mm_code_without_qemu_fails_the_run_with_the_reason(gemm, capsys, monkeypatch):
    monkeypatch.setattr("targets.arm.qemu.shutil.which", lambda name: None)
    assert main(["run", gemm, "--target", "arm", "--quiet", "--features",
                 "+neon,+dotprod,+i8mm"]) == 1
    out = capsys.readouterr().out
    # Chosen by cost: register-blocked SMMLA executes fewer instructions than SDOT here
    # (2,328 against 2,943 for this 40x20x24 GEMM), so i8mm is used.
    assert "ok   tensorize   C: arm_smmla" in out
    assert "skip run         not run: native: this host is x86_64, the code is aarch64; " \
        "unicorn: the emulator (unicorn) does not execute i8mm instructions; qemu-user: " \
        "qemu-user is not installed" in out
    assert "ok   run" not in out


@pytest.mark.skipif(qemu_binary() is None, reason="qemu-user (qemu-aarch64-static) is not "
                    "installed: apt-get install qemu-user-static")
def test_i8mm_code_runs_under_qemu_user_exactly(gemm, capsys):
    assert main(["run", gemm, "--target", "arm", "--quiet", "--features",
                 "+neon,+dotprod,+i8mm", "--intrinsic", "arm_smmla"]) == 0
    out = capsys.readouterr().out
    assert "ok   tensorize   C: arm_smmla" in out
    assert "ok   run         C on qemu-user" in out
    assert "all 800 elements equal (exact)" in out


def test_features_on_another_target_is_a_usage_error(gemm, capsys):
    assert main(["run", gemm, "--target", "npu", "--quiet", "--features", "+i8mm"]) == 2
    assert "--features applies to a CPU target (arm, x86), got --target npu" in \
        capsys.readouterr().err
